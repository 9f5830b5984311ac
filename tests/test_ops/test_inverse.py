"""Newton-Raphson inverse against the exact inverse, and its custom backward."""
import pytest
import torch
from helpers.kernels import landmark_kernels, random_spd, relative

from mmsoft.ops import (
    InverseCfg,
    newton_apply,
    newton_inverse,
    newton_iterate,
    newton_residual,
    newton_route_names,
    soft_lowrank_attention,
    solve_apply,
    solve_inverse,
    use_newton_route,
)
from mmsoft.ops.dispatch import route_name_for
from mmsoft.ops.fast.route_choice import MIN_MEASURED
from mmsoft.ops.fast.spectrum import newton_scalar_iterate

SPECTRAL = [r for r in newton_route_names() if r not in ('auto', 'loop')]


def kernel_matrix(batch, m, seed=0, spread=0.5):
    """float32 landmark kernels; a smaller spread gives closer landmarks,
    worse conditioning."""
    return landmark_kernels(batch, m, seed=seed, spread=spread, dtype=torch.float32)


def regularised(a, reg=0.01):
    return a + reg * torch.eye(a.shape[-1], dtype=a.dtype)


def exact(a, reg=0.01):
    return torch.linalg.inv(regularised(a, reg))


def test_newton_matches_exact_inverse_on_spd_matrices():
    a = random_spd(4, 12)
    v = newton_inverse(a, num_iters=20)
    torch.testing.assert_close(v, exact(a), rtol=1e-6, atol=1e-8)


def test_newton_matches_exact_inverse_on_kernel_matrices():
    a = kernel_matrix(6, 49)
    v = newton_inverse(a)
    ref = exact(a)
    rel = (v - ref).norm(dim=(-2, -1)) / ref.norm(dim=(-2, -1))
    assert rel.max() < 1e-4
    assert newton_residual(regularised(a), v).max() < 1e-4


def test_newton_residual_decreases_monotonically():
    a = kernel_matrix(3, 49, spread=0.3).double()
    residuals = torch.stack(
        [newton_residual(regularised(a), newton_iterate(a, t)) for t in range(21)])
    converging = residuals[:-1] > 1e-12  # below that only rounding is left
    assert (residuals[1:] < residuals[:-1])[converging].all()
    assert (residuals[-1] < residuals[0] * 1e-3).all()


def test_newton_is_per_matrix():
    # One badly scaled matrix in the batch must not change the others.
    a = kernel_matrix(3, 16)
    scaled = a.clone()
    scaled[0] *= 50
    torch.testing.assert_close(newton_inverse(scaled)[1:], newton_inverse(a)[1:])


def test_newton_forward_builds_no_iteration_graph():
    a = random_spd(2, 8).requires_grad_()
    v = newton_inverse(a)
    assert v.grad_fn is not None
    parents = [f for f, _ in v.grad_fn.next_functions if f is not None]
    assert len(parents) == 1 and parents[0].variable is a  # straight back to ``a``


def test_newton_gradcheck_against_exact_inverse():
    a = random_spd(2, 6).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: newton_inverse(x, num_iters=60), (a,), eps=1e-6, atol=1e-5)
    grad_out = torch.randn(2, 6, 6, dtype=torch.float64)
    (ours,) = torch.autograd.grad(newton_inverse(a, num_iters=60), a, grad_out)
    (ref,) = torch.autograd.grad(exact(a), a, grad_out)
    torch.testing.assert_close(ours, ref)


def test_solve_inverse_matches_inv_and_falls_back():
    a = random_spd(3, 10)
    torch.testing.assert_close(solve_inverse(a), exact(a))
    indefinite = torch.diag_embed(torch.tensor([[2.0, -3.0, 1.0]],
                                               dtype=torch.float64))
    torch.testing.assert_close(solve_inverse(indefinite, reg=0.0),
                               torch.linalg.inv(indefinite))


def test_non_square_input_is_rejected():
    with pytest.raises(ValueError, match=r'square matrices of shape \(\.\.\., m, m\)'):
        newton_inverse(torch.ones(2, 3, 4))


@pytest.mark.parametrize('num_iters', [3, 8, 20])
@pytest.mark.parametrize('route', SPECTRAL)
def test_spectral_newton_is_the_same_function_converged_or_not(route, num_iters):
    a = kernel_matrix(4, 100, spread=0.25).double()  # 3-8 steps unconverged
    loop = newton_iterate(a, num_iters)
    with use_newton_route(route):
        spectral = newton_inverse(a, num_iters)
    assert (newton_residual(regularised(a), loop) > 1e-2).any() or num_iters == 20
    rel = (spectral - loop).norm(dim=(-2, -1)) / loop.norm(dim=(-2, -1))
    assert rel.max() < 1e-6


