"""The SOFT backbone: presets, outputs, training switches, scopes and errors."""
import pytest
import torch
from mmengine.registry import MODELS, DefaultScope

from mmsoft.models import SOFT

SMALL_ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                  depths=[1, 1, 2, 1])


def small(**kwargs):
    torch.manual_seed(0)
    model = SOFT(arch=SMALL_ARCH, **kwargs)
    model.init_weights()
    return model


@pytest.mark.parametrize('arch,params_m', [('tiny', 13), ('small', 24),
                                           ('medium', 45), ('large', 64),
                                           ('huge', 87)])
def test_preset_parameter_counts_match_the_paper(arch, params_m):
    model = SOFT(arch=arch)
    head = model.embed_dims[3] * 1000 + 1000  # Linear(C4, 1000) classifier
    count = sum(p.numel() for p in model.parameters()) + head
    assert abs(count / 1e6 - params_m) / params_m < 0.02, count


def test_aliases_and_norm_twins():
    assert SOFT.parse_arch('t') == SOFT.parse_arch('tiny')
    assert SOFT.parse_arch('s')['depths'] == [1, 3, 7, 4]  # the paper's small
    norm = SOFT(arch='t-norm')
    assert norm.stages[0].blocks[0].attn.normalize
    assert not SOFT(arch='tiny').stages[0].blocks[0].attn.normalize


@pytest.mark.parametrize('size', [(224, 224), (511, 511), (112, 137), (32, 32),
                                  (97, 33)])
