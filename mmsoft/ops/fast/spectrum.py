"""The Newton iterate per eigenvalue: the closed form the spectral routes use.

Every Newton iterate ``V_k`` is a polynomial in ``P = a + reg I``. With
``P = U diag(l) U^T``, ``V_T = U diag(v_T) U^T`` where ``v_0 = alpha l`` and
``v <- 2 v - l v^2``, so ``V_T @ rhs`` costs one decomposition and a few
thin products instead of ``2 T`` products of ``m x m`` matrices.
"""
from torch import Tensor


def newton_scalar_iterate(values: Tensor, start: Tensor, num_iters: int) -> Tensor:
    """``num_iters`` steps of ``v <- 2 v - l v^2`` for each eigenvalue ``l``.

    With ``e_k = 1 - l v_k`` a step is ``v_{k+1} = v_k (1 + e_k)`` and
    ``e_{k+1} = e_k^2``, so ``v_T = v_0 prod_{k<T} (1 + e_1^(2^(k-1)))`` for
    ``k >= 1``, evaluated in float64 (where ``e_1`` keeps ``l v_0`` even for
    the smallest ``l``) and returned in the input dtype. Each factor reads
    ``e_1`` once: written as the recursion, ``torch.compile`` (inductor)
    inlines ``v`` into every later step and the expression grows as ``3^T``,
    so compiling a model never finishes.

    Args:
        values (Tensor): Eigenvalues ``l`` of ``P``.
        start (Tensor): ``v_0 = alpha * l``, same shape.
        num_iters (int): Number of steps ``T``.

    Returns:
        Tensor: ``v_T``, in the dtype of ``values``.
    """
    v = start.double()
    if num_iters == 0:
        return v.to(values.dtype)
    e0 = 1 - values.double() * v
    v = v * (1 + e0)
    e1 = e0 * e0
    for k in range(1, num_iters):
        v = v * (1 + e1.pow(2.0 ** (k - 1)))
    return v.to(values.dtype)


def newton_spectrum(eigvals: Tensor, alpha, reg: float, num_iters: int) -> Tensor:
    """``v_T`` per eigenvalue of ``P = a + reg I`` from the eigenvalues of
    ``a`` and the start ``alpha`` (a float or a tensor broadcast against
    ``eigvals``): :func:`newton_scalar_iterate` from ``v_0 = alpha * l``."""
    values = eigvals + reg
    return newton_scalar_iterate(values, alpha * values, num_iters)
