"""The exact inverse of the bottleneck kernel (``InverseCfg(method='solve')``)."""
import torch
from torch import Tensor

from .newton import check_square, identity_like, regularised


def solve_apply(a: Tensor, rhs: Tensor, reg: float = 0.01) -> Tensor:
    """Exact ``(a + reg * I)^-1 @ rhs`` by Cholesky, falling back to an LU solve.

    Differentiable through torch's own backward. For the released models at
    224 px this equals the Newton iterate closely; at detection sizes 20
    Newton steps have not converged and the two are different functions.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``.
        rhs (Tensor): Right-hand sides of shape ``(..., m, k)``.
        reg (float): Ridge added to the diagonal. Defaults to 0.01.

    Returns:
        Tensor: Shape ``(..., m, k)``.
    """
    check_square(a)
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
    check_square(a)
    return solve_apply(a, identity_like(a), reg)
