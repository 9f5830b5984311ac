"""Inverses of the bottleneck kernel: Newton-Raphson (the model's) and exact.

SOFT needs ``pinv(A2)`` for the ``m x m`` kernel between landmarks. The models
compute it with Newton-Raphson iterations on ``P = A2 + reg * I``, started
from ``V_0 = alpha * P``; :func:`newton_inverse` is that function, and
:func:`solve_inverse` the exact inverse of the same ``P``. Two rules choose
``alpha``: :func:`newton_initial_scale` (one step per matrix, mmsoft's
default) and :func:`backoff_initial_scale` (the released checkpoints' rule:
one step per group of matrices, halved until a contraction test passes).
"""
from typing import Optional

import torch
from torch import Tensor
from torch.autograd import Function

from .execution import compiling, eager_cpu, exporting, in_graph, newton_node
from .newton_routes import DEFAULT_SPECTRAL, choose_route
from .newton_spectral import (
    SpectralFactors,
    newton_spectrum,
    spectral_apply,
    spectral_solve,
    spectral_values,
)
from .regions import region


def regularised(a: Tensor, reg: float) -> Tensor:
    """``a + reg * I`` for a batch of square matrices (the one place it is built).

    Args:
        a (Tensor): Matrices of shape ``(..., m, m)``.
        reg (float): Ridge added to the diagonal; ``a`` itself when 0.

    Returns:
        Tensor: Same shape as ``a``.
    """
    if reg == 0:
        return a
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return a + reg * eye


def _max_row_sum(a: Tensor) -> Tensor:
    """Largest absolute row sum of each matrix, shape ``(...)``."""
    if exporting():  # matrix_norm's export fixes the batch size
        return a.abs().sum(-1).amax(-1)
    return torch.linalg.matrix_norm(a, ord=float('inf'))  # no |a| temporary


def newton_initial_scale(a: Tensor) -> Tensor:
    """The per-matrix step ``alpha = 0.9 * 2 / (max row sum of a)^2``.

    The iteration converges for ``alpha < 2 / sigma_max^2``; the largest
    absolute row sum bounds ``sigma_max`` of a symmetric matrix. Each matrix
    gets its own alpha, so no sample of a batch influences another.

    Args:
        a (Tensor): Matrices of shape ``(..., m, m)``.

    Returns:
        Tensor: Shape ``(..., 1, 1)``.
    """
    row_sum = _max_row_sum(a)
    return (1.8 / row_sum.pow(2))[..., None, None]


BACKOFF_HALVINGS = 10
"""Most halvings of the released back-off rule."""
BACKOFF_TOLERANCE = 1.01
"""The released back-off halves ``alpha`` while ``||I - P V_0||_1`` exceeds this."""


