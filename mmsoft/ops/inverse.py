"""Inverses of the bottleneck kernel: Newton-Raphson (the model's) and exact.

SOFT needs ``pinv(A2)`` for the ``m x m`` kernel between landmarks. The
released models compute it with Newton-Raphson iterations on the regularised
matrix ``P = A2 + reg * I``; :func:`newton_inverse` is that function, and
:func:`solve_inverse` the exact inverse of the same ``P``.
"""
from typing import Optional

import torch
from torch import Tensor
from torch.autograd import Function

from .export_mode import exporting
from .regions import region


def _regularised(a: Tensor, reg: float) -> Tensor:
    """``a + reg * I`` for a batch of square matrices."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return a + reg * eye


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
    if exporting():  # matrix_norm's export fixes the batch size
        row_sum = a.abs().sum(-1).amax(-1)
    else:
        row_sum = torch.linalg.matrix_norm(a, ord=float('inf'))  # no |a| temporary
    return (1.8 / row_sum.pow(2))[..., None, None]


def newton_iterate(a: Tensor, num_iters: int = 20, reg: float = 0.01) -> Tensor:
    """Run the Newton-Raphson iteration ``V <- 2V - V P V`` without autograd.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: The iterate ``V_T`` approximating ``(a + reg I)^-1``.
    """
    with torch.no_grad(), region('newton'):
        p = _regularised(a, reg)
        v = newton_initial_scale(a) * p
        shape = v.shape
        p3, v = p.reshape(-1, *shape[-2:]), v.reshape(-1, *shape[-2:])
        for _ in range(num_iters):
            v = torch.baddbmm(v, v, torch.bmm(p3, v), beta=2, alpha=-1)
        return v.reshape(shape)


def newton_iterate_eig(a: Tensor, num_iters: int = 20, reg: float = 0.01) -> Tensor:
    """:func:`newton_iterate` through one symmetric eigendecomposition.

    Every Newton iterate is a polynomial in ``P``: with ``P = U diag(l) U^T``,
    ``V_k = U diag(v_k) U^T`` where ``v_0 = alpha * l`` and
    ``v <- 2 v - l v^2``. So the ``T`` iterations cost one ``eigh`` and one
    product instead of ``2 T`` matrix products, giving the same function up
    to rounding, converged or not. On a 2-core CPU it is faster than the loop
    from ``m ~ 100`` (8x at ``m = 1050``); on CUDA the loop is faster.

    In float32 the eigenvectors of nearly equal small eigenvalues carry
    rounding: at ``m ~ 1000`` ``V`` differs from the float64 iterate by up to
    ``~1e-4`` relative (the loop by ``~5e-6``), in directions the attention
    output does not see: through SOFT-Tiny at 800 x 1344 both give the
    float64 model's outputs to ``~6e-7``.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of Newton iterations to reproduce.
            Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: The iterate ``V_T``, same dtype as ``a``.
    """
    eigvecs, values = _newton_eig_factors(a, num_iters, reg)
    return (eigvecs * values.unsqueeze(-2)) @ eigvecs.transpose(-2, -1)


def _newton_eig_factors(a: Tensor, num_iters: int, reg: float) -> tuple:
    """``(U, v_T)`` with ``V_T = U diag(v_T) U^T``; see :func:`newton_iterate_eig`."""
    with torch.no_grad(), region('newton'):
        # eigh reads the lower triangle; a + reg I shifts the eigenvalues.
        eigvals, eigvecs = torch.linalg.eigh(a)
        eigvals = eigvals + reg
        v = newton_initial_scale(a).squeeze(-1) * eigvals
        for _ in range(num_iters):
            v = 2 * v - eigvals * v * v
        return eigvecs, v


EIG_MIN_SIZE = 96
"""Smallest ``m`` for which :func:`newton_inverse` picks the eigendecomposition
on CPU (batch of 10 on 2 cores: loop 0.9 ms vs eig 1.2 ms at ``m = 49``,
5.0 ms vs 3.2 ms at ``m = 100``)."""


def prefers_eig(a: Tensor) -> bool:
    """Whether :func:`newton_inverse` evaluates ``a``'s iterate by ``eigh``.

    True on CPU from :data:`EIG_MIN_SIZE` landmarks; the loop of matrix
    products everywhere else (GPU eigensolvers are far slower than products)
    and always while :func:`~mmsoft.ops.exporting` (no size-dependent choice).
    """
    return not exporting() and a.device.type == 'cpu' and a.shape[-1] >= EIG_MIN_SIZE


class _NewtonApply(Function):
    """``y = V_T @ rhs``; backward of an inverse applied to ``rhs``.

    Treating ``V = P^-1`` (symmetric), ``dL/drhs = V g`` and
    ``dL/da = -(V g) y^T``, so the backward multiplies by ``V`` once more and
    never differentiates through the iterations.
    """

    @staticmethod
    def forward(ctx, a: Tensor, rhs: Tensor, num_iters: int, reg: float,
                use_eig: bool) -> Tensor:
        if use_eig:
            ctx.factors = _newton_eig_factors(a, num_iters, reg)
        else:
            ctx.factors = (newton_iterate(a, num_iters, reg), )
        y = _apply_iterate(ctx.factors, rhs)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):
        (y,) = ctx.saved_tensors
        v_grad = _apply_iterate(ctx.factors, grad)
        grad_a = -(v_grad @ y.transpose(-2, -1)) if ctx.needs_input_grad[0] else None
        return grad_a, v_grad, None, None, None


def _apply_iterate(factors: tuple, rhs: Tensor) -> Tensor:
    """``V_T @ rhs`` from ``(V_T,)`` or from eigenfactors ``(U, v_T)``."""
    if len(factors) == 1:
        return factors[0] @ rhs
    eigvecs, values = factors
    return eigvecs @ (values.unsqueeze(-1) * (eigvecs.transpose(-2, -1) @ rhs))


def newton_apply(a: Tensor, rhs: Tensor, num_iters: int = 20, reg: float = 0.01,
                 use_eig: Optional[bool] = None) -> Tensor:
    """``V_T @ rhs`` for the Newton-Raphson approximation ``V_T`` of ``(a + reg I)^-1``.

    With ``P = a + reg * I``, ``alpha`` from :func:`newton_initial_scale` and
    ``V_0 = alpha * P``, ``V_T`` is the result of ``num_iters`` steps
    ``V <- 2V - V P V`` (the iteration of the released SOFT models). For
    ``alpha < 2 / sigma_max^2`` it converges to the Moore-Penrose inverse and
    ``||P V P - P||`` (:func:`newton_residual` of ``P``) decreases
    monotonically. The loop costs ``2 m^3`` multiply-adds per iteration;
    through the eigendecomposition ``V_T`` is never formed and ``rhs`` is
    multiplied by the factors. No autograd graph is built over the
    iterations: the backward is that of an inverse evaluated at ``V_T``
    (``dL/da = -V^T G V^T`` for ``G = dL/dV``).

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        rhs (Tensor): Right-hand sides of shape ``(..., m, k)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        use_eig (bool, optional): Evaluate ``V_T`` through one
            eigendecomposition (:func:`newton_iterate_eig`) or by the loop
            (:func:`newton_iterate`). Defaults to None: whichever is faster
            for the matrix size and device (:func:`prefers_eig`).

    Returns:
        Tensor: Shape ``(..., m, k)``.
    """
    _check_square(a)
    if rhs.shape[:-1] != a.shape[:-1]:
        raise ValueError(f'rhs of shape {tuple(rhs.shape)} does not match matrices '
                         f'of shape {tuple(a.shape)}; expected (..., m, k).')
    if use_eig is None:
        use_eig = prefers_eig(a)
    return _NewtonApply.apply(a, rhs, num_iters, reg, use_eig)


def newton_inverse(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   use_eig: Optional[bool] = None) -> Tensor:
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
    return newton_apply(a, _identity_like(a), num_iters, reg, use_eig)


def _identity_like(a: Tensor) -> Tensor:
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
    p = _regularised(a, reg)
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
    return solve_apply(a, _identity_like(a), reg)


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
