"""Every registered Newton route is the same function as the float64 reference
loop, with and without a backward, and the one route setting chooses it."""
import pytest
import torch
from helpers.kernels import landmark_kernels, relative

from mmsoft.ops import (
    NEWTON_VARIANTS,
    InverseCfg,
    bottleneck_apply,
    dispatch,
    export_path,
    newton_apply,
    newton_iterate,
    newton_route,
    newton_route_names,
    use_newton_route,
)
from mmsoft.ops.dispatch import NewtonRoute, register_newton_route, registered_routes

ROUTES = list(registered_routes())
# name: (m, heads, coinciding landmarks); the back-off step is shared by
# groups of two heads where there are two.
CASES = {'small': (96, 4, 0), 'singular-300': (300, 2, 30), '1050': (1050, 1, 0),
         '1200': (1200, 1, 0)}
_REFERENCE = {}


def reference_iterate(case, variant):
    """``V_T`` by the core's float64 loop, once per case and variant."""
    if (case, variant) not in _REFERENCE:
        m, heads, duplicates = CASES[case]
        a = landmark_kernels(heads, m, spread=0.4, duplicates=duplicates)
        v = newton_iterate(a, 20, group=min(heads, 2), **NEWTON_VARIANTS[variant])
        _REFERENCE[case, variant] = a, v
    return _REFERENCE[case, variant]


@pytest.fixture
def recorded(monkeypatch):
    """Wrap every registered route so that the test sees which ran and how:
    ``calls`` gets ``(route, 'solve' | 'factorize' | 'apply')``; the
    ``'reference'`` route returns the cached float64 loop iterate
    ``holder['v']``."""
    calls, holder = [], {}
    saved = dict(dispatch._ROUTES)

    def wrap(route: NewtonRoute) -> NewtonRoute:
        def solve(*args):
            calls.append((route.name, 'solve'))
            return route.solve(*args)

        def factorize(*args):
            calls.append((route.name, 'factorize'))
            return route.factorize(*args)

        def apply(*args):
            calls.append((route.name, 'apply'))
            return route.apply(*args)
        return route._replace(solve=solve, factorize=factorize, apply=apply)

    for route in saved.values():
        register_newton_route(wrap(route))
    register_newton_route(NewtonRoute(
        'reference', lambda a3, rhs3, *_: holder['v'] @ rhs3,
        lambda *_: (holder['v'],), lambda factors, rhs3: factors[0] @ rhs3,
        lambda *_: ''))
    yield calls, holder
    dispatch._ROUTES.clear()
    dispatch._ROUTES.update(saved)


@pytest.mark.parametrize('grad', [False, True], ids=['no-grad', 'grad'])
@pytest.mark.parametrize('normalize', [False, True], ids=['SOFT', 'SOFT-Norm'])
@pytest.mark.parametrize('case', list(CASES))
@pytest.mark.parametrize('variant', list(NEWTON_VARIANTS))
@pytest.mark.parametrize('route', ROUTES)
def test_every_route_is_the_float64_reference(route, variant, case, normalize, grad,
                                              recorded):
    calls, holder = recorded
    a, holder['v'] = reference_iterate(case, variant)
    m, heads, duplicates = CASES[case]
    if duplicates:  # coinciding landmarks: A2 is singular
        assert torch.linalg.matrix_rank(a).max() <= m - duplicates
    group = min(heads, 2)
    gen = torch.Generator().manual_seed(1)
    rhs = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    upstream = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    cfg = InverseCfg.from_variant(variant, normalize=normalize)

    def run(name):
        a_in, rhs_in = a.clone().requires_grad_(grad), rhs.clone().requires_grad_(grad)
        with use_newton_route(name), torch.set_grad_enabled(grad):
            y = bottleneck_apply(a_in, rhs_in, cfg, group=group)
        if not grad:
            return (y,)
        y.backward(upstream)
        return y.detach(), a_in.grad, rhs_in.grad

    expected = run('reference')
    calls.clear()
    for got, want in zip(run(route), expected):
        assert relative(got, want) < 1e-6
    assert calls == ([(route, 'factorize'), (route, 'apply'), (route, 'apply')]
                     if grad else [(route, 'solve')])


