"""SOFTAttention: spec numerics, options, precision, batch independence, errors."""
import pytest
import torch
import torch.nn.functional as F
from mmengine.registry import MODELS, DefaultScope

from mmsoft.models import SOFTAttention
from mmsoft.ops import newton_route_names, use_newton_route


def make(seed=0, **kwargs):
    torch.manual_seed(seed)
    cfg = dict(embed_dims=32, num_heads=2, sr_ratio=4, conv_size=5)
    cfg.update(kwargs)
    return SOFTAttention(**cfg)


def tokens(batch=2, height=12, width=16, channels=32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, height * width, channels, generator=gen)


def spec_forward(attn, x, hw):
    """The spec's section 1, written step by step with plain torch."""
    batch, n, c = x.shape
    h, d, r = attn.num_heads, attn.head_dims, attn.sr_ratio
    height, width = hw
    q = F.linear(x, attn.q.weight, attn.q.bias).view(batch, n, h, d)
    q = q.permute(0, 2, 1, 3) * d**-0.25                       # (B, h, N, d)
    v = F.linear(x, attn.v.weight, attn.v.bias).view(batch, n, h, d)
    v = v.permute(0, 2, 1, 3)
    out = torch.empty_like(v)
    for b in range(batch):
        for head in range(h):
            qm = q[b, head].t().reshape(1, d, height, width)
            lm = F.conv2d(qm, attn.landmark_conv.weight, stride=r)
            lm = lm.flatten(2)[0].t()                          # (m, d)
            lm = F.gelu(F.layer_norm(lm, (d,), attn.landmark_norm.weight,
                                     attn.landmark_norm.bias, 1e-5))
            dist = lambda a, b_: ((a[:, None] - b_[None]) ** 2).sum(-1)  # noqa: E731
            a1 = torch.exp(-dist(q[b, head], lm) / 2)
            a2 = torch.exp(-dist(lm, lm) / 2)
            p = a2 + 0.01 * torch.eye(len(lm))
            alpha = 0.9 * 2 / a2.sum(-1).max() ** 2
            inv = alpha * p
            for _ in range(20):
                inv = 2 * inv - inv @ p @ inv
            if attn.normalize:
                dn = a2.sum(-1) ** -0.5
                inv = dn[:, None] * inv * dn[None]
            out[b, head] = a1 @ inv @ a1.t() @ v[b, head]
    # Depthwise conv on V seen as (B * d, h, H, W).
    vm = v.permute(0, 3, 1, 2).reshape(batch * d, h, height, width)
    vc = F.conv2d(vm, attn.v_conv.weight, padding=attn.v_conv.padding, groups=h)
    out = out + vc.view(batch, d, h, n).permute(0, 2, 3, 1)
    out = out.permute(0, 2, 1, 3).reshape(batch, n, c)
    return F.linear(out, attn.proj.weight, attn.proj.bias)


@pytest.mark.parametrize('impl', ['fast', 'reference'])
@pytest.mark.parametrize('normalize', [False, True])
def test_forward_equals_the_spec(normalize, impl):
    attn = make(normalize=normalize, impl=impl).double()
    x = tokens().double()
    torch.testing.assert_close(attn(x, (12, 16)), spec_forward(attn, x, (12, 16)))


def test_parameter_layout_matches_the_release():
    attn = make(embed_dims=64, num_heads=2, sr_ratio=8, conv_size=9)
    shapes = {name: tuple(p.shape) for name, p in attn.named_parameters()}
    assert shapes['landmark_conv.weight'] == (32, 32, 8, 8)
    assert shapes['v_conv.weight'] == (2, 1, 9, 9)
    assert shapes['landmark_norm.weight'] == (32,)
    assert {'q.weight', 'q.bias', 'v.weight', 'v.bias', 'proj.weight',
            'proj.bias'} <= set(shapes)
    assert not any(name.startswith('k.') for name in shapes)  # K = Q


