"""The token-mixer contract, for every registered mixer."""
import inspect

import pytest
import torch
import torch.nn as nn

import mmsoft  # noqa: F401
from mmsoft.models import SOFT
from mmsoft.models.attention import token_mixer
from mmsoft.models.attention.token_mixer import (
    MIXER_HINTS,
    TokenMixer,
    build_token_mixer,
    declared_arguments,
)
from mmsoft.registry import MODELS

MIXERS = sorted({cls for cls in MODELS.module_dict.values()
                 if inspect.isclass(cls) and issubclass(cls, TokenMixer)},
                key=lambda cls: cls.__name__)
HINTS = dict(sr_ratio=2, conv_size=3, normalize=True, inverse=dict(num_iters=10))


def test_every_mixer_is_registered_and_found():
    names = {cls.__name__ for cls in MIXERS}
    assert {'SOFTAttention', 'SoftmaxAttention2d', 'SpatialReductionAttention',
            'PerformerAttention', 'NystromAttention'} <= names


@pytest.mark.parametrize('mixer', MIXERS, ids=lambda cls: cls.__name__)
def test_mixer_follows_the_contract(mixer):
    torch.manual_seed(0)
    declared = declared_arguments(mixer)
    assert declared[1:3] == ('embed_dims', 'num_heads')
    # Built with every hint, it receives exactly those it declares.
    module = build_token_mixer(dict(type=mixer.__name__), 32, 2, **HINTS)
    assert isinstance(module, mixer)
    assert set(declared) & set(MIXER_HINTS) <= set(MIXER_HINTS)
    if 'sr_ratio' in declared:
        assert module.sr_ratio == 2
    if 'inverse' in declared:
        assert module.normalize and module.inverse.num_iters == 10
    # Tokens (B, N, C) on an H x W grid in, (B, N, C) out, gradients flow.
    x = torch.randn(2, 6 * 10, 32, requires_grad=True)
    out = module(x, (6, 10))
    assert out.shape == x.shape and torch.isfinite(out).all()
    out.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    # Bad tokens are explained the same way by every mixer.
    with pytest.raises(ValueError, match=r'60 tokens but hw_shape \(6, 9\)'):
        module(x.detach(), (6, 9))
    with pytest.raises(ValueError, match='Expected 32 channels per token, got 16'):
        module(torch.randn(2, 60, 16), (6, 10))


def test_mixers_do_not_declare_hints_they_ignore():
    for cls in MIXERS:
        declared = declared_arguments(cls)
        assert 'conv_size' not in declared or cls.__name__ == 'SOFTAttention'


def test_config_values_win_over_hints():
    module = build_token_mixer(dict(type='SOFTAttention', sr_ratio=4), 32, 2,
                               sr_ratio=2, normalize=True)
    assert module.sr_ratio == 4 and module.normalize


def test_a_mixer_that_needs_nothing_else_plugs_into_the_backbone():
    class Identity(nn.Module):
        def __init__(self, embed_dims, num_heads):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(embed_dims))

        def forward(self, x, hw_shape):
            return x * self.scale

    model = SOFT(arch=dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                           depths=[1, 1, 1, 1]), attn_cfg=dict(type=Identity))
    assert isinstance(model.stages[0].blocks[0].attn, Identity)
    (out,) = model(torch.rand(1, 3, 64, 64))
    assert out.shape == (1, 64)


def test_bad_mixer_configs_are_explained():
    with pytest.raises(KeyError, match="Token mixer 'NoSuchAttention' is not "
                       'registered'):
        build_token_mixer(dict(type='NoSuchAttention'), 32, 2)
    with pytest.raises(ValueError, match='needs a type'):
        build_token_mixer(dict(sr_ratio=2), 32, 2)
    with pytest.raises(ValueError, match=r"Unknown token-mixer hints \['window'\]"):
        build_token_mixer(dict(type='SOFTAttention'), 32, 2, window=7)


def test_one_home_for_the_token_check():
    from mmsoft.models.attention import peers, soft_attention
    assert not hasattr(soft_attention, 'check_tokens')
    assert not hasattr(peers, 'check_tokens')
    assert token_mixer.check_tokens.__module__ == token_mixer.__name__