def backoff_initial_scale(p: Tensor, group: int = 1) -> Tensor:
    """The released checkpoints' step: ``alpha = 2 / (max row sum)^2``, backed off.

    Matrices are taken in consecutive groups of ``group`` along the flattened
    leading dimensions (the heads of one image) and each group shares one
    ``alpha``: the largest row sum over the group sets
    ``alpha = 2 / max^2``, which is then halved, at most
    :data:`BACKOFF_HALVINGS` times, while the largest column sum of
    ``|I - alpha P^2|`` over the group exceeds :data:`BACKOFF_TOLERANCE`.
    With ``group`` the number of heads this is, image by image, the rule of
    the released ``newton_inv`` (which takes the maxima over its whole input,
    one image at evaluation), and no image influences another. The halvings
    are tensor operations (no data-dependent Python branch), so the rule
    traces for export.

    The test needs no ``m x m`` product when ``P`` is symmetric with
    non-negative entries, as SOFT's kernels are: then ``P^2 >= 0``, and
    column ``j`` of ``|I - alpha P^2|`` sums to
    ``|1 - alpha c_j| + alpha (s_j - c_j)`` with ``c_j = (P^2)_jj``, the
    squared norm of column ``j`` of ``P``, and ``s_j = (P (P 1))_j``, the
    column sum of ``P^2``: ``O(m^2)`` work per matrix instead of an
    ``m^3`` product and ten passes over ``m x m``. Matrices with a negative
    entry (seen in eager mode; SOFT never makes them) take the product.

    Args:
        p (Tensor): The matrices being inverted, ``(..., m, m)``.
        group (int): Matrices per group; the number of matrices must be a
            multiple of it. Defaults to 1.

    Returns:
        Tensor: ``alpha`` of shape ``(..., 1, 1)``.
    """
    m = p.shape[-1]
    p3 = p.reshape(-1, m, m)
    if p3.shape[0] % group:
        raise ValueError(f'{p3.shape[0]} matrices do not split into groups of '
                         f'{group}; pass group = the number of heads.')
    if in_graph() or bool(p3.amin() >= 0):
        row_sums = p3.sum(-1)                     # also P 1 and the column sums
        column_sums = _column_sums_of_square(p3, row_sums)
    else:
        row_sums = p3.abs().sum(-1)
        column_sums = _column_sums_by_product(p3)
    alpha = 2 / row_sums.amax(-1).view(-1, group).amax(-1, keepdim=True).pow(2)
    for _ in range(BACKOFF_HALVINGS):
        scale = alpha.expand(-1, group).reshape(-1, 1)
        worst = column_sums(scale).amax(-1).view(-1, group).amax(-1, keepdim=True)
        alpha = torch.where(worst > BACKOFF_TOLERANCE, alpha * 0.5, alpha)
    return alpha.expand(-1, group).reshape(*p.shape[:-2], 1, 1)


def _column_sums_of_square(p3: Tensor, row_sums: Tensor):
    """Column sums of ``|I - alpha P^2|`` for symmetric ``P >= 0`` with row
    sums ``row_sums`` (``P 1``), as a function of ``alpha`` ``(B, 1)``; see
    :func:`backoff_initial_scale`."""
    # P is symmetric: its rows' norms and (P 1)^T P read memory in order.
    diag = torch.linalg.vector_norm(p3, dim=-1).pow(2)            # c_j, (B, m)
    total = (row_sums.unsqueeze(-2) @ p3).squeeze(-2)             # s_j = (P P 1)_j
    off = total - diag
    return lambda alpha: (1 - alpha * diag).abs() + alpha * off


def _column_sums_by_product(p3: Tensor):
    """Column sums of ``|I - alpha P^2|`` from the product, for any ``P``."""
    square = torch.bmm(p3, p3)
    eye = torch.eye(p3.shape[-1], dtype=p3.dtype, device=p3.device)
    return lambda alpha: (eye - alpha[..., None] * square).abs().sum(-2)


def _initial_scale(a: Tensor, p: Tensor, backoff: bool, group: int) -> Tensor:
    """``alpha`` of ``V_0 = alpha * P`` under either rule."""
    return backoff_initial_scale(p, group) if backoff else newton_initial_scale(a)


def newton_iterate(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   backoff: bool = False, group: int = 1) -> Tensor:
    """Run the Newton-Raphson iteration ``V <- 2V - V P V`` without autograd.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        backoff (bool): Start from :func:`backoff_initial_scale` instead of
            :func:`newton_initial_scale`. Defaults to False.
        group (int): Matrices sharing the back-off step. Defaults to 1.

    Returns:
        Tensor: The iterate ``V_T`` approximating ``(a + reg I)^-1``.
    """
    with torch.no_grad(), region('newton'):
        p = regularised(a, reg)
        v = _initial_scale(a, p, backoff, group) * p
        shape = v.shape
        p3, v = p.reshape(-1, *shape[-2:]), v.reshape(-1, *shape[-2:])
        for _ in range(num_iters):
            v = torch.baddbmm(v, v, torch.bmm(p3, v), beta=2, alpha=-1)
        return v.reshape(shape)


