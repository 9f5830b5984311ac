"""The released checkpoints' back-off Newton inverse, image by image."""
import pytest
import torch
from helpers.kernels import landmark_kernels
from helpers.official_soft import released_newton_inv

from mmsoft.ops import (
    InverseCfg,
    backoff_initial_scale,
    bottleneck_inverse,
    gaussian_kernel,
    newton_inverse,
    newton_route_names,
    soft_lowrank_attention,
    soft_reference_attention,
    use_newton_route,
)
from mmsoft.ops.newton import _column_sums_by_product, _column_sums_of_square


def image_kernels(heads=3, m=12, d=8, seed=0, spreads=(0.15, 0.6, 1.5)):
    """Landmark kernels of one image's heads with different row sums: a tight
    cluster of landmarks (row sums near m, which triggers the back-off) next
    to spread-out ones (row sums near 1)."""
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(heads, m, d, generator=gen, dtype=torch.float64)
    points = points * torch.tensor(spreads[:heads], dtype=torch.float64)[:, None, None]
    return gaussian_kernel(points, points)


def halvings(mats, group):
    alpha = backoff_initial_scale(mats, group).flatten()
    start = 2 / mats.sum(-1).amax(-1).view(-1, group).amax(-1).repeat_interleave(group)
    return torch.log2(start / alpha).round()


@pytest.mark.parametrize('route', newton_route_names())
def test_backoff_equals_the_released_inverse_for_one_image(route):
    mats = image_kernels()
    assert mats.sum(-1).amax(-1).unique().numel() == 3  # different row sums
    assert halvings(mats, 3).max() > 0                 # the back-off is taken
    with use_newton_route(route):
        ours = newton_inverse(mats, reg=0.0, backoff=True, group=3)
        cfg = InverseCfg.from_variant('backoff')
        torch.testing.assert_close(bottleneck_inverse(mats, cfg, group=3), ours)
    torch.testing.assert_close(ours, released_newton_inv(mats))


def test_the_step_is_shared_by_the_heads_of_one_image_only():
    one, other = image_kernels(seed=1), image_kernels(seed=2, spreads=(2.0, 2.5, 3.0))
    both = torch.cat([one, other])                     # two images of 3 heads
    together = newton_inverse(both, reg=0.0, backoff=True, group=3)
    torch.testing.assert_close(together[:3], newton_inverse(one, reg=0.0, backoff=True,
                                                            group=3))
    torch.testing.assert_close(together[3:], newton_inverse(other, reg=0.0,
                                                            backoff=True, group=3))
    assert not torch.equal(halvings(both, 3)[:3], halvings(both, 3)[3:])
    # Within an image the heads share one step, unlike the per-head rule.
    assert backoff_initial_scale(one, 3).flatten().unique().numel() == 1


def test_attention_with_backoff_is_uncoupled_across_the_batch():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(6, 40, 8, generator=gen, dtype=torch.float64) * 0.3
    k = q[:, ::4].clone()
    k[3:] = k[3:] * 8                                  # the second image is far apart
    v = torch.randn(6, 40, 8, generator=gen, dtype=torch.float64)
    cfg = InverseCfg.from_variant('backoff', normalize=True)
    both = soft_lowrank_attention(q, k, v, cfg, group=3)
    for image in (slice(0, 3), slice(3, 6)):
        alone = soft_lowrank_attention(q[image], k[image], v[image], cfg, group=3)
        torch.testing.assert_close(both[image], alone)
    torch.testing.assert_close(soft_reference_attention(q, k, v, cfg, group=3), both)
    chunked = soft_lowrank_attention(q.requires_grad_(), k, v, cfg, chunk_size=7,
                                     group=3)
    torch.testing.assert_close(chunked, both)


def test_backoff_backward_is_that_of_the_inverse():
    mats = image_kernels(heads=2, m=6, spreads=(0.8, 1.4)).requires_grad_()
    rhs = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)

    def apply(a, r):
        a = (a + a.transpose(-2, -1)) / 2
        return bottleneck_inverse(a, InverseCfg(reg=0.0, backoff=True, num_iters=60),
                                  group=2) @ r

    assert torch.autograd.gradcheck(apply, (mats, rhs), eps=1e-6, atol=1e-5)


@pytest.mark.filterwarnings('ignore::FutureWarning',
                            'ignore::torch.jit.TracerWarning')
def test_backoff_traces_without_data_dependent_branches():
    mild, tight = image_kernels(spreads=(1.5, 2.0, 2.5)), image_kernels()
    assert halvings(mild, 3).max() == 0 and halvings(tight, 3).max() > 0

    def inverse(a):
        return newton_inverse(a, reg=0.0, backoff=True, group=3)

    traced = torch.jit.trace(inverse, (mild, ), check_trace=False)
    torch.testing.assert_close(traced(tight), inverse(tight))


def test_autocast_keeps_the_backoff_in_float32():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(4, 64, 8, generator=gen) * 0.3
    k, v = q[:, ::4].clone(), torch.randn(4, 64, 8, generator=gen)
    cfg = InverseCfg.from_variant('backoff')
    ref = soft_lowrank_attention(q, k, v, cfg, group=2)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = soft_lowrank_attention(q, k, v, cfg, group=2)
    assert (out.float() - ref).norm() / ref.norm() < 1e-2


def test_bad_settings_are_explained():
    with pytest.raises(ValueError, match="backoff=True needs method='newton'"):
        InverseCfg(method='solve', backoff=True)
    with pytest.raises(ValueError, match="Unknown Newton variant 'fast'"):
        InverseCfg.from_variant('fast')
    with pytest.raises(ValueError, match='do not split into groups of 4'):
        backoff_initial_scale(torch.eye(3).expand(6, 3, 3), group=4)


def test_cheap_backoff_test_equals_the_product():
    a = landmark_kernels(6, 80, spread=0.2)
    alpha = torch.logspace(-6, 0, 6, dtype=torch.float64).reshape(6, 1)
    cheap = _column_sums_of_square(a, a.sum(-1))(alpha)
    torch.testing.assert_close(cheap, _column_sums_by_product(a)(alpha))


def test_backoff_with_negative_entries_takes_the_product():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 12, 12, generator=gen, dtype=torch.float64)
    a = x @ x.transpose(-2, -1)  # symmetric, with negative entries
    eye = torch.eye(12, dtype=torch.float64)
    alpha = 2 / a.abs().sum(-1).amax(-1).amax() ** 2
    for _ in range(10):  # the released rule, written out
        if (eye - alpha * a @ a).abs().sum(-2).amax() <= 1.01:
            break
        alpha = alpha / 2
    torch.testing.assert_close(backoff_initial_scale(a, group=2).flatten(),
                               alpha.expand(2))
