"""Inverses of the bottleneck kernel: Newton-Raphson (the model's) and exact.

SOFT needs ``pinv(A2)`` for the ``m x m`` kernel between landmarks. The
released models compute it with Newton-Raphson iterations on the regularised
matrix ``P = A2 + reg * I``; :func:`newton_inverse` is that function, and
:func:`solve_inverse` the exact inverse of the same ``P``.
"""
import torch
from torch import Tensor
from torch.autograd import Function

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
    row_sum = a.abs().sum(-1).amax(-1)
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
    ``v <- 2 v - l v^2``. So the ``T`` iterations cost one ``eigh`` (about
    ``9 m^3``) and two products instead of ``4 T m^3`` multiply-adds, giving the
    same function up to rounding, converged or not. Runs in float64 for
    ``m > 64`` float32 inputs to keep the eigenvectors accurate. Fewer
    multiply-adds do not make it faster everywhere: eigensolvers parallelise
    worse than matrix products, and on a 2-core CPU it took about 7x as long
    as the loop at m = 196 and m = 1025.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of Newton iterations to reproduce.
            Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: The iterate ``V_T``, same dtype as ``a``.
    """
    with torch.no_grad(), region('newton'):
        p = _regularised(a, reg)
        p = (p + p.transpose(-2, -1)) / 2
        work = p.double() if p.dtype == torch.float32 and p.shape[-1] > 64 else p
        eigvals, eigvecs = torch.linalg.eigh(work)
        v = newton_initial_scale(a).squeeze(-1).to(work.dtype) * eigvals
        for _ in range(num_iters):
            v = 2 * v - eigvals * v * v
        out = (eigvecs * v.unsqueeze(-2)) @ eigvecs.transpose(-2, -1)
        return out.to(a.dtype)


class _NewtonInverse(Function):
    """Newton forward; backward of an inverse, ``-V^T G V^T``."""

    @staticmethod
    def forward(ctx, a: Tensor, num_iters: int, reg: float,
                use_eig: bool = False) -> Tensor:
        iterate = newton_iterate_eig if use_eig else newton_iterate
        v = iterate(a, num_iters, reg)
        ctx.save_for_backward(v)
        return v

    @staticmethod
    def backward(ctx, grad: Tensor):
        (v,) = ctx.saved_tensors
        v_t = v.transpose(-2, -1)
        return -(v_t @ grad @ v_t), None, None, None


def newton_inverse(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   use_eig: bool = False) -> Tensor:
    """Approximate ``(a + reg * I)^-1`` by Newton-Raphson iterations.

    With ``P = a + reg * I``, ``alpha`` from :func:`newton_initial_scale` and
    ``V_0 = alpha * P``, it runs ``V <- 2V - V P V`` ``num_iters`` times (the
    iteration of the released SOFT models). For ``alpha < 2 / sigma_max^2``
    it converges to the Moore-Penrose inverse and ``||P V P - P||``
    (:func:`newton_residual` of ``P``) decreases monotonically. The forward
    builds no autograd graph; the backward is the analytic gradient of a
    matrix inverse evaluated at the result,
    ``dL/da = -V^T G V^T``. Cost: ``4 m^3`` multiply-adds per iteration.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        num_iters (int): Number of iterations. Defaults to 20.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.
        use_eig (bool): Compute the same iterate through one eigendecomposition
            (:func:`newton_iterate_eig`): fewer multiply-adds for large
            ``m``, though not necessarily less time.
            Defaults to False.

    Returns:
        Tensor: Shape ``(..., m, m)``.

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
    return _NewtonInverse.apply(a, num_iters, reg, use_eig)


def solve_inverse(a: Tensor, reg: float = 0.01) -> Tensor:
    """Exact ``(a + reg * I)^-1`` by Cholesky, falling back to an LU solve.

    Differentiable through torch's own backward. For the released models at
    224 px this equals :func:`newton_inverse` closely; at detection sizes 20
    Newton steps have not converged and the two are different functions.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: Shape ``(..., m, m)``.
    """
    _check_square(a)
    p = _regularised(a, reg)
    chol, info = torch.linalg.cholesky_ex(p)
    if bool((info == 0).all()):
        return torch.cholesky_inverse(chol)
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    return torch.linalg.solve(p, eye.expand_as(p))


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
