"""The Newton iterate from a tridiagonal matrix's few large eigenpairs and a
Chebyshev series for the rest is the same function as the float64 loop, and
declines where the full eigenvectors are the sound or the cheaper way."""
import pytest
import torch
from helpers.kernels import landmark_kernels, relative

from mmsoft.ops import (
    NEWTON_VARIANTS,
    InverseCfg,
    bottleneck_apply,
    newton_apply,
    newton_iterate,
    use_newton_route,
)
from mmsoft.ops.fast import deflated, lapack, spectral
from mmsoft.ops.fast.deflated import deflated_apply, max_large
from mmsoft.ops.fast.spectrum import newton_spectrum
from mmsoft.ops.newton import initial_scale


@pytest.fixture
def taken(monkeypatch):
    """Whether each call of :func:`deflated_apply` inside the tridiagonal
    route gave a result (True) or declined (False)."""
    calls = []
    original = spectral.deflated_apply

    def spy(*args):
        out = original(*args)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(spectral, 'deflated_apply', spy)
    return calls


def tridiagonal_of(a):
    """``(diag, off)`` of ``a``'s tridiagonal form and the dense ``T``."""
    _, diag, off, _ = lapack.tridiagonalize(a)
    dense = torch.diag(diag) + torch.diag(off, 1) + torch.diag(off, -1)
    return diag, off, dense


