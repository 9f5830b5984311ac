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
