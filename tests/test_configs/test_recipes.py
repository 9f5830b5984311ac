"""The configs resolve to the settings their comments and the README promise.

The ImageNet recipe is checked where it acts: the optimizer's parameter
groups of a built SOFT classifier and the learning rate its schedulers
produce epoch by epoch. Dense configs are checked after inheritance from the
toolboxes' bases.
"""
import math
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import PARAM_SCHEDULERS, DefaultScope

import mmsoft  # noqa: F401

CONFIG_DIR = Path(__file__).resolve().parents[2] / 'configs'
CONFIGS = sorted(p.name for p in CONFIG_DIR.glob('*.py'))
IMAGENET = [n for n in CONFIGS if n.endswith('_imagenet.py')]
# (lr, images per GPU) of the authors, 8 GPUs each.
SIZES = dict(tiny=(1e-3, 128), small=(1e-3, 128), medium=(3.5e-4, 32),
             large=(3.3e-4, 32), huge=(2.7e-4, 32))


def load(name: str) -> Config:
    return Config.fromfile(CONFIG_DIR / name)


@pytest.mark.parametrize('name', CONFIGS)
def test_imports_mmsoft_and_keeps_the_toolbox_scope(name):
    cfg = load(name)
    assert cfg.custom_imports == dict(imports=['mmsoft', 'mmsoft.runtime'],
                                      allow_failed_imports=False)
    expected = {'retinanet': 'mmdet', 'mask-rcnn': 'mmdet', 'upernet': 'mmseg'}
    assert cfg.default_scope == expected.get(name.split('_')[0], 'mmpretrain')
    assert cfg.model.backbone.type == 'SOFT'


@pytest.mark.parametrize('name', IMAGENET)
def test_imagenet_config_follows_the_authors_recipe(name):
    cfg = load(name)
    prefix, size, _ = name.split('_')
    lr, per_gpu = SIZES[size]
    assert cfg.model.backbone.arch == size + ('-norm' if prefix == 'softnorm' else '')
    assert cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert cfg.model.train_cfg.augments == [dict(type='Mixup', alpha=0.8),
                                            dict(type='CutMix', alpha=1.0)]
    assert cfg.train_dataloader.batch_size == per_gpu
    assert cfg.auto_scale_lr.base_batch_size == 8 * per_gpu
    assert cfg.train_dataloader.dataset.data_root == 'data/imagenet'
    optimizer = cfg.optim_wrapper.optimizer
    assert (optimizer.type, optimizer.lr, optimizer.weight_decay) == ('AdamW', lr, 0.05)
    assert cfg.optim_wrapper.clip_grad == dict(max_norm=1.0)
    assert cfg.train_cfg.max_epochs == 300
    ema, = (h for h in cfg.custom_hooks if h.type == 'EMAHook')
    assert math.isclose(1 - ema.momentum, 0.99996)

    steps = {s.type: s for s in cfg.train_pipeline}
    assert steps['RandomResizedCrop'].scale == 224
    assert steps['RandomResizedCrop'].interpolation == 'bicubic'
    assert steps['RandomResizedCrop'].get('crop_ratio_range', (0.08, 1.0)) == (0.08, 1.0)
    assert steps['RandomFlip'].prob == 0.5
    rand_augment = steps['RandAugment']
    assert rand_augment.policies == 'timm_increasing'
    assert (rand_augment.magnitude_level, rand_augment.magnitude_std) == (9, 0.5)
    assert steps['RandomErasing'].erase_prob == 0.25
    steps = {s.type: s for s in cfg.val_dataloader.dataset.pipeline}
    assert (steps['ResizeEdge'].scale, steps['ResizeEdge'].edge) == (256, 'short')
    assert steps['ResizeEdge'].interpolation == 'bicubic'
    assert steps['CenterCrop'].crop_size == 224

    # The schedule, stepped once per epoch (the configs convert it to
    # iterations with the same shape): linear from 1e-6 over the 10 warm-up
    # epochs (mmengine's LinearLR reaches the peak in the last of them),
    # then cosine down to 5e-5 at epoch 300.
    param = torch.nn.Parameter(torch.zeros(1))
    optim = torch.optim.AdamW([param], lr=lr)
    schedulers = []
    for step in cfg.param_scheduler:
        step = {k: v for k, v in step.items() if k != 'convert_to_iter_based'}
        schedulers.append(PARAM_SCHEDULERS.build(dict(step, optimizer=optim)))
    lrs = []
    for _ in range(300):
        lrs.append(optim.param_groups[0]['lr'])
        optim.step()
        for scheduler in schedulers:
            scheduler.step()
    assert math.isclose(lrs[0], 1e-6, rel_tol=1e-6)
    assert math.isclose(lrs[9], lr, rel_tol=1e-6) and max(lrs) <= lr * (1 + 1e-9)
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))
    assert all(a >= b * (1 - 1e-9) for a, b in zip(lrs[9:], lrs[10:]))
    assert math.isclose(lrs[155], (lr + 5e-5) / 2, rel_tol=1e-6)  # cosine midpoint
    # The last epoch runs one cosine step before the end: just above 5e-5.
    assert 5e-5 < lrs[-1] < 5e-5 * 1.001