def newton_iterate_eig(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                       backoff: bool = False, group: int = 1,
                       route: Optional[str] = None) -> Tensor:
    """:func:`newton_iterate` through one spectral decomposition per matrix.

    Every Newton iterate is a polynomial in ``P``: with ``P = U diag(l) U^T``,
    ``V_k = U diag(v_k) U^T`` where ``v_0 = alpha * l`` and
    ``v <- 2 v - l v^2`` (:mod:`.newton_spectral`). So the ``T`` iterations
    cost one decomposition instead of ``2 T`` matrix products, giving the same
    function up to rounding, converged or not. On a 2-core CPU it is faster
    than the loop from ``m ~ 100`` (10-20x at ``m = 1050``); on CUDA the loop
    is faster.

    In float32 the eigenvectors of nearly equal small eigenvalues carry
    rounding: at ``m ~ 1000`` ``V`` differs from the float64 iterate by up to
    ``~1e-4`` relative (the loop by ``~5e-6``), in directions the attention
    output does not see: through SOFT-Tiny at 800 x 1344 both give the
    float64 model's outputs to ``~1e-6``.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of Newton iterations to reproduce.
            Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        backoff (bool): The back-off start (:func:`backoff_initial_scale`),
            whose ``alpha`` is computed from ``P`` as in the loop; the iterate
            is still a polynomial in ``P``. Defaults to False.
        group (int): Matrices sharing the back-off step. Defaults to 1.
        route (str, optional): ``'eigh'`` or ``'tridiagonal'``. Defaults to
            None: the spectral route :func:`~.newton_routes.choose_route`
            picks for ``a``.

    Returns:
        Tensor: The iterate ``V_T``, same dtype as ``a``.
    """
    route = _spectral_route(a) if route is None else route
    factors = _newton_factors(a, num_iters, reg, backoff, group, route)
    return spectral_apply(factors, identity_like(a).contiguous())


def _newton_factors(a: Tensor, num_iters: int, reg: float, backoff: bool,
                    group: int, route: str) -> SpectralFactors:
    """:class:`SpectralFactors` of ``V_T`` by ``route``; see
    :func:`newton_iterate_eig`."""
    with torch.no_grad(), region('newton'):
        # Both routes read the lower triangle; a + reg I shifts the eigenvalues.
        eigvals, factors = spectral_values(a, route)
        alpha = _spectral_alpha(a, reg, backoff, group).reshape(-1, 1)
        return factors._replace(values=newton_spectrum(eigvals, alpha, reg, num_iters))


def _spectral_alpha(a: Tensor, reg: float, backoff: bool, group: int) -> Tensor:
    """:func:`_initial_scale` for the spectral routes, which never form ``P``
    but for the back-off, which reads it."""
    return _initial_scale(a, regularised(a, reg) if backoff else a, backoff, group)


def _spectral_route(a: Tensor) -> str:
    """The spectral route for ``a`` when one is asked for: the chosen route,
    or :data:`~.newton_routes.DEFAULT_SPECTRAL` where the choice is the loop
    (too few landmarks, or off the CPU)."""
    route = choose_route(a) if a.device.type == 'cpu' and not exporting() else 'loop'
    return DEFAULT_SPECTRAL if route == 'loop' else route


def prefers_eig(a: Tensor) -> bool:
    """Whether :func:`newton_apply` evaluates ``a``'s iterate by a spectral
    decomposition (:func:`~.newton_routes.choose_route` is not ``'loop'``).

    False off the CPU (GPU eigensolvers are far slower than products), while
    :func:`~.execution.exporting` (no size-dependent choice) and for fewer
    than :data:`~.newton_routes.MIN_MEASURED` landmarks.
    """
    return choose_route(a) != 'loop'


def resolve_route(a: Tensor, use_eig: Optional[bool] = None,
                  route: Optional[str] = None) -> str:
    """The route :func:`newton_apply` takes: ``route`` when given, the loop for
    ``use_eig=False``, a spectral route for ``use_eig=True``, else
    :func:`~.newton_routes.choose_route`."""
    if route is not None:
        if route not in ('loop', 'eigh', 'tridiagonal'):
            raise ValueError(f"Unknown Newton route {route!r}; use 'loop', 'eigh' "
                             "or 'tridiagonal'.")
        return route
    if use_eig is None:
        return choose_route(a)
    return _spectral_route(a) if use_eig else 'loop'


