"""SOFTAttention with the released back-off inverse, and the backbone's choice."""
import pytest
import torch

from mmsoft.models import SOFT, SOFTAttention


def test_backoff_attention_is_uncoupled_across_the_batch():
    torch.manual_seed(0)
    attn = SOFTAttention(32, 4, sr_ratio=4, conv_size=5, normalize=True,
                         inverse=dict(variant='backoff')).double()
    x = torch.randn(3, 12 * 16, 32, dtype=torch.float64)
    x[2] *= 30  # an outlier image must not change the others
    together = attn(x, (12, 16))
    for i in range(3):
        torch.testing.assert_close(together[i:i + 1], attn(x[i:i + 1], (12, 16)))
    reference = SOFTAttention(32, 4, sr_ratio=4, conv_size=5, normalize=True,
                              inverse=dict(variant='backoff'), impl='reference')
    reference.load_state_dict(attn.state_dict())
    torch.testing.assert_close(reference.double()(x, (12, 16)), together)


def test_backbone_inverse_choice():
    assert SOFT(arch='tiny').newton == 'ridge'          # training from scratch
    model = SOFT(arch='tiny-norm', newton='backoff')
    assert model.newton == 'backoff' and int(model.newton_variant) == 1
    attn = model.stages[1].blocks[0].attn
    assert attn.normalize and attn.inverse.backoff and attn.inverse.reg == 0
    solve = SOFT(arch='tiny', attn_cfg=dict(type='SOFTAttention',
                                            inverse=dict(method='solve')))
    assert solve.newton is None and int(solve.newton_variant) == -1
    peer = SOFT(arch='tiny', attn_cfg=dict(type='SoftmaxAttention2d'))
    assert peer.newton is None and peer.soft_attentions == []


def test_backbone_inverse_errors_are_explained():
    with pytest.raises(ValueError, match="Unknown Newton variant 'exact'"):
        SOFT(arch='tiny', newton='exact')
    with pytest.raises(ValueError, match='Set the inverse once'):
        SOFT(arch='tiny', newton='ridge',
             attn_cfg=dict(type='SOFTAttention', inverse=dict(num_iters=5)))
    with pytest.raises(ValueError, match="newton='backoff' sets the inverse of SOFT "
                       "attention, but attn_cfg type 'PerformerAttention' has none"):
        SOFT(arch='tiny', newton='backoff', attn_cfg=dict(type='PerformerAttention'))
    with pytest.raises(ValueError, match='Set normalize on SOFTAttention'):
        SOFTAttention(32, 2, inverse=dict(normalize=True))
    with pytest.raises(TypeError, match=r"inverse must be a dict of InverseCfg fields "
                       r"\['method', .*'variant'\] \(variant: one of \['ridge', "
                       r"'backoff'\]\), an InverseCfg or None; got 'fast'"):
        SOFT(arch='tiny', attn_cfg=dict(type='SOFTAttention', inverse='fast'))
    with pytest.raises(ValueError, match=r"mode='exact' .* does not use \['inverse'\]"):
        SOFTAttention(32, 2, mode='exact', inverse=dict(variant='backoff'))
    with pytest.raises(ValueError, match="impl='reference' never chunks"):
        SOFTAttention(32, 2, impl='reference', chunk_size=64)
