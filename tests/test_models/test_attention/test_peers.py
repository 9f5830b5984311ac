"""Peer attentions: each against the plain maths it approximates."""
import pytest
import torch
from mmengine.registry import MODELS, DefaultScope

from mmsoft.models import (
    SOFT,
    NystromAttention,
    PerformerAttention,
    SoftmaxAttention2d,
    SpatialReductionAttention,
)

PEERS = [SoftmaxAttention2d, SpatialReductionAttention, PerformerAttention,
         NystromAttention]


def tokens(height=8, width=10, channels=32, batch=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, height * width, channels, generator=gen) * 0.5


def with_weights_of(module, reference):
    module.load_state_dict(reference.state_dict(), strict=False)
    return module


def test_sdpa_equals_plain_softmax():
    torch.manual_seed(0)
    fused = SoftmaxAttention2d(32, 2)
    plain = with_weights_of(SoftmaxAttention2d(32, 2, use_sdpa=False), fused)
    x = tokens()
    torch.testing.assert_close(fused(x, (8, 10)), plain(x, (8, 10)), rtol=1e-5,
                               atol=1e-6)


def test_reduction_one_is_softmax_attention():
    torch.manual_seed(0)
    softmax = SoftmaxAttention2d(32, 2)
    sra = with_weights_of(SpatialReductionAttention(32, 2, sr_ratio=1), softmax)
    x = tokens()
    torch.testing.assert_close(sra(x, (8, 10)), softmax(x, (8, 10)), rtol=1e-5,
                               atol=1e-6)
    reduced = SpatialReductionAttention(32, 2, sr_ratio=2)
    assert reduced(x, (8, 10)).shape == x.shape


def test_nystrom_with_every_token_a_landmark_is_softmax_attention():
    torch.manual_seed(0)
    softmax = SoftmaxAttention2d(32, 2)
    nystrom = with_weights_of(NystromAttention(32, 2, sr_ratio=1, num_iters=20),
                              softmax).double()
    x = tokens().double()
    ref = softmax.double()(x, (8, 10))
    out = nystrom(x, (8, 10))
    assert (out - ref).norm() / ref.norm() < 1e-3


def test_performer_approaches_softmax_with_many_features():
    torch.manual_seed(0)
    softmax = SoftmaxAttention2d(32, 2)
    x = tokens()
    ref = softmax(x, (8, 10))
    errors = []
    for features in (16, 4096):
        performer = with_weights_of(PerformerAttention(32, 2, num_features=features),
                                    softmax)
        performer.redraw_features()
        errors.append(((performer(x, (8, 10)) - ref).norm() / ref.norm()).item())
    assert errors[1] < errors[0] and errors[1] < 0.1, errors


@pytest.mark.parametrize('peer', PEERS)
def test_peers_plug_into_the_backbone_and_train(peer):
    torch.manual_seed(0)
    model = SOFT(arch=dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                           depths=[1, 1, 1, 1]),
                 attn_cfg=dict(type=peer.__name__))
    assert isinstance(model.stages[0].blocks[0].attn, peer)
    (out,) = model(torch.rand(2, 3, 45, 61))
    out.sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet', 'mmseg'])
def test_peers_build_under_each_scope(scope):
    __import__(f'{scope}.registry')
    with DefaultScope.overwrite_default_scope(scope):
        for peer in PEERS:
            assert isinstance(MODELS.build(dict(type=peer.__name__, embed_dims=32,
                                                num_heads=2)), peer)