class _NewtonApply(Function):
    """``y = V_T @ rhs``; backward of an inverse applied to ``rhs``.

    Treating ``V = P^-1`` (symmetric), ``dL/drhs = V g`` and
    ``dL/da = -(V g) y^T``, so the backward multiplies by ``V`` once more and
    never differentiates through the iterations.
    """

    @staticmethod
    def forward(ctx, a: Tensor, rhs: Tensor, num_iters: int, reg: float,
                route: str, backoff: bool, group: int) -> Tensor:
        on_cpu = eager_cpu(a) or (compiling() and a.device.type == 'cpu')
        if route != 'loop' and on_cpu and not any(ctx.needs_input_grad[:2]):
            # No backward, on CPU (eager, or compiled as one operator): each
            # matrix's factors are used once, where they are made.
            with torch.no_grad(), region('newton'):
                alpha = _spectral_alpha(a, reg, backoff, group)
                return spectral_solve(a, rhs, alpha, reg, num_iters, route)
        if route == 'loop':
            ctx.factors = newton_iterate(a, num_iters, reg, backoff, group)
        else:
            ctx.factors = _newton_factors(a, num_iters, reg, backoff, group, route)
        y = _apply_iterate(ctx.factors, rhs)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):
        (y,) = ctx.saved_tensors
        v_grad = _apply_iterate(ctx.factors, grad)
        grad_a = -(v_grad @ y.transpose(-2, -1)) if ctx.needs_input_grad[0] else None
        return grad_a, v_grad, None, None, None, None, None


def _apply_iterate(factors, rhs: Tensor) -> Tensor:
    """``V_T @ rhs`` from ``V_T`` itself or from :class:`SpectralFactors`."""
    with torch.no_grad():
        if isinstance(factors, SpectralFactors):
            return spectral_apply(factors, rhs.contiguous())
        return factors @ rhs


def newton_apply(a: Tensor, rhs: Tensor, num_iters: int = 20, reg: float = 0.01,
                 use_eig: Optional[bool] = None, backoff: bool = False,
                 group: int = 1, route: Optional[str] = None) -> Tensor:
    """``V_T @ rhs`` for the Newton-Raphson approximation ``V_T`` of ``(a + reg I)^-1``.

    With ``P = a + reg * I``, ``alpha`` from :func:`newton_initial_scale` and
    ``V_0 = alpha * P``, ``V_T`` is the result of ``num_iters`` steps
    ``V <- 2V - V P V`` (the iteration of the released SOFT models). For
    ``alpha < 2 / sigma_max^2`` it converges to the Moore-Penrose inverse and
    ``||P V P - P||`` (:func:`newton_residual` of ``P``) decreases
    monotonically. The loop costs ``2 m^3`` multiply-adds per iteration;
    through a spectral decomposition (:mod:`.newton_spectral`) ``V_T`` is
    never formed and ``rhs`` is multiplied by the factors. No autograd graph
    is built over the iterations: the backward is that of an inverse
    evaluated at ``V_T`` (``dL/da = -V^T G V^T`` for ``G = dL/dV``).

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        rhs (Tensor): Right-hand sides of shape ``(..., m, k)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        use_eig (bool, optional): Evaluate ``V_T`` through a spectral
            decomposition (True) or by the loop (False). Defaults to None:
            whichever route is fastest for the matrix size and device
            (:func:`~.newton_routes.choose_route`).
        backoff (bool): Start from :func:`backoff_initial_scale` (the
            released checkpoints' rule) instead of
            :func:`newton_initial_scale`. Defaults to False.
        group (int): Consecutive matrices that share the back-off step (the
            heads of one image). Defaults to 1.
        route (str, optional): ``'loop'``, ``'eigh'`` or ``'tridiagonal'``,
            overriding ``use_eig``. Defaults to None.

    Returns:
        Tensor: Shape ``(..., m, k)``.
    """
    _check_square(a)
    if rhs.shape[:-1] != a.shape[:-1]:
        raise ValueError(f'rhs of shape {tuple(rhs.shape)} does not match matrices '
                         f'of shape {tuple(a.shape)}; expected (..., m, k).')
    if exporting() and newton_node():
        return newton_node_output(a, rhs, num_iters, reg, backoff, group)
    route = resolve_route(a, use_eig, route)
    return _NewtonApply.apply(a, rhs, num_iters, reg, route, backoff, group)