def test_featmap_shapes_and_strides(size):
    model = small(out_type='featmap', out_indices=(0, 1, 2, 3)).eval()
    feats = model(torch.rand(1, 3, *size))
    assert model.out_channels == [16, 32, 32, 64]
    assert model.out_strides == [4, 8, 16, 32]
    height, width = size
    for feat, channels, stride in zip(feats, model.out_channels, model.out_strides):
        # ceil division at every stride-2 convolution
        expected = (-(-height // stride), -(-width // stride))
        assert feat.shape == (1, channels, *expected)


def test_out_indices_select_and_negative_indices():
    model = small(out_type='featmap', out_indices=(-3, 0)).eval()
    feats = model(torch.rand(1, 3, 64, 64))
    assert [f.shape[1] for f in feats] == [16, 32]
    assert model.num_stages == 2  # later stages are not built
    assert len(model.stages) == 2


def test_tiny_preset_full_forward_both_types():
    model = SOFT(arch='tiny', out_type='featmap', out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        feats = model(torch.rand(1, 3, 224, 224))
    assert [tuple(f.shape) for f in feats] == [(1, 64, 56, 56), (1, 128, 28, 28),
                                               (1, 320, 14, 14), (1, 512, 7, 7)]
    with torch.no_grad():
        (cls,) = SOFT(arch='tiny').eval()(torch.rand(2, 3, 224, 224))
    assert cls.shape == (2, 512)


@pytest.mark.parametrize('out_type', ['cls_token', 'featmap'])
def test_every_parameter_gets_a_finite_gradient(out_type):
    kwargs = dict(out_indices=(0, 1, 2, 3)) if out_type == 'featmap' else {}
    model = small(out_type=out_type, drop_path_rate=0.1, **kwargs).train()
    outs = model(torch.rand(2, 3, 64, 64))
    sum(o.square().mean() for o in outs).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name


def test_frozen_stages_stop_grads_and_keep_eval_mode():
    model = small(frozen_stages=2).train()
    for name, param in model.named_parameters():
        frozen = name.split('.')[0] == 'stages' and int(name.split('.')[1]) < 2
        assert param.requires_grad != frozen, name
    assert not model.stages[1].patch_embed.training and not model.stages[1].training
    assert model.stages[2].training and model.stages[2].patch_embed.training
    stem_only = small(frozen_stages=0).train()
    assert not stem_only.stages[0].patch_embed.proj[1].training
    assert stem_only.stages[0].training
    everything = small(frozen_stages=4)
    assert not any(p.requires_grad for p in everything.parameters())


def test_norm_eval_keeps_batchnorm_in_eval_mode():
    model = small(norm_eval=True).train()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(bn.training for bn in bns)
    assert model.stages[0].training


def test_with_cp_gives_the_same_outputs_and_grads():
    x = torch.rand(2, 3, 64, 64)
    results = []
    for with_cp in (False, True):
        model = small(with_cp=with_cp, out_type='featmap',
                      out_indices=(0, 1, 2, 3)).train()
        inp = x.clone().requires_grad_()
        outs = model(inp)
        sum(o.sum() for o in outs).backward()
        results.append((outs, inp.grad,
                        [p.grad.clone() for p in model.parameters()]))
    (outs_a, gx_a, gp_a), (outs_b, gx_b, gp_b) = results
    for a, b in zip(outs_a, outs_b):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(gx_a, gx_b)
    for a, b in zip(gp_a, gp_b):
        torch.testing.assert_close(a, b)


def test_drop_path_modes():
    official = small(drop_path_rate=0.3)
    assert isinstance(official.stages[2].blocks[1].drop_path, torch.nn.Dropout)
    stochastic = small(drop_path_rate=0.3, drop_path_mode='droppath')
    assert type(stochastic.stages[2].blocks[1].drop_path).__name__ == 'DropPath'
    rates = [b.drop_path.p if hasattr(b.drop_path, 'p') else b.drop_path.drop_prob
             for stage in official.stages for b in stage.blocks]
    torch.testing.assert_close(torch.tensor(rates), torch.linspace(0, 0.3, 5))


def test_layer_depths_for_layer_decay():
    model = small()
    num_layers = sum(SMALL_ARCH['depths']) + 2
    assert model.get_layer_depth('backbone.stages.0.patch_embed.proj.0.weight',
                                 'backbone.') == (0, num_layers)
    assert model.get_layer_depth('backbone.stages.0.blocks.0.attn.q.weight',
                                 'backbone.') == (1, num_layers)
    assert model.get_layer_depth('backbone.stages.2.blocks.1.mlp.fc1.weight',
                                 'backbone.') == (4, num_layers)
    assert model.get_layer_depth('backbone.norm.weight', 'backbone.')[0] == \
        num_layers - 1
    assert model.get_layer_depth('head.fc.weight', 'backbone.')[0] == num_layers - 1


@pytest.mark.parametrize('scope', [None, 'mmpretrain', 'mmdet', 'mmseg'])
def test_builds_from_every_scope(scope):
    cfg = dict(arch=SMALL_ARCH, out_type='featmap', out_indices=(0, 1))
    if scope is None:
        model = MODELS.build(dict(type='mmsoft.SOFT', **cfg))
    else:
        __import__(f'{scope}.registry')
        with DefaultScope.overwrite_default_scope(scope):
            model = MODELS.build(dict(type='SOFT', **cfg))
    assert isinstance(model, SOFT)


def test_bad_configs_are_explained():
    with pytest.raises(ValueError,
                       match=r"Unknown SOFT arch 'tinny'; valid names: .*tiny"):
        SOFT(arch='tinny')
    with pytest.raises(ValueError, match=r"missing \['depths'\]"):
        SOFT(arch=dict(embed_dims=[8] * 4, num_heads=[1] * 4))
    with pytest.raises(ValueError, match=r"unknown keys \['depth'\]"):
        SOFT(arch=dict(SMALL_ARCH, depth=3))
    with pytest.raises(ValueError, match='out_indices 4 is out of range'):
        SOFT(arch=SMALL_ARCH, out_type='featmap', out_indices=(0, 4))
    with pytest.raises(ValueError, match="out_type='cls_token' reads the class token"):
        SOFT(arch=SMALL_ARCH, out_indices=(1, 3))
    with pytest.raises(ValueError, match=r'frozen_stages must be in \[-1, 4\]'):
        SOFT(arch=SMALL_ARCH, frozen_stages=5)
    with pytest.raises(ValueError, match="Unknown out_type 'tokens'"):
        SOFT(arch=SMALL_ARCH, out_type='tokens')


def test_bad_input_is_explained():
    model = small().eval()
    with pytest.raises(ValueError, match='built for 3 input channels but got 1'):
        model(torch.rand(1, 1, 64, 64))
    with pytest.raises(ValueError, match=r'shape \(B, C, H, W\), got 3-D'):
        model(torch.rand(3, 64, 64))
    with pytest.raises(ValueError, match='smaller than the minimum 32 x 32 px'):
        model(torch.rand(1, 3, 31, 64))
    with pytest.raises(TypeError, match='expects a Tensor, got list'):
        model([torch.rand(3, 64, 64)])


def test_non_finite_input_is_an_error_unless_switched_off():
    x = torch.rand(1, 3, 64, 64)
    x[0, 0, 3, 3] = float('nan')
    with pytest.raises(ValueError, match='1 NaN or Inf values.*check_finite=False'):
        small().eval()(x)
    (out,) = small(check_finite=False).eval()(x)
    assert torch.isnan(out).any()  # documented: no silent repair either


@pytest.mark.parametrize('out_type,out_indices', [('cls_token', -1),
                                                  ('featmap', (0, 1, 2, 3))])
def test_a_finite_input_that_overflows_names_the_stage(out_type, out_indices):
    x = torch.full((1, 3, 64, 64), 1e30)
    kwargs = dict(out_type=out_type, out_indices=out_indices)
    with pytest.raises(ValueError, match=r'Stage 1 of SOFT gave NaN or Inf outputs '
                       r'from a finite input \(largest magnitude 1e\+30, '
                       r'torch.float32\).*Normalise the images.*check_finite=False'):
        small(**kwargs).eval()(x)
    outs = small(check_finite=False, **kwargs).eval()(x)
    assert not torch.isfinite(outs[-1]).all()   # what the check reports


def test_float16_autocast_leaves_an_overflowing_step_to_the_gradient_scaler():
    model = small(out_type='featmap', out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        model.stages[2].blocks[0].mlp.fc1.weight[0, 0] = float('inf')
    x = torch.rand(1, 3, 64, 64)
    with torch.autocast('cpu', dtype=torch.float16):
        outs = model(x)  # no stage check: the scaler skips such a step
    assert not torch.isfinite(outs[2]).all()
    with torch.autocast('cpu', dtype=torch.bfloat16), pytest.raises(
            ValueError, match='Stage 3 of SOFT gave NaN or Inf outputs'):
        model(x)


def test_a_stage_with_non_finite_weights_is_named():
    model = small().eval()
    with torch.no_grad():
        model.stages[2].blocks[0].mlp.fc1.weight[0, 0] = float('inf')
    with pytest.raises(ValueError, match=r'Stage 3 of SOFT gave NaN or Inf outputs '
                       r'from a finite input .*the weights hold NaN or Inf'):
        model(torch.rand(1, 3, 64, 64))