@pytest.mark.parametrize('normalize', [False, True])
def test_eig_newton_in_float32_keeps_the_attention_output(normalize):
    # float32 eigenvectors of clustered small eigenvalues carry rounding that
    # V shows (~1e-4) but A1 V A1^T v does not.
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(4, 600, 32, generator=gen) * 32**-0.25 * 0.25
    k = q[:, torch.randperm(600, generator=gen)[:100]]
    v = torch.randn(4, 600, 32, generator=gen)

    def attend(route, dtype):
        with use_newton_route(route):
            return soft_lowrank_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                          InverseCfg(normalize=normalize)).double()

    ref = attend('loop', torch.float64)
    for route in newton_route_names()[1:]:
        assert relative(attend(route, torch.float32), ref) < 2e-5, route


def test_newton_takes_the_route_chosen_for_its_size_on_cpu():
    assert route_name_for('cpu', MIN_MEASURED - 1, False) == 'loop'
    assert route_name_for('cuda', 1000, False) == 'loop'
    assert route_name_for('cpu', 1000, True) == 'loop'  # exporting
    a = kernel_matrix(2, 96).double()
    route = route_name_for('cpu', 96, False)  # measured here for 96 landmarks
    assert route in newton_route_names()[1:]
    with use_newton_route(route):
        forced = newton_inverse(a)
    torch.testing.assert_close(newton_inverse(a), forced)
    assert relative(newton_inverse(a), newton_iterate(a)) < 1e-6


@pytest.mark.parametrize('route', newton_route_names()[1:])
def test_newton_apply_is_the_inverse_times_rhs_with_its_backward(route):
    a = random_spd(3, 9).requires_grad_()
    rhs = torch.randn(3, 9, 4, dtype=torch.float64, requires_grad=True)
    # The eigendecomposition reads a symmetric matrix, so perturb symmetrically.
    with use_newton_route(route):
        assert torch.autograd.gradcheck(
            lambda x, r: newton_apply((x + x.transpose(-2, -1)) / 2, r, num_iters=60),
            (a, rhs), eps=1e-6, atol=1e-5)
        torch.testing.assert_close(newton_apply(a, rhs), exact(a) @ rhs)
    torch.testing.assert_close(solve_apply(a, rhs), exact(a) @ rhs)
    with pytest.raises(ValueError, match=r'rhs of shape \(3, 8, 4\)'):
        newton_apply(a, rhs[:, :8])


@pytest.mark.parametrize('route', SPECTRAL)
def test_spectral_newton_gradcheck(route):
    # The eigendecomposition reads a symmetric matrix, so perturb symmetrically.
    a = random_spd(2, 5).requires_grad_()

    def symmetric_inverse(x):
        return newton_inverse((x + x.transpose(-2, -1)) / 2, num_iters=60)

    with use_newton_route(route):
        assert torch.autograd.gradcheck(symmetric_inverse, (a,), eps=1e-6, atol=1e-5)


def test_newton_residual_is_the_formula():
    a = random_spd(3, 7)
    v = torch.randn(3, 7, 7, dtype=torch.float64)
    expected = (a @ v @ a - a).norm(dim=(-2, -1)) / a.norm(dim=(-2, -1))
    torch.testing.assert_close(newton_residual(a, v), expected)
    assert newton_residual(a, torch.linalg.inv(a)).max() < 1e-12
    # A singular matrix and its pseudo-inverse: zero residual too.
    singular = torch.diag_embed(torch.tensor([3.0, 0.0, 1.0], dtype=torch.float64))
    assert newton_residual(singular, torch.linalg.pinv(singular)) < 1e-12


@pytest.mark.parametrize('num_iters', [0, 1, 5, 20])
def test_scalar_iterate_is_the_newton_recursion(num_iters):
    # Eigenvalues from 1e-12 (far from converged after 20 steps) to 1.
    values = torch.logspace(-12, 0, 200, dtype=torch.float64)
    start = 1.8 * values
    v = start.clone()
    for _ in range(num_iters):
        v = 2 * v - values * v * v
    # Rounding only: the float64 recursion and closed form agree to ~4e-11.
    torch.testing.assert_close(newton_scalar_iterate(values, start, num_iters), v,
                               rtol=1e-9, atol=0)
    single = newton_scalar_iterate(values.float(), start.float(), num_iters)
    assert single.dtype == torch.float32
    torch.testing.assert_close(single, v.float(), rtol=1e-6, atol=0)


@pytest.mark.parametrize('route', SPECTRAL)
def test_spectral_newton_compiles_with_inductor(route):
    # Written as the recursion, inductor inlined each step of the scalar
    # iterate into the next and never finished compiling; the alarm turns a
    # hang into a failure.
    import signal

    def give_up(*_):
        raise TimeoutError(f'inductor did not compile the {route} route in 240 s')

    torch._dynamo.reset()
    a = random_spd(2, 100).float()
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(240)
    try:
        with use_newton_route(route):
            compiled = torch.compile(newton_inverse, backend='inductor')(a)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        torch._dynamo.reset()
    with use_newton_route(route):
        eager = newton_inverse(a)
    assert float((compiled - eager).abs().max() / eager.abs().max()) < 1e-5
