"""tools/analysis/visualize_predictions.py: mmdet's and mmseg's visualisers on scenes."""
from pathlib import Path

import pytest
import torch
from helpers.tools import load_tool
from mmengine.config import Config
from mmengine.registry import DefaultScope
from PIL import Image

import mmsoft  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


tool = load_tool(REPO / 'tools' / 'analysis' / 'visualize_predictions.py')
scenes = load_tool(REPO / 'tools' / 'dataset_converters' / 'prepare_digit_scenes.py')


@pytest.fixture(scope='module')
def image(tmp_path_factory):
    root = tmp_path_factory.mktemp('scenes')
    scenes.prepare_digit_scenes(str(root), canvas=(64, 64), digit_size=(16, 28),
                                num_train=1, num_val=1)
    return root / 'img_dir' / 'val' / '00000.png'


@pytest.mark.parametrize('name,scope,classes', [
    ('retinanet_softnorm-tiny_fpn_6e_digit-scenes.py', 'mmdet', scenes.CLASSES),
    ('upernet_softnorm-tiny_96x96_10e_digit-scenes.py', 'mmseg', scenes.SEG_CLASSES),
])
def test_draws_predictions_of_a_checkpoint(name, scope, classes, image, tmp_path):
    cfg = Config.fromfile(REPO / 'configs' / name)
    cfg.model.backbone.init_cfg = None
    registry = {'mmdet': 'mmdet.registry', 'mmseg': 'mmseg.registry'}[scope]
    models = __import__(registry, fromlist=['MODELS']).MODELS
    with DefaultScope.overwrite_default_scope(scope):
        model = models.build(cfg.model)
    model.init_weights()
    checkpoint = tmp_path / 'model.pth'
    meta = dict(classes=classes)
    if scope == 'mmseg':
        meta['palette'] = cfg.metainfo.palette  # the training set's metainfo
    torch.save(dict(state_dict=model.state_dict(), meta=dict(dataset_meta=meta)),
               checkpoint)
    written = tool.visualize(str(REPO / 'configs' / name), str(checkpoint),
                             [str(image)], str(tmp_path / 'out_'), score_thr=0.0,
                             scale=2)
    assert written == [tmp_path / 'out_00000.png']
    picture = Image.open(written[0])
    assert picture.format == 'PNG' and picture.size == (128, 128)


def test_rejects_a_classification_config(image, tmp_path):
    with pytest.raises(ValueError, match="default_scope 'mmpretrain'.*mmdet or mmseg"):
        tool.visualize(str(REPO / 'configs' / 'soft_tiny_digits.py'), 'x.pth',
                       [str(image)], str(tmp_path / 'out_'))
