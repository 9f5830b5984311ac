"""The low-rank SOFT product: fast, chunked and reference paths, and exact maths."""
import pytest
import torch

from mmsoft.ops import (
    InverseCfg,
    bottleneck_inverse,
    exact_gaussian_attention,
    gaussian_kernel,
    soft_lowrank_attention,
    soft_reference_attention,
    squared_distance,
    use_tile_elements,
)


def inputs(batch=3, n=150, m=12, d=16, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n, d, generator=gen, dtype=dtype) * d**-0.25
    k = torch.randn(batch, m, d, generator=gen, dtype=dtype) * d**-0.25 * 0.7
    v = torch.randn(batch, n, d, generator=gen, dtype=dtype)
    return q, k, v


def test_gaussian_kernel_is_the_formula():
    x, y, _ = inputs(n=20, m=7)
    expected = torch.exp(-torch.cdist(x.double(), y.double()) ** 2 / 2)
    torch.testing.assert_close(gaussian_kernel(x, y).double(), expected,
                               rtol=1e-5, atol=1e-6)
    same = squared_distance(x, x)
    assert (same >= 0).all()  # clamped even where rounding goes negative
    torch.testing.assert_close(torch.diagonal(gaussian_kernel(x, x), dim1=-2,
                                              dim2=-1), torch.ones(3, 20))


def test_gaussian_kernel_with_autograd_is_the_same_function():
    x, y, _ = (t.double() for t in inputs(n=20, m=7))
    x.requires_grad_()
    out = gaussian_kernel(x, y)
    expected = torch.exp(-torch.cdist(x, y) ** 2 / 2)
    torch.testing.assert_close(out, expected)
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, x, grad)
    (ref,) = torch.autograd.grad(expected, x, grad)
    torch.testing.assert_close(ours, ref)
    with torch.no_grad():  # in place on the matmul's result
        torch.testing.assert_close(gaussian_kernel(x, y), expected.detach())


def test_lowrank_is_the_spec_formula():
    q, k, v = (t.double() for t in inputs())
    a1 = torch.exp(-torch.cdist(q, k) ** 2 / 2)
    a2 = torch.exp(-torch.cdist(k, k) ** 2 / 2)
    eye = torch.eye(k.shape[1], dtype=torch.float64)
    expected = a1 @ torch.linalg.inv(a2 + 0.01 * eye) @ a1.transpose(-2, -1) @ v
    out = soft_lowrank_attention(q, k, v, InverseCfg(method='solve'))
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)
    # The Newton iteration agrees with the exact inverse on such a problem.
    torch.testing.assert_close(soft_lowrank_attention(q, k, v).double(), expected,
                               rtol=1e-4, atol=1e-5)


def test_soft_norm_is_symmetric_normalisation():
    q, k, v = (t.double() for t in inputs())
    a2 = gaussian_kernel(k, k)
    d_inv_sqrt = torch.diag_embed(a2.sum(-1) ** -0.5)
    eye = torch.eye(k.shape[1], dtype=torch.float64)
    middle = d_inv_sqrt @ torch.linalg.inv(a2 + 0.01 * eye) @ d_inv_sqrt
    torch.testing.assert_close(
        bottleneck_inverse(a2, InverseCfg(method='solve', normalize=True)), middle)
    a1 = gaussian_kernel(q, k)
    torch.testing.assert_close(
        soft_lowrank_attention(q, k, v, InverseCfg(method='solve', normalize=True)),
        a1 @ middle @ a1.transpose(-2, -1) @ v)


def test_reference_path_equals_fast_path():
    q, k, v = inputs()
    for normalize in (False, True):
        torch.testing.assert_close(
            soft_reference_attention(q, k, v, InverseCfg(normalize=normalize)),
            soft_lowrank_attention(q, k, v, InverseCfg(normalize=normalize)),
            rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('chunk_size', [1, 17, 64, 149])
def test_chunked_equals_plain_values_and_grads(chunk_size):
    q, k, v = (t.requires_grad_() for t in inputs())
    weights = torch.randn(3, 150, 16, generator=torch.Generator().manual_seed(1))
    plain = soft_lowrank_attention(q, k, v)
    grads_plain = torch.autograd.grad((plain * weights).sum(), (q, k, v))
    chunked = soft_lowrank_attention(q, k, v, chunk_size=chunk_size)
    grads_chunked = torch.autograd.grad((chunked * weights).sum(), (q, k, v))
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-5)
    for ours, ref in zip(grads_chunked, grads_plain):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('tile_elements', [1, 12 * 3 * 7, 10**9])
