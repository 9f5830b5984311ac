"""Each fact of the configs is written once, in the base that holds it, and
the configs and the tools that share a fact read it from there."""
import re
from importlib import import_module
from pathlib import Path

import pytest
from mmengine.config import Config

CONFIG_DIR = Path(__file__).resolve().parents[2] / 'configs'
SCENE_CONFIGS = sorted(p.name for p in CONFIG_DIR.glob('*_digit-scenes.py'))
SOURCES = {p: p.read_text() for p in CONFIG_DIR.rglob('*.py')}


def written_in(pattern: str) -> list:
    return sorted(str(path.relative_to(CONFIG_DIR)) for path, text in SOURCES.items()
                  if re.search(pattern, text, re.MULTILINE))


@pytest.fixture(scope='module')
def scenes():
    return Config.fromfile(CONFIG_DIR / '_base_' / 'datasets' / 'digit_scenes.py')


@pytest.fixture(scope='module')
def classifier():
    return Config.fromfile(CONFIG_DIR / 'softnorm_tiny_digits.py')


def test_facts_written_once():
    assert written_in(r'^custom_imports =') == ['_base_/custom_imports.py']
    assert written_in(r'epoch_\d+\.pth') == ['_base_/digits_classifier.py']
    assert written_in(r'^classes =') == ['_base_/datasets/digit_scenes.py']
    assert written_in(r'^canvas =') == ['_base_/datasets/digit_scenes.py']
    assert written_in(r'mean=\[60') == ['_base_/digits_classifier.py', 'soft_tiny_digits.py']


def test_the_preparer_reads_the_class_lists_and_canvas_of_the_dataset_base(scenes):
    prepare = import_module('tools.dataset_converters.prepare_digit_scenes')
    assert prepare.DATASET_BASE == CONFIG_DIR / '_base_' / 'datasets' / 'digit_scenes.py'
    assert prepare.CLASSES == scenes.classes == tuple(str(d) for d in range(10))
    assert prepare.SEG_CLASSES == scenes.seg_classes == ('background', ) + scenes.classes
    assert prepare.DEFAULTS['canvas'] == scenes.canvas


@pytest.mark.parametrize('name', SCENE_CONFIGS)
def test_scene_configs_take_the_data_facts_from_the_dataset_base(name, scenes):
    cfg = Config.fromfile(CONFIG_DIR / name)
    classes = scenes.seg_classes if cfg.default_scope == 'mmseg' else scenes.classes
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.metainfo.classes == classes
    head = cfg.model.get('bbox_head') or cfg.model.get('decode_head') or (
        cfg.model.roi_head.bbox_head)
    assert head.num_classes == len(classes)
    assert cfg.model.backbone.img_size == scenes.canvas[0]


@pytest.mark.parametrize('name', SCENE_CONFIGS)
def test_scene_configs_start_from_the_digits_classifier(name, classifier):
    """Its last checkpoint (where tools/dist_train.sh writes it), its arch and
    its pixel normalisation."""
    cfg = Config.fromfile(CONFIG_DIR / name)
    last = classifier.train_cfg.max_epochs
    assert cfg.model.backbone.init_cfg == dict(
        type='Pretrained', prefix='backbone.',
        checkpoint=f'work_dirs/softnorm_tiny_digits/epoch_{last}.pth')
    assert cfg.model.backbone.arch == classifier.model.backbone.arch
    preprocessor = cfg.model.data_preprocessor
    assert preprocessor.mean == classifier.data_preprocessor.mean
    assert preprocessor.std == classifier.data_preprocessor.std
    assert preprocessor.bgr_to_rgb is classifier.data_preprocessor.to_rgb is False