def test_lowrank_approaches_exact_as_landmarks_grow():
    x = tokens(batch=1, height=16, width=16).double()
    x = F.avg_pool1d(x.transpose(1, 2), 5, 1, 2).transpose(1, 2)  # smoother
    errors = []
    exact = make(landmark='avgpool', mode='exact').double()(x, (16, 16))
    for r in (8, 4, 2, 1):
        attn = make(landmark='avgpool', sr_ratio=r,
                    inverse=dict(method='solve', reg=1e-9))
        out = attn.double()(x, (16, 16))
        errors.append(((out - exact).norm() / exact.norm()).item())
    assert errors == sorted(errors, reverse=True), errors
    assert errors[-1] < 1e-5  # every token a landmark: exact up to the ridge


def test_reference_and_chunked_paths_equal_the_fast_path():
    x = tokens()
    fast = make()(x, (12, 16))
    torch.testing.assert_close(make(impl='reference')(x, (12, 16)), fast,
                               rtol=1e-4, atol=1e-5)
    grads = []
    for impl in ('fast', 'reference'):
        attn = make(impl=impl)
        attn(x, (12, 16)).square().sum().backward()
        grads.append({n: p.grad for n, p in attn.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-3, atol=1e-4,
                                   msg=name)
    torch.testing.assert_close(make(chunk_size=50)(x, (12, 16)), fast,
                               rtol=1e-5, atol=1e-5)


def test_auto_chunking_kicks_in_above_the_threshold(monkeypatch):
    import mmsoft.models.attention.soft_attention as module
    attn = make()
    assert attn.resolve_chunk_size(4, 1000, 10) is None
    monkeypatch.setattr(module, 'AUTO_CHUNK_ELEMENTS', 4 * 10 * 100)
    monkeypatch.setattr(module, 'CHUNK_ELEMENTS', 4 * 10 * 25)
    assert attn.resolve_chunk_size(4, 1000, 10) == 25
    assert attn.resolve_chunk_size(4, 100, 10) is None


def test_no_batch_coupling():
    attn = make()
    x = tokens(batch=3)
    x[2] *= 30  # an outlier image must not change the others
    together = attn(x, (12, 16))
    for i in range(3):
        torch.testing.assert_close(together[i:i + 1], attn(x[i:i + 1], (12, 16)),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('hw', [(7, 9), (15, 17), (3, 2), (4, 4), (3, 13), (1, 1)])
def test_odd_sizes_and_a_single_landmark(hw):
    attn = make(sr_ratio=4)
    x = tokens(batch=1, height=hw[0], width=hw[1])
    out = attn(x, hw)
    assert out.shape == x.shape and torch.isfinite(out).all()
    q_map = torch.rand(2, 16, *hw)
    too_small = hw[0] < 4 or hw[1] < 4
    expected = 1 if too_small else (hw[0] // 4) * (hw[1] // 4)
    assert attn.landmarks(q_map).shape == (2, expected, 16)


def test_a_map_smaller_than_the_ratio_is_pooled_whole():
    q_map = torch.rand(2, 16, 3, 13, dtype=torch.float64)
    pooled = make(sr_ratio=4, landmark='avgpool').landmarks(q_map)
    torch.testing.assert_close(pooled, q_map.mean((-2, -1))[:, None])
    attn = make(sr_ratio=4).double()
    resampled = F.adaptive_avg_pool2d(q_map, (4, 4))
    expected = F.conv2d(resampled, attn.landmark_conv.weight, stride=4)
    expected = F.gelu(attn.landmark_norm(expected.flatten(2).transpose(1, 2)))
    torch.testing.assert_close(attn.landmarks(q_map), expected)
    # Every position of the map contributes to the single landmark.
    q_map.requires_grad_()
    attn.landmarks(q_map).sum().backward()
    assert (q_map.grad != 0).all()


def test_landmark_cap_keeps_aspect_and_bound():
    attn = make(sr_ratio=1, max_landmarks=49)
    landmarks = attn.landmarks(torch.rand(2, 16, 40, 80))
    assert landmarks.shape[1] <= 49 and landmarks.shape[1] >= 40
    assert make(sr_ratio=1, max_landmarks=1).landmarks(
        torch.rand(1, 16, 5, 5)).shape[1] == 1


def test_bfloat16_autocast_stays_close_to_float32():
    attn = make()
    x = tokens().requires_grad_()
    ref = attn(x, (12, 16))
    (ref_grad,) = torch.autograd.grad(ref.square().sum(), x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = attn(x, (12, 16))
    (grad,) = torch.autograd.grad(out.float().square().sum(), x)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert (out.float() - ref).norm() / ref.norm() < 1e-2
    assert (grad - ref_grad).norm() / ref_grad.norm() < 1e-2


def test_every_parameter_gets_a_gradient():
    attn = make()
    attn(tokens(), (12, 16)).sum().backward()
    for name, param in attn.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize('scope', [None, 'mmpretrain', 'mmdet', 'mmseg'])
def test_builds_from_every_scope(scope):
    cfg = dict(embed_dims=32, num_heads=2, sr_ratio=2)
    if scope is None:
        attn = MODELS.build(dict(type='mmsoft.SOFTAttention', **cfg))
    else:
        __import__(f'{scope}.registry')
        with DefaultScope.overwrite_default_scope(scope):
            attn = MODELS.build(dict(type='SOFTAttention', **cfg))
            assert isinstance(MODELS.build(dict(type='mmsoft.SOFTAttention', **cfg)),
                              SOFTAttention)
    assert isinstance(attn, SOFTAttention)


def test_bad_input_is_explained():
    attn = make()
    with pytest.raises(ValueError, match=r'192 tokens but hw_shape \(12, 15\)'):
        attn(tokens(), (12, 15))
    with pytest.raises(ValueError, match=r'shape \(B, N, C\), got 4-D'):
        attn(torch.rand(1, 32, 12, 16), (12, 16))
    with pytest.raises(ValueError, match='Expected 32 channels per token, got 16'):
        attn(torch.rand(1, 192, 16), (12, 16))
    with pytest.raises(ValueError, match=r'embed_dims \(30\) must be divisible by '
                       r'num_heads \(4\)'):
        SOFTAttention(30, 4)
    with pytest.raises(ValueError, match="Unknown landmark 'random'"):
        SOFTAttention(32, 2, landmark='random')


@pytest.mark.parametrize('normalize', [False, True])
def test_attention_row_is_a_row_of_the_lowrank_matrix(normalize):
    from mmsoft.models.attention.diagnostics import attention_row
    from mmsoft.ops import InverseCfg, bottleneck_inverse, gaussian_kernel
    attn = make(normalize=normalize).double()
    x = tokens(batch=1).double()
    row = attention_row(attn, x, (12, 16), index=37)
    q = attn.queries(x).view(1, 192, 2, 16).transpose(1, 2).reshape(2, 192, 16)
    q = q * 16**-0.25
    landmarks = attn.landmarks(q.transpose(1, 2).reshape(2, 16, 12, 16))
    a1 = gaussian_kernel(q, landmarks)
    middle = bottleneck_inverse(gaussian_kernel(landmarks, landmarks),
                                InverseCfg(normalize=normalize))
    full = a1 @ middle @ a1.transpose(-2, -1)          # (h, N, N), small here
    torch.testing.assert_close(row[0], full[:, 37])
    exact = make(mode='exact').double()
    exact.load_state_dict(attn.state_dict())
    assert torch.allclose(attention_row(exact, x, (12, 16), 37)[0, :, 37],
                          torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize('route', newton_route_names()[2:])
def test_every_newton_route_matches_the_loop(route):
    x = tokens()
    with use_newton_route(route):
        fast = make()(x, (12, 16))
    with use_newton_route('loop'):
        loop = make()(x, (12, 16))
    torch.testing.assert_close(fast, loop, rtol=1e-4, atol=1e-5)