@pytest.mark.parametrize('variant', list(NEWTON_VARIANTS))
@pytest.mark.parametrize('m,duplicates', [(96, 0), (300, 30), (1200, 0)])
def test_it_is_the_exact_iterate_of_the_tridiagonal_matrix(variant, m, duplicates):
    settings = NEWTON_VARIANTS[variant]
    a = landmark_kernels(1, m, spread=0.3, duplicates=duplicates)
    alpha = float(initial_scale(a, settings['reg'], settings['backoff'], 1))
    diag, off, dense = tridiagonal_of(a[0])
    y_t = torch.randn(32, m, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y_before = y_t.clone()
    out = deflated_apply(diag, off, y_t, alpha, settings['reg'], 20)
    assert torch.equal(y_t, y_before)  # not modified in place
    values, vectors = torch.linalg.eigh(dense)
    v = newton_spectrum(values, alpha, settings['reg'], 20)
    exact = ((y_t @ vectors) * v) @ vectors.t()
    if variant == 'ridge' and m < 1200:  # hundreds of large eigenvalues
        assert out is None
        return
    assert out is not None
    assert relative(out, exact) < 1e-9


@pytest.mark.parametrize('variant', list(NEWTON_VARIANTS))
@pytest.mark.parametrize('m,heads,duplicates', [(96, 4, 0), (300, 2, 30), (1200, 2, 0)])
def test_the_solver_through_it_is_the_float64_loop(variant, m, heads, duplicates, taken):
    settings = NEWTON_VARIANTS[variant]
    a = landmark_kernels(heads, m, spread=0.3, duplicates=duplicates)
    rhs = torch.randn(heads, m, 32, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(1))
    ref = newton_iterate(a, 20, group=2, **settings) @ rhs
    with torch.no_grad(), use_newton_route('tridiagonal'):
        y = newton_apply(a, rhs, group=2, **settings)
    assert relative(y, ref) < 1e-6
    assert len(taken) == heads
    if variant == 'backoff':
        assert all(taken)
    with use_newton_route('tridiagonal'):
        y32 = newton_apply(a.float(), rhs.float(), group=2, **settings)
    # float32 kernels: V itself, not the attention output (as on every route)
    assert relative(y32.double(), ref) < 1e-3


@pytest.mark.parametrize('variant', list(NEWTON_VARIANTS))
def test_soft_norm_through_it_is_the_float64_loop(variant, taken):
    a = landmark_kernels(4, 160, spread=0.3)
    rhs = torch.randn(4, 160, 32, dtype=torch.float64)
    cfg = InverseCfg.from_variant(variant, normalize=True)
    with use_newton_route('loop'):
        ref = bottleneck_apply(a, rhs, cfg, group=2)
    with torch.no_grad(), use_newton_route('tridiagonal'):
        y = bottleneck_apply(a, rhs, cfg, group=2)
    assert relative(y, ref) < 1e-6
    assert len(taken) == 4 and all(taken) == (variant == 'backoff')


def test_it_declines_what_it_cannot_do_cheaply_or_soundly():
    a = landmark_kernels(1, 200, spread=0.3)[0]
    alpha = float(initial_scale(a[None], 0.0, True, 1))
    diag, off, _ = tridiagonal_of(a)
    y_t = torch.randn(8, 200, dtype=torch.float64)
    assert deflated_apply(diag, off, y_t, alpha, 0.0, 20) is not None
    wide = torch.randn(deflated.MAX_COLUMNS + 1, 200, dtype=torch.float64)
    assert deflated_apply(diag, off, wide, alpha, 0.0, 20) is None
    for bad in (0.0, float('inf'), float('nan')):
        assert deflated_apply(diag, off, y_t, bad, 0.0, 20) is None
    nan = diag.clone()
    nan[3] = float('nan')
    assert deflated_apply(nan, off, y_t, alpha, 0.0, 20) is None
    negative = diag.clone()
    negative[0] = -diag.abs().max() - 2 * off.abs().max()  # an eigenvalue far below 0
    assert deflated_apply(negative, off, y_t, alpha, 0.0, 20) is None
    # A flat spectrum: every eigenvalue large.
    flat = torch.ones(200, dtype=torch.float64)
    assert deflated_apply(flat, flat[1:] * 1e-3, y_t, 1.0, 0.0, 20) is None
    assert max_large(200) < 200


def test_few_large_eigenpairs_come_alone_and_match_the_full_solver():
    a = landmark_kernels(1, 300, spread=0.3)[0]
    diag, off, dense = tridiagonal_of(a)
    values = torch.linalg.eigvalsh(dense)
    lower = float(values[-6] + values[-7]) / 2
    upper = float(values[-1]) + 1
    assert lapack.tridiagonal_count(diag, off, lower, upper) == 6
    large, vectors = lapack.tridiagonal_eigh_in(diag, off, lower, upper, 6)
    torch.testing.assert_close(large, values[-6:], rtol=1e-12, atol=1e-14)
    residual = vectors @ dense - large.unsqueeze(1) * vectors
    assert float(residual.abs().max()) < 1e-12
    torch.testing.assert_close(vectors @ vectors.t(), torch.eye(6, dtype=torch.float64),
                               rtol=0, atol=1e-12)


def test_with_no_large_eigenvalue_it_is_the_series_alone():
    # T = 0 steps: V_0 = alpha P, and alpha l^2 <= 1 < 4 for every eigenvalue.
    a = landmark_kernels(1, 150, spread=0.3)[0]
    alpha = float(initial_scale(a[None], 0.01, False, 1))
    diag, off, dense = tridiagonal_of(a)
    y_t = torch.randn(16, 150, dtype=torch.float64)
    p = dense + 0.01 * torch.eye(150, dtype=torch.float64)
    for scale in (1.0, 1e-9):  # the split point inside and far beyond the spectrum
        out = deflated_apply(diag, off, y_t, alpha * scale, 0.01, 0)
        assert relative(out, alpha * scale * y_t @ p) < 1e-12


def test_a_compiled_forward_without_backward_runs_the_same_solve(monkeypatch):
    solved = []
    original = spectral._solve
    monkeypatch.setattr(spectral, '_solve',
                        lambda *args: solved.append(args[-1]) or original(*args))
    a = landmark_kernels(4, 300, spread=0.3).float()
    rhs = torch.randn(4, 300, 32)

    def attend(a, rhs):
        return newton_apply(a, rhs, reg=0.0, backoff=True, group=2) * 2

    with torch.no_grad(), use_newton_route('tridiagonal'):
        eager = attend(a, rhs)
        compiled = torch.compile(attend, backend='eager', fullgraph=True)(a, rhs)
    assert solved == ['tridiagonal', 'tridiagonal']  # as mmsoft::newton_solve
    assert relative(compiled, eager) < 1e-7
    torch._dynamo.reset()
