"""Arguments and inputs the SOFT backbone cannot use are clear errors."""
import logging

import pytest
import torch
from mmengine.logging import MMLogger

from mmsoft.models import SOFT, SOFTAttention

ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4], depths=[1, 1, 1, 1])


@pytest.mark.parametrize('kwargs,message', [
    (dict(arch=dict(ARCH, num_heads=[1, 2, 2, 3])),
     r"Stage 4: arch\['embed_dims'\]\[3\]=64 is not divisible by "
     r"arch\['num_heads'\]\[3\]=3"),
    (dict(arch=dict(ARCH, num_heads=[1, 2, 0, 4])),
     r"arch\['num_heads'\] must hold whole numbers >= 1, got \[1, 2, 0, 4\]"),
    (dict(arch=dict(ARCH, depths=[1, -1, 1, 1])),
     r"arch\['depths'\] must hold whole numbers >= 0"),
    (dict(arch=dict(ARCH, conv_sizes=[9, 4, 3])), r"arch\['conv_sizes'\] must hold odd"),
    (dict(arch=ARCH, img_size=-32), r'img_size must be a whole number >= 1 .*got -32'),
    (dict(arch=ARCH, in_channels=0), r'in_channels must be a whole number >= 1, got 0'),
    (dict(arch=ARCH, drop_path_rate=-0.1), r'drop_path_rate must be in \[0, 1\), got -0.1'),
    (dict(arch=ARCH, drop_path_rate=1.5), r'drop_path_rate must be in \[0, 1\), got 1.5'),
    (dict(arch=ARCH, drop_rate=1.0), r'drop_rate must be in \[0, 1\), got 1.0'),
])
def test_bad_arguments_are_named_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SOFT(**kwargs)


@pytest.mark.parametrize('out_type,out_indices,shapes', [
    ('cls_token', -1, [(0, 64)]),
    ('featmap', (0, 1, 2, 3), [(0, 16, 16, 17), (0, 32, 8, 9), (0, 32, 4, 5),
                               (0, 64, 2, 3)]),
])
def test_a_batch_of_no_images_gives_empty_outputs(out_type, out_indices, shapes):
    model = SOFT(arch=ARCH, out_type=out_type, out_indices=out_indices).eval()
    outs = model(torch.rand(0, 3, 64, 65))
    assert [tuple(o.shape) for o in outs] == shapes


@pytest.mark.parametrize('requires_grad', [False, True])
def test_attention_on_a_batch_of_no_images_is_empty(requires_grad):
    attn = SOFTAttention(embed_dims=32, num_heads=2, sr_ratio=2).eval()
    x = torch.rand(0, 64 * 64, 32, requires_grad=requires_grad)
    with torch.set_grad_enabled(requires_grad):
        assert attn(x, (64, 64)).shape == (0, 64 * 64, 32)


def test_batch_one_training_at_the_minimum_size_is_explained():
    model = SOFT(arch=ARCH).train()
    with pytest.raises(ValueError, match=r'batch 1 at 32 x 32 px gives stage 4 a '
                       r'1 x 1 map.*batches of 2 or more, or inputs of more than '
                       r'32 px on one side'):
        model(torch.rand(1, 3, 32, 32))
    model(torch.rand(1, 3, 32, 33))  # the documented way out works
    model(torch.rand(2, 3, 32, 32))
    model.eval()(torch.rand(1, 3, 32, 32))


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float64])
def test_input_of_another_dtype_says_to_cast_or_autocast(dtype):
    model = SOFT(arch=ARCH).eval()
    with pytest.raises(TypeError, match=rf'dtype {dtype} does not match the model\'s '
                       r'torch.float32 weights; cast the input.*torch.autocast'):
        model(torch.rand(1, 3, 64, 64).to(dtype))


def test_integer_images_say_to_convert():
    with pytest.raises(TypeError, match=r'floating-point images, got torch.uint8; '
                       r'convert them with x.float\(\)'):
        SOFT(arch=ARCH).eval()(torch.zeros(1, 3, 64, 64, dtype=torch.uint8))


def test_bfloat16_input_runs_under_autocast():
    model = SOFT(arch=ARCH).eval()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        (out, ) = model(torch.rand(1, 3, 64, 64).to(torch.bfloat16))
    assert torch.isfinite(out.float()).all()


class Collect(logging.Handler):

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines += record.getMessage().splitlines()


def test_init_weights_logs_one_honest_summary():
    model = SOFT(arch=ARCH)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    logger = MMLogger.get_current_instance()
    collect = Collect()
    logger.addHandler(collect)
    try:
        model.init_weights()
    finally:
        logger.removeHandler(collect)
    changed = sum(not torch.equal(p, before[n]) for n, p in model.named_parameters())
    total = len(before)
    assert 0 < changed < total
    assert not any('the same before and after' in line for line in collect.lines)
    assert collect.lines == [
        f'SOFT.init_weights: {changed} of {total} parameter tensors initialised, '
        f"{total - changed} keep the values they were built with (PyTorch's "
        'defaults).']
    assert not hasattr(model, '_params_init_info')


class CoarserSOFT(SOFT):
    """A backbone publishing a geometry of its own: maps half as fine."""

    @property
    def stage_strides(self):
        return [2 * stride for stride in super().stage_strides]

    def stage_grids(self, height, width):
        return [(max(h // 2, 1), max(w // 2, 1))
                for h, w in super().stage_grids(height, width)]


def test_the_checks_read_the_geometry_the_backbone_publishes():
    model = CoarserSOFT(arch=ARCH, out_type='featmap', out_indices=(0, 1, 2, 3)).eval()
    outs = model(torch.rand(0, 3, 64, 65))
    assert [tuple(o.shape[2:]) for o in outs] == model.stage_grids(64, 65)
    with pytest.raises(ValueError, match=r'batch 1 at 32 x 64 px gives stage 4 a '
                       r'1 x 1 map.*inputs of more than 64 px on one side'):
        model.train()(torch.rand(1, 3, 32, 64))
    SOFT(arch=ARCH).train()(torch.rand(1, 3, 32, 64))  # 1 x 2 in SOFT's own geometry