def test_tiles_without_autograd_equal_the_autograd_path(monkeypatch, tile_elements):
    # 1 row per tile, 7 rows (150 = 21 * 7 + 3: a short last tile), one tile.
    monkeypatch.setenv('MMSOFT_TILE_ELEMENTS', str(tile_elements))
    q, k, v = inputs()
    for normalize in (False, True):
        with torch.no_grad():
            tiled = soft_lowrank_attention(q, k, v, InverseCfg(normalize=normalize))
        graph = soft_lowrank_attention(q.requires_grad_(), k, v,
                                       InverseCfg(normalize=normalize))
        q.requires_grad_(False)
        assert graph.grad_fn is not None and tiled.grad_fn is None
        torch.testing.assert_close(tiled, graph.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(tiled, soft_reference_attention(
            q, k, v, InverseCfg(normalize=normalize)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('tile_elements', [1, 3 * 12 * 7, 10**9])
@pytest.mark.parametrize('normalize', [False, True])
def test_tiled_backward_is_autograd_through_the_plain_formula(tile_elements,
                                                              normalize):
    # The backward recomputes each tile's kernel instead of storing it; in
    # float64 it must be autograd's gradient of A1 P A1^T v to rounding, for
    # 1-row tiles, a short last tile and one tile.
    q, k, v = (t.double().requires_grad_() for t in inputs())
    k.data[:, 0] = q.data[:, 3]  # a landmark on a query: an exponent of 0
    cfg = InverseCfg(normalize=normalize)
    grad = torch.randn_like(v)
    with use_tile_elements(tile_elements):
        out = soft_lowrank_attention(q, k, v, cfg)
        grads = torch.autograd.grad(out, (q, k, v), grad)
    a1 = gaussian_kernel(q, k)
    plain = a1 @ bottleneck_inverse(gaussian_kernel(k, k), cfg) @ (
        a1.transpose(-2, -1) @ v)
    torch.testing.assert_close(out, plain, rtol=1e-12, atol=1e-12)
    for ours, ref in zip(grads, torch.autograd.grad(plain, (q, k, v), grad)):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_tiled_backward_passes_gradcheck():
    q, k, v = (t.double().requires_grad_() for t in inputs(batch=2, n=30, m=6, d=4))
    with use_tile_elements(2 * 6 * 7):
        assert torch.autograd.gradcheck(
            lambda *x: soft_lowrank_attention(*x, InverseCfg(num_iters=60, reg=0.1)),
            (q, k, v), eps=1e-6, atol=1e-6)


def test_lowrank_with_all_tokens_as_landmarks_is_nearly_exact():
    q, _, v = (t.double() for t in inputs(n=60))
    exact = exact_gaussian_attention(q, v)
    lowrank = soft_lowrank_attention(q, q, v, InverseCfg(method='solve', reg=1e-8))
    torch.testing.assert_close(lowrank, exact, rtol=1e-4, atol=1e-5)


def test_half_precision_inputs_compute_in_float32():
    q, k, v = inputs()
    out = soft_lowrank_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    ref = soft_lowrank_attention(q.bfloat16().float(), k.bfloat16().float(),
                                 v.bfloat16().float())
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)


def test_bad_arguments_are_named():
    q, k, v = inputs()
    with pytest.raises(ValueError, match="Unknown inverse method 'lu'"):
        soft_lowrank_attention(q, k, v, InverseCfg(method='lu'))
    with pytest.raises(ValueError, match='chunk_size must be positive'):
        soft_lowrank_attention(q, k, v, chunk_size=0)
