"""The one dispatch point of SOFT's numerics: which code evaluates what.

**Newton routes.** The Newton iterate ``V_T`` of :mod:`.newton` is one
function; a *route* is one way to evaluate ``V_T @ rhs`` (with what a
backward needs, or without). The core registers the reference loop,
``'loop'`` (the ``2 T`` matrix products, the only route inside an exported
graph); the speed layer (:mod:`mmsoft.ops.fast`) registers the others with
:func:`register_newton_route`, and a *chooser* with
:func:`register_route_chooser` that picks a route for the ``'auto'``
setting. Every route computes the same function up to float rounding, and
``tests/test_ops/test_newton_routes.py`` holds each registered route to the
float64 loop.

**The route setting** (:func:`newton_route`) is the one knob: ``'auto'`` or
a registered route name (:func:`newton_route_names`). Precedence: the
innermost :func:`use_newton_route` block of the calling thread, else
``$MMSOFT_NEWTON_ROUTE``, else ``'auto'``. ``'auto'`` takes the loop while
exporting or where no chooser is registered, else the chooser's pick. A
forced route runs wherever it can and raises a RuntimeError naming the
setting where it cannot (another device, an export, a missing library):
nothing overrides it silently.

**Kernel products.** The low-rank attention (:mod:`.lowrank_attention`)
asks the registered :class:`LowrankProducts` (the speed layer's tiled,
split kernel products) first and evaluates the plain formula where none is
registered or it declines.
"""
import contextlib
import os
from contextvars import ContextVar
from typing import (
    Callable,
    ContextManager,
    Dict,
    Iterator,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
)

import torch
from torch import Tensor
from torch.autograd import Function

from .execution import exporting, newton_node
from .newton import check_square, identity_like, initial_scale, newton_loop, regularised

NEWTON_ROUTE_ENV = 'MMSOFT_NEWTON_ROUTE'
NEWTON_NODE = 'ai.onnx.contrib::SOFTNewtonApply'
"""The custom ONNX node of :func:`newton_node_output` (domain, then name)."""

Factors = Tuple[Tensor, ...]


class NewtonRoute(NamedTuple):
    """One evaluation of ``V_T @ rhs`` for a batch of symmetric matrices.

    Every function takes the flattened batch: matrices ``a3`` ``(B, m, m)``
    (lower triangle read, no autograd), right-hand sides ``rhs3``
    ``(B, m, k)``, the start ``alpha3`` ``(B, 1, 1)`` of ``V_0 = alpha P``
    with ``P = a3 + reg I``, and the step count.

    Attributes:
        name (str): The route's name in :func:`newton_route_names`.
        solve (callable): ``(a3, rhs3, alpha3, reg, num_iters) -> V_T rhs3``
            when no backward follows.
        factorize (callable): ``(a3, alpha3, reg, num_iters) -> factors``, a
            tuple of tensors describing ``V_T``, kept for the backward.
        apply (callable): ``(factors, rhs3) -> V_T rhs3``.
        unable (callable): ``(device_type, exporting) -> reason``: why the
            route cannot run on that device or inside an export, ``''``
            where it can.
    """

    name: str
    solve: Callable[[Tensor, Tensor, Tensor, float, int], Tensor]
    factorize: Callable[[Tensor, Tensor, float, int], Factors]
    apply: Callable[[Factors, Tensor], Tensor]
    unable: Callable[[str, bool], str]


class LowrankProducts(Protocol):
    """Faster evaluations of the low-rank attention's kernel products."""

    def landmark_kernel(self, k: Tensor) -> Optional[Tensor]:
        """``k(K~, K~)`` of landmarks ``(B, m, d)``, or None to decline."""

    def lowrank(self, q: Tensor, k: Tensor, v: Tensor, a2: Tensor,
                middle: Callable[[Tensor, Tensor], Tensor],
                needs_grad: bool) -> Optional[Tensor]:
        """``A1 @ middle(a2, A1^T @ v)`` with ``A1 = k(q, k)``, or None to
        decline."""

    def caller_context(self, q: Tensor) -> ContextManager:
        """The context the attention runs in (e.g. the caller's threads)."""


_ROUTES: Dict[str, NewtonRoute] = {}
_CHOOSER: Dict[str, Callable[[str, int], str]] = {}
_PRODUCTS: Dict[str, LowrankProducts] = {}
_ROUTE: ContextVar[Optional[str]] = ContextVar('mmsoft_newton_route', default=None)


# ------------------------------------------------------------ registration
def register_newton_route(route: NewtonRoute) -> None:
    """Register ``route`` under its name (again: replaced)."""
    if route.name == 'auto':
        raise ValueError("'auto' is the route setting's default, not a route name.")
    _ROUTES[route.name] = route


def register_route_chooser(chooser: Callable[[str, int], str]) -> None:
    """The ``'auto'`` setting's choice: ``chooser(device_type, m)`` returns a
    registered route name for ``m x m`` matrices on that device (outside
    exports; inside them the loop runs)."""
    _CHOOSER['auto'] = chooser


