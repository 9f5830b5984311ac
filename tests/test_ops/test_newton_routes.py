"""Every route of the Newton iterate is the same function as the float64 loop,
and the route is chosen by a cached measurement or forced by a setting."""
import json
import os
import threading

import pytest
import torch
from helpers.kernels import landmark_kernels

from mmsoft.ops import (
    InverseCfg,
    backoff_initial_scale,
    bottleneck_apply,
    lapack,
    newton_apply,
    newton_iterate,
    newton_routes,
    thread_split,
    use_newton_route,
)
from mmsoft.ops.inverse import _column_sums_by_product, _column_sums_of_square

ROUTES = ['loop', 'eigh', 'tridiagonal']
VARIANTS = {'ridge': dict(reg=0.01, backoff=False), 'backoff': dict(reg=0.0, backoff=True)}


def reference(a, rhs, grad, reg, backoff, group):
    """Output and gradients from the float64 Newton loop: ``y = V rhs`` and
    the backward of an inverse, ``dL/drhs = V g``, ``dL/da = -(V g) y^T``."""
    v = newton_iterate(a, 20, reg, backoff, group)
    y = v @ rhs
    v_grad = v @ grad
    return y, -(v_grad @ y.transpose(-2, -1)), v_grad


def relative(x, ref):
    return float((x.detach() - ref).norm() / ref.norm())


@pytest.mark.parametrize('variant', list(VARIANTS))
@pytest.mark.parametrize('m,heads,duplicates', [(96, 4, 0), (300, 2, 30), (1200, 2, 0)])
def test_every_route_is_the_float64_loop(variant, m, heads, duplicates):
    settings = VARIANTS[variant]
    a = landmark_kernels(heads, m, spread=0.4, duplicates=duplicates)
    if duplicates:  # coinciding landmarks: A2 is singular
        assert torch.linalg.matrix_rank(a).min() <= m - duplicates
    gen = torch.Generator().manual_seed(1)
    rhs = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    grad = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    y_ref, a_grad_ref, rhs_grad_ref = reference(a, rhs, grad, group=2, **settings)
    for route in ROUTES:
        a_in, rhs_in = a.clone().requires_grad_(), rhs.clone().requires_grad_()
        y = newton_apply(a_in, rhs_in, route=route, group=2, **settings)
        y.backward(grad)
        assert relative(y, y_ref) < 1e-6, route
        assert relative(rhs_in.grad, rhs_grad_ref) < 1e-6, route
        assert relative(a_in.grad, a_grad_ref) < 1e-6, route
        with torch.no_grad():  # no backward: factors used where made
            y_solved = newton_apply(a, rhs, route=route, group=2, **settings)
        assert relative(y_solved, y_ref) < 1e-6, route