def test_no_weight_decay_on_norms_biases_position_embeddings_and_class_token():
    cfg = load('soft_tiny_imagenet.py')
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    decay = {id(p): group['weight_decay']
             for group in wrapper.optimizer.param_groups for p in group['params']}
    names = dict(model.named_parameters())
    assert set(decay) == {id(p) for p in names.values()}
    for name, param in names.items():
        no_decay = (param.ndim <= 1 or 'pos_embed' in name or 'cls_token' in name)
        assert decay[id(param)] == (0.0 if no_decay else 0.05), name
    assert any('pos_embed' in n for n in names) and 'backbone.stages.3.cls_token' in names


@pytest.mark.parametrize('name', [n for n in CONFIGS if n.endswith('_coco.py')])
def test_detection_configs_use_the_pvt_1x_settings(name):
    cfg = load(name)
    optimizer = cfg.optim_wrapper.optimizer
    assert (optimizer.type, optimizer.lr, optimizer.weight_decay) == ('AdamW', 1e-4, 1e-4)
    assert set(optimizer) <= {'type', 'lr', 'weight_decay', '_scope_'}
    assert cfg.train_cfg.max_epochs == 12
    assert cfg.param_scheduler[-1].milestones == [8, 11]
    assert cfg.train_dataloader.batch_size == 2
    assert cfg.train_dataloader.dataset.data_root == 'data/coco/'
    backbone = cfg.model.backbone
    size = name.split('_')[1].split('-')[1]
    assert backbone.arch == f'{size}-norm' and backbone.out_type == 'featmap'
    assert backbone.init_cfg == dict(
        type='Pretrained', prefix='backbone.',
        checkpoint=f'checkpoints/softnorm_{size}_imagenet.pth')
    third = 288 if size == 'medium' else 320
    assert cfg.model.neck.in_channels == [64, 128, third, 512]


@pytest.mark.parametrize('name', [n for n in CONFIGS if n.endswith('_ade20k.py')])
def test_segmentation_configs_use_the_swin_upernet_settings(name):
    cfg = load(name)
    optimizer = cfg.optim_wrapper.optimizer
    assert (optimizer.type, optimizer.lr, optimizer.weight_decay) == ('AdamW', 6e-5, 0.01)
    assert cfg.param_scheduler[-1].type == 'PolyLR'
    assert cfg.train_cfg.max_iters == 160000
    assert cfg.train_dataloader.batch_size == 2
    assert cfg.train_dataloader.dataset.data_root == 'data/ade/ADEChallengeData2016'
    assert cfg.crop_size == (512, 512)
    size = name.split('_')[1].split('-')[1]
    third = 288 if size == 'medium' else 320
    assert cfg.model.decode_head.in_channels == [64, 128, third, 512]
    assert cfg.model.auxiliary_head.in_channels == third
    assert cfg.model.backbone.init_cfg.checkpoint == (
        f'checkpoints/softnorm_{size}_imagenet.pth')


def test_checkpoint_path_is_overridable_on_the_command_line():
    cfg = load('retinanet_softnorm-tiny_fpn_1x_coco.py')
    cfg.merge_from_dict({'model.backbone.init_cfg.checkpoint': 'elsewhere.pth'})
    assert cfg.model.backbone.init_cfg == dict(
        type='Pretrained', checkpoint='elsewhere.pth', prefix='backbone.')


@pytest.mark.parametrize('name', CONFIGS)
def test_name_follows_the_readme_scheme(name):
    size = '(tiny|small|medium|large|huge)'
    classification = rf'(soft|softnorm)_{size}_(imagenet|digits)\.py'
    dense = (rf'(retinanet|mask-rcnn)_(soft|softnorm)-{size}_fpn_1x_coco\.py'
             rf'|upernet_(soft|softnorm)-{size}_512x512_160k_ade20k\.py'
             rf'|(retinanet|mask-rcnn)_(soft|softnorm)-{size}_fpn_\d+e_digit-scenes\.py'
             rf'|upernet_(soft|softnorm)-{size}_\d+x\d+_\d+e_digit-scenes\.py')
    assert re.fullmatch(classification, name) or re.fullmatch(dense, name)
    scheme = (CONFIG_DIR / 'README.md').read_text()
    assert '{backbone}_{size}_{dataset}.py' in scheme
    assert '{head}_{backbone}-{size}_{neck or crop}_{schedule}_{dataset}.py' in scheme