def register_lowrank_products(products: LowrankProducts) -> None:
    """The kernel products :func:`lowrank_products` hands the attention."""
    _PRODUCTS['fast'] = products


def lowrank_products() -> Optional[LowrankProducts]:
    """The registered :class:`LowrankProducts`, or None."""
    return _PRODUCTS.get('fast')


def newton_route_names() -> Tuple[str, ...]:
    """The settings of :func:`newton_route`: ``'auto'``, then every
    registered route (``'loop'`` first)."""
    return ('auto', *_ROUTES)


def registered_routes() -> Dict[str, NewtonRoute]:
    """Name to route, in registration order (a copy)."""
    return dict(_ROUTES)


# ------------------------------------------------------------- the setting
def _checked(name: str, source: str) -> str:
    if name not in newton_route_names():
        raise ValueError(f'{source}={name!r} is not a Newton route; use one of '
                         f'{newton_route_names()}.')
    return name


def _setting() -> Tuple[str, str]:
    """``(route setting, where it comes from)``."""
    name = _ROUTE.get()
    if name is not None:
        return name, 'use_newton_route'
    env = os.environ.get(NEWTON_ROUTE_ENV, '').strip()
    if env:
        return _checked(env, NEWTON_ROUTE_ENV), NEWTON_ROUTE_ENV
    return 'auto', 'default'


def newton_route() -> str:
    """The Newton route setting in force for this thread: the innermost
    :func:`use_newton_route`'s, else ``$MMSOFT_NEWTON_ROUTE``, else
    ``'auto'``; one of :func:`newton_route_names`."""
    return _setting()[0]


@contextlib.contextmanager
def use_newton_route(route: str) -> Iterator[None]:
    """Evaluate Newton iterates by ``route`` inside the block (this thread).

    A forced route (anything but ``'auto'``) is used for every size; where
    it cannot run (a device or an export it does not serve, a library it
    lacks) the Newton call raises a RuntimeError.

    Args:
        route (str): One of :func:`newton_route_names`.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import newton_inverse, use_newton_route
        >>> with use_newton_route('loop'):
        ...     v = newton_inverse(torch.eye(3) * 2, reg=0.0)
    """
    token = _ROUTE.set(_checked(route, 'route'))
    try:
        yield
    finally:
        _ROUTE.reset(token)


def route_name_for(device_type: str, m: int, in_export: bool) -> str:
    """The route that evaluates ``m x m`` matrices on ``device_type`` (inside an
    export or not) under the setting in force; see the module docstring."""
    setting, source = _setting()
    if setting == 'auto':
        if in_export or 'auto' not in _CHOOSER:
            return 'loop'
        return _CHOOSER['auto'](device_type, m)
    why = _ROUTES[setting].unable(device_type, in_export)
    if why:
        where = 'inside an export' if in_export else f'on {device_type}'
        raise RuntimeError(
            f'The Newton route {setting!r} is forced ({source}) but cannot run '
            f'{where}: {why}. Force a route that can (the loop runs '
            "everywhere) or leave the setting at 'auto'.")
    return setting


def setting_report() -> Dict[str, str]:
    """The route setting and where it comes from, and the registered routes
    with why any of them cannot run on this machine's CPU; never raises."""
    try:
        setting, source = _setting()
    except ValueError as err:
        setting, source = 'invalid', str(err)
    routes = []
    for name, route in _ROUTES.items():
        why = route.unable('cpu', False)
        routes.append(f'{name} (not on CPU here: {why})' if why else name)
    return {'Newton route': f'{setting} ({source})', 'Newton routes': ', '.join(routes)}


@torch.compiler.assume_constant_result
def _traced_route_name(device_type: str, m: int, in_export: bool) -> str:
    """:func:`route_name_for`, run eagerly also while ``torch.compile`` traces:
    the choice is made once and kept as a constant of the graph."""
    return route_name_for(device_type, m, in_export)


# -------------------------------------------------------------- the apply
class _NewtonApply(Function):
    """``y = V_T @ rhs`` by a route; backward of an inverse applied to ``rhs``.

    Treating ``V = P^-1`` (symmetric), ``dL/drhs = V g`` and
    ``dL/da = -(V g) y^T``, so the backward multiplies by ``V`` once more and
    never differentiates through the iterations. Without a backward the
    route's :attr:`~NewtonRoute.solve` runs and keeps nothing.
    """

    @staticmethod
    def forward(ctx, a: Tensor, rhs: Tensor, alpha: Tensor, num_iters: int,
                reg: float, route_name: str) -> Tensor:
        route = _ROUTES[route_name]
        m = a.shape[-1]
        a3 = a.detach().reshape(-1, m, m)
        rhs3 = rhs.detach().reshape(-1, m, rhs.shape[-1])
        alpha3 = alpha.detach().reshape(-1, 1, 1)
        with torch.no_grad():
            if not any(ctx.needs_input_grad[:2]):
                return route.solve(a3, rhs3, alpha3, reg, num_iters).reshape(rhs.shape)
            ctx.factors = route.factorize(a3, alpha3, reg, num_iters)
            y = route.apply(ctx.factors, rhs3).reshape(rhs.shape)
        ctx.route = route
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):
        (y,) = ctx.saved_tensors
        m = y.shape[-2]
        with torch.no_grad():
            v_grad = ctx.route.apply(ctx.factors, grad.reshape(-1, m, grad.shape[-1]))
            v_grad = v_grad.reshape(grad.shape)
        grad_a = -(v_grad @ y.transpose(-2, -1)) if ctx.needs_input_grad[0] else None
        return grad_a, v_grad, None, None, None, None