def test_the_setting_is_one_name_with_written_precedence(monkeypatch):
    assert newton_route_names()[:2] == ('auto', 'loop')
    assert newton_route() == 'auto'
    monkeypatch.setenv('MMSOFT_NEWTON_ROUTE', 'loop')
    assert newton_route() == 'loop'
    with use_newton_route('auto'):  # the innermost block wins over the variable
        assert newton_route() == 'auto'
        with use_newton_route(ROUTES[-1]):
            assert newton_route() == ROUTES[-1]
    monkeypatch.setenv('MMSOFT_NEWTON_ROUTE', 'fast')
    with pytest.raises(ValueError, match=r"MMSOFT_NEWTON_ROUTE='fast' is not a Newton "
                                         r"route; use one of \('auto', 'loop'"):
        newton_route()
    with pytest.raises(ValueError, match="route='qr' is not a Newton route"):
        use_newton_route('qr').__enter__()


def test_a_forced_route_runs_at_every_size_or_raises_naming_the_setting():
    a = landmark_kernels(2, 8)
    rhs = torch.randn(2, 8, 3, dtype=torch.float64)
    ref = newton_iterate(a) @ rhs
    for name in ROUTES:  # 8 landmarks: 'auto' would take the loop
        with use_newton_route(name):
            assert relative(newton_apply(a, rhs), ref) < 1e-9
    for name, route in registered_routes().items():
        why = route.unable('cpu', True)
        if not why:
            continue
        with use_newton_route(name), export_path(), pytest.raises(
                RuntimeError, match=rf"The Newton route '{name}' is forced "
                                    r'\(use_newton_route\) but cannot run inside an '
                                    rf'export: {why}'):
            newton_apply(a, rhs)


def test_a_route_whose_library_is_missing_is_explained(monkeypatch):
    from mmsoft.ops.fast import lapack
    monkeypatch.setattr(lapack, '_binding', lambda: (None, 'SciPy is not installed'))
    unable = {name: route.unable('cpu', False)
              for name, route in registered_routes().items()}
    for name, why in unable.items():
        if why:
            assert 'SciPy is not installed' in why
            with use_newton_route(name), pytest.raises(RuntimeError,
                                                       match='SciPy is not installed'):
                newton_apply(torch.eye(70)[None], torch.ones(1, 70, 1))
    from mmsoft.ops.fast.route_choice import candidates
    assert all(name not in candidates(700) for name, why in unable.items() if why)
    from mmsoft.utils.env import route_report
    assert 'SciPy is not installed' in route_report()['Newton routes']


def test_use_eig_folds_into_the_route_setting():
    with pytest.raises(ValueError, match=r"use_eig=True is gone: .*use_newton_route\("
                                         r"'eigh'\)"):
        InverseCfg.build(dict(use_eig=True))


@pytest.mark.parametrize('route', [r for r in ROUTES if r != 'loop'])
def test_float32_routes_keep_the_float64_output(route):
    a = landmark_kernels(2, 400, spread=0.4)
    rhs = torch.randn(2, 400, 32, dtype=torch.float64)
    ref = newton_iterate(a) @ rhs
    with use_newton_route(route):
        y = newton_apply(a.float(), rhs.float())
    assert y.dtype == torch.float32
    assert relative(y.double(), ref) < 1e-3  # V itself, not the attention output


def test_split_work_is_reproducible():
    a = landmark_kernels(6, 300, dtype=torch.float32)
    rhs = torch.randn(6, 300, 32)
    for route in ROUTES:
        with use_newton_route(route):
            first = [newton_apply(a, rhs) for _ in range(3)]
        assert all(torch.equal(first[0], other) for other in first[1:]), route
