"""Every config builds its model and runs a train step and a validation step.

The configs run as written, through mmengine's Runner with their own
datasets classes, pipelines, optimizers and hooks; only data roots, image
sizes, batch sizes and the schedule length shrink, and dense models start
without the ImageNet checkpoint.
"""
import math
from pathlib import Path

import pytest
from helpers.tiny_datasets import make_ade20k, make_coco, make_imagenet
from mmengine.config import Config
from mmengine.runner import Runner

import mmsoft  # noqa: F401

CONFIG_DIR = Path(__file__).resolve().parents[2] / 'configs'
CONFIGS = sorted(p.name for p in CONFIG_DIR.glob('*.py'))
SMALLER = {
    'RandomResizedCrop': dict(scale=64),
    'ResizeEdge': dict(scale=72),
    'CenterCrop': dict(crop_size=64),
    'RandomResize': dict(scale=(128, 64)),
    'RandomCrop': dict(crop_size=(64, 64)),
}


def shrink_pipeline(pipeline, scope):
    for step in pipeline:
        if step['type'] in SMALLER and not (scope == 'mmpretrain'
                                            and step['type'] == 'RandomCrop'):
            step.update(SMALLER[step['type']])
        if step['type'] == 'Resize' and scope in ('mmdet', 'mmseg'):
            step.update(scale=(128, 96) if scope == 'mmdet' else (128, 64))


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp('data')
    return dict(mmpretrain=make_imagenet(root / 'imagenet'),
                mmdet=make_coco(root / 'coco'),
                mmseg=make_ade20k(root / 'ade'))


@pytest.fixture(scope='module')
def scenes(tmp_path_factory):
    """A tiny digit-scene set for the ``*_digit-scenes.py`` configs."""
    from importlib import import_module
    prepare = import_module('tools.dataset_converters.prepare_digit_scenes')
    root = tmp_path_factory.mktemp('scenes')
    prepare.prepare_digit_scenes(str(root), canvas=(64, 64), digit_size=(16, 28),
                                 num_train=4, num_val=2)
    return root


def test_every_config_is_covered():
    names = set(CONFIGS)
    for size in ('tiny', 'small', 'medium', 'large', 'huge'):
        assert f'soft_{size}_imagenet.py' in names
        assert f'softnorm_{size}_imagenet.py' in names
    for size in ('tiny', 'small', 'medium', 'large'):
        assert f'retinanet_softnorm-{size}_fpn_1x_coco.py' in names
        assert f'mask-rcnn_softnorm-{size}_fpn_1x_coco.py' in names
    for size in ('small', 'medium'):
        assert f'upernet_softnorm-{size}_512x512_160k_ade20k.py' in names


@pytest.mark.parametrize('name', CONFIGS)
def test_config_trains_and_validates(name, data, tmp_path, request):
    cfg = Config.fromfile(CONFIG_DIR / name)
    scenes = 'digit-scenes' in name
    scope = cfg.default_scope
    cfg.work_dir = str(tmp_path)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=1, val_interval=1)
    cfg.val_cfg = dict(type='ValLoop')
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    # Saving is covered by the train/test/resume tests; here it would only
    # write up to 1.3 GB per config.
    cfg.default_hooks.checkpoint = None
    if cfg.model.backbone.get('init_cfg'):
        assert cfg.model.backbone.init_cfg.type == 'Pretrained'
        assert cfg.model.backbone.init_cfg.prefix == 'backbone.'
        cfg.model.backbone.init_cfg = None
    if scope == 'mmseg':
        cfg.model.data_preprocessor.size = (64, 64)
    for key in ('train_dataloader', 'val_dataloader'):
        loader = cfg[key]
        loader.update(batch_size=2, num_workers=0, persistent_workers=False)
        if scenes:
            loader.dataset.data_root = str(request.getfixturevalue('scenes'))
        elif 'digits' not in name:
            loader.dataset.data_root = str(data[scope])
            shrink_pipeline(loader.dataset.pipeline, scope)
    if 'digits' in name:
        from importlib import import_module
        prepare = import_module('tools.dataset_converters.prepare_digits')
        prepare.prepare_digits(str(tmp_path / 'digits'))
        for key in ('train_dataloader', 'val_dataloader'):
            cfg[key].dataset.data_root = str(tmp_path / 'digits')
    if scope == 'mmdet' and scenes:
        cfg.val_evaluator.ann_file = str(
            request.getfixturevalue('scenes') / 'annotations' / 'instances_val.json')
    elif scope == 'mmdet':
        cfg.val_evaluator.ann_file = str(
            data['mmdet'] / 'annotations' / 'instances_val2017.json')
    cfg.test_dataloader = cfg.test_evaluator = cfg.test_cfg = None

    runner = Runner.from_cfg(cfg)
    runner.train()
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert math.isfinite(loss)
    val_keys = [k for k in runner.message_hub.log_scalars if k.startswith('val/')]
    assert val_keys, 'validation did not run'