@pytest.mark.parametrize('route', ROUTES[1:])
def test_factors_are_kept_only_for_a_backward(route, monkeypatch):
    from mmsoft.ops import inverse
    solved = []
    original = inverse.spectral_solve
    monkeypatch.setattr(inverse, 'spectral_solve',
                        lambda *args: solved.append(args[-1]) or original(*args))
    a = landmark_kernels(3, 64)
    rhs = torch.randn(3, 64, 8, dtype=torch.float64)
    with torch.no_grad():
        y = newton_apply(a, rhs, route=route)
    assert solved == [route]
    y_grad = newton_apply(a, rhs.clone().requires_grad_(), route=route)
    assert solved == [route] and y_grad.grad_fn is not None
    torch.testing.assert_close(y_grad.detach(), y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_soft_norm_is_the_same_function_on_every_route(variant):
    a = landmark_kernels(4, 160, spread=0.3)
    rhs = torch.randn(4, 160, 32, dtype=torch.float64)
    cfg = InverseCfg.from_variant(variant, normalize=True)
    ref = bottleneck_apply(a, rhs, cfg.replace(use_eig=False), group=2)
    for route in ROUTES[1:]:
        with use_newton_route(route):
            assert relative(bottleneck_apply(a, rhs, cfg, group=2), ref) < 1e-6, route


@pytest.mark.parametrize('route', ROUTES[1:])
def test_float32_routes_keep_the_float64_output(route):
    a = landmark_kernels(2, 400, spread=0.4)
    rhs = torch.randn(2, 400, 32, dtype=torch.float64)
    ref = newton_apply(a, rhs, route='loop')
    y = newton_apply(a.float(), rhs.float(), route=route)
    assert y.dtype == torch.float32
    assert relative(y.double(), ref) < 1e-3  # V itself, not the attention output


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


def test_a_forced_route_is_used_and_a_bad_one_explained(monkeypatch):
    a = landmark_kernels(2, 100).float()
    with use_newton_route('loop'):
        assert newton_routes.choose_route(a) == 'loop'
    with use_newton_route('eigh'):
        assert newton_routes.choose_route(a[:, :8, :8]) == 'eigh'  # any size
    monkeypatch.setenv('MMSOFT_NEWTON_ROUTE', 'eigh')
    assert newton_routes.choose_route(a) == 'eigh'
    monkeypatch.setenv('MMSOFT_NEWTON_ROUTE', 'fast')
    with pytest.raises(ValueError, match=r"MMSOFT_NEWTON_ROUTE='fast' is not a Newton "
                                         r"route; use one of \('auto', 'loop'"):
        newton_routes.choose_route(a)
    with pytest.raises(ValueError, match="route='qr' is not a Newton route"):
        use_newton_route('qr').__enter__()


def test_an_unavailable_tridiagonal_route_is_explained(monkeypatch):
    monkeypatch.setattr(lapack, '_binding', lambda: (None, None, 'SciPy is not installed'))
    assert newton_routes.spectral_routes() == ['eigh']
    with use_newton_route('tridiagonal'), pytest.raises(
            RuntimeError, match="'tridiagonal' needs LAPACK through SciPy: SciPy is "
                                'not installed'):
        newton_routes.choose_route(torch.zeros(2, 100, 100))


def test_the_route_is_measured_once_per_size_class_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv('MMSOFT_CACHE_DIR', str(tmp_path))
    newton_routes.forget_measurements()
    calls = []
    measure = newton_routes.measure
    monkeypatch.setattr(newton_routes, 'measure',
                        lambda m: calls.append(m) or measure(m, rounds=1))
    try:
        a = torch.zeros(2, 70, 70)
        assert newton_routes.choose_route(torch.zeros(2, 63, 63)) == 'loop'  # too small
        route = newton_routes.choose_route(a)
        assert newton_routes.choose_route(torch.zeros(2, 100, 100)) == route  # 64-127
        assert calls == [70]
        cache = json.loads((tmp_path / 'newton_routes.json').read_text())
        entry = cache[newton_routes.machine_key()]['6']
        assert entry['route'] == route and set(entry['ms']) >= {'eigh', 'loop'}
        assert oct(os.stat(tmp_path / 'newton_routes.json').st_mode & 0o777) == '0o644'
        # A new process reads the cache instead of measuring again.
        newton_routes.forget_measurements()
        assert newton_routes.choose_route(a) == route and calls == [70]
        assert newton_routes.route_report()['Newton route m 64-127'].startswith(route)
    finally:
        newton_routes.forget_measurements()


def test_a_damaged_or_foreign_cache_is_measured_anew(monkeypatch, tmp_path):
    monkeypatch.setenv('MMSOFT_CACHE_DIR', str(tmp_path))
    (tmp_path / 'newton_routes.json').write_text('{not json')
    newton_routes.forget_measurements()
    monkeypatch.setattr(newton_routes, 'measure',
                        lambda m: dict(route='eigh', m=m, ms={'eigh': 1.0}))
    try:
        assert newton_routes.choose_route(torch.zeros(1, 70, 70)) == 'eigh'
        other = {'another CPU | torch 0': {'6': dict(route='loop', m=70, ms={})}}
        (tmp_path / 'newton_routes.json').write_text(json.dumps(other))
        newton_routes.forget_measurements()
        assert newton_routes.choose_route(torch.zeros(1, 70, 70)) == 'eigh'
        cache = json.loads((tmp_path / 'newton_routes.json').read_text())
        assert set(cache) == {'another CPU | torch 0', newton_routes.machine_key()}
    finally:
        newton_routes.forget_measurements()


def test_the_work_split_leaves_other_threads_thread_counts_alone():
    # Three threads: the pool grows to three workers during the calls below,
    # while another thread keeps reading its count and starting new threads.
    # scikit-learn's OpenMP runtime is loaded too: the workers must set
    # torch's own.
    import sklearn.utils._openmp_helpers  # noqa: F401
    thread_split._thread_local_setters.cache_clear()
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    counts = set()
    try:
        a = landmark_kernels(6, 120).float()
        stop = threading.Event()

        def fresh():
            counts.add(torch.get_num_threads())

        def watch():
            while not stop.is_set():
                counts.add(torch.get_num_threads())
                thread = threading.Thread(target=fresh)
                thread.start()
                thread.join()

        watcher = threading.Thread(target=watch)
        watcher.start()
        for route in ROUTES[1:]:
            newton_apply(a, torch.ones(6, 120, 8), route=route)
        stop.set()
        watcher.join()
        assert counts == {before + 1}
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


def test_lapack_runs_single_threaded_while_any_split_work_runs():
    assert lapack.available(), lapack.unavailable_reason()  # SciPy is in the stack
    get, _ = lapack._binding()[1]
    before = get()
    inside, entered, leave = [], threading.Barrier(2), threading.Event()

    def hold():
        with lapack.single_threaded():
            entered.wait()
            leave.wait()
            inside.append(get())

    holder = threading.Thread(target=hold)
    holder.start()
    with lapack.single_threaded():
        entered.wait()
        assert get() == 1
    assert get() == 1  # the other thread is still inside
    leave.set()
    holder.join()
    assert inside == [1] and get() == before


def test_split_lapack_work_is_reproducible():
    a = landmark_kernels(6, 300).float()
    rhs = torch.randn(6, 300, 32)
    first = [newton_apply(a, rhs, route='tridiagonal') for _ in range(3)]
    assert all(torch.equal(first[0], other) for other in first[1:])