NEWTON_NODE = 'ai.onnx.contrib::SOFTNewtonApply'
"""The custom ONNX node of :func:`newton_node_output` (domain, then name)."""


def newton_node_output(a: Tensor, rhs: Tensor, num_iters: int, reg: float,
                       backoff: bool, group: int) -> Tensor:
    """:func:`newton_apply` as one :data:`NEWTON_NODE` in an exported graph.

    Inputs ``a`` (B, m, m) and ``rhs`` (B, m, k); attributes ``num_iters``,
    ``reg``, ``backoff`` (0 or 1) and ``group``; output ``V_T @ rhs``.
    :mod:`mmsoft.deployment` runs it in ONNX Runtime with
    :func:`newton_apply` itself.
    """
    attrs = dict(num_iters=int(num_iters), reg=float(reg), backoff=int(bool(backoff)),
                 group=int(group))
    return torch.onnx.ops.symbolic(NEWTON_NODE, (a, rhs), attrs, dtype=rhs.dtype,
                                   shape=rhs.shape, version=1)


def newton_inverse(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   use_eig: Optional[bool] = None, backoff: bool = False,
                   group: int = 1, route: Optional[str] = None) -> Tensor:
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
    _check_square(a)
    return newton_apply(a, identity_like(a), num_iters, reg, use_eig, backoff, group,
                        route)


def identity_like(a: Tensor) -> Tensor:
    """Identity matrices broadcast to the shape of ``a`` (``(..., m, m)``)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return eye.expand_as(a)


def solve_apply(a: Tensor, rhs: Tensor, reg: float = 0.01) -> Tensor:
    """Exact ``(a + reg * I)^-1 @ rhs`` by Cholesky, falling back to an LU solve.

    Differentiable through torch's own backward. For the released models at
    224 px this equals :func:`newton_apply` closely; at detection sizes 20
    Newton steps have not converged and the two are different functions.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        rhs (Tensor): Right-hand sides of shape ``(..., m, k)``.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: Shape ``(..., m, k)``.
    """
    _check_square(a)
    p = regularised(a, reg)
    chol, info = torch.linalg.cholesky_ex(p)
    if bool((info == 0).all()):
        return torch.cholesky_solve(rhs, chol)
    return torch.linalg.solve(p, rhs)


def solve_inverse(a: Tensor, reg: float = 0.01) -> Tensor:
    """Exact ``(a + reg * I)^-1``: :func:`solve_apply` to the identity.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: Shape ``(..., m, m)``.
    """
    _check_square(a)
    return solve_apply(a, identity_like(a), reg)


def newton_residual(a: Tensor, v: Tensor) -> Tensor:
    """Relative residual ``||A V A - A|| / ||A||`` of an approximate inverse.

    Zero when ``V`` is a generalised inverse of ``A``; for the Newton iterates
    of ``A`` it decreases monotonically. To judge :func:`newton_inverse`,
    pass the matrix it inverts, ``A = a + reg * I``.

    Args:
        a (Tensor): Matrices A of shape ``(..., m, m)``.
        v (Tensor): Their approximate inverses, same shape.

    Returns:
        Tensor: Frobenius-norm ratio per matrix, shape ``(...)``.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import newton_residual
        >>> a = torch.eye(2) * 4
        >>> newton_residual(a, torch.eye(2) / 4)
        tensor(0.)
    """
    _check_square(a)
    return torch.linalg.matrix_norm(a @ v @ a - a) / torch.linalg.matrix_norm(a)


def _check_square(a: Tensor) -> None:
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(
            f'Expected square matrices of shape (..., m, m), got {tuple(a.shape)}.')