def newton_apply(a: Tensor, rhs: Tensor, num_iters: int = 20, reg: float = 0.01,
                 backoff: bool = False, group: int = 1) -> Tensor:
    """``V_T @ rhs`` for the Newton-Raphson approximation ``V_T`` of ``(a + reg I)^-1``.

    With ``P = a + reg * I`` and ``V_0 = alpha * P``
    (:func:`~.newton.initial_scale`), ``V_T`` is the result of ``num_iters``
    steps ``V <- 2V - V P V`` (the iteration of the released SOFT models). For
    ``alpha < 2 / sigma_max^2`` it converges to the Moore-Penrose inverse.
    The route of :func:`newton_route` evaluates it; no autograd graph is
    built over the iterations: the backward is that of an inverse evaluated
    at ``V_T`` (``dL/da = -V^T G V^T`` for ``G = dL/dV``). While exporting
    with :func:`~.execution.use_newton_node` it is one ONNX node instead
    (:func:`newton_node_output`).

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        rhs (Tensor): Right-hand sides of shape ``(..., m, k)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        backoff (bool): Start from the released checkpoints' back-off rule
            instead of the per-matrix step. Defaults to False.
        group (int): Consecutive matrices that share the back-off step (the
            heads of one image). Defaults to 1.

    Returns:
        Tensor: Shape ``(..., m, k)``.
    """
    check_square(a)
    if rhs.shape[:-1] != a.shape[:-1]:
        raise ValueError(f'rhs of shape {tuple(rhs.shape)} does not match matrices '
                         f'of shape {tuple(a.shape)}; expected (..., m, k).')
    in_export = exporting()
    if in_export and newton_node():
        return newton_node_output(a, rhs, num_iters, reg, backoff, group)
    route_name = _traced_route_name(a.device.type, a.shape[-1], in_export)
    alpha = initial_scale(a, reg, backoff, group)
    return _NewtonApply.apply(a, rhs, alpha, num_iters, reg, route_name)


def newton_inverse(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   backoff: bool = False, group: int = 1) -> Tensor:
    """The Newton-Raphson approximation ``V_T`` of ``(a + reg * I)^-1``.

    :func:`newton_apply` to the identity; same arguments, shape
    ``(..., m, m)``.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import newton_inverse
        >>> a = torch.eye(3) * 2
        >>> newton_inverse(a, reg=0.0)
        tensor([[0.5000, 0.0000, 0.0000],
                [0.0000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.5000]])
    """
    check_square(a)
    return newton_apply(a, identity_like(a), num_iters, reg, backoff, group)


def newton_node_output(a: Tensor, rhs: Tensor, num_iters: int, reg: float,
                       backoff: bool, group: int) -> Tensor:
    """:func:`newton_apply` as one :data:`NEWTON_NODE` in an exported graph.

    Inputs ``a`` (B, m, m) and ``rhs`` (B, m, k); attributes ``num_iters``,
    ``reg``, ``backoff`` (0 or 1) and ``group``; output ``V_T @ rhs``. The
    node evaluates nothing itself: :mod:`mmsoft.deployment` runs it in ONNX
    Runtime by calling :func:`newton_apply`, so it takes the route that
    call dispatches to.
    """
    attrs = dict(num_iters=int(num_iters), reg=float(reg), backoff=int(bool(backoff)),
                 group=int(group))
    return torch.onnx.ops.symbolic(NEWTON_NODE, (a, rhs), attrs, dtype=rhs.dtype,
                                   shape=rhs.shape, version=1)


# ------------------------------------------------------------ the loop route
def _loop_factorize(a3: Tensor, alpha3: Tensor, reg: float,
                    num_iters: int) -> Factors:
    return (newton_loop(regularised(a3, reg), alpha3, num_iters),)


def _loop_apply(factors: Factors, rhs3: Tensor) -> Tensor:
    return factors[0] @ rhs3


def _loop_solve(a3: Tensor, rhs3: Tensor, alpha3: Tensor, reg: float,
                num_iters: int) -> Tensor:
    return _loop_apply(_loop_factorize(a3, alpha3, reg, num_iters), rhs3)


LOOP = NewtonRoute('loop', _loop_solve, _loop_factorize, _loop_apply,
                   lambda device_type, in_export: '')
"""The reference: the ``2 T`` products of :func:`~.newton.newton_loop`, on
every device and inside exports."""
register_newton_route(LOOP)
