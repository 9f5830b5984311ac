"""The Newton iterate on a tridiagonal matrix from its few large eigenpairs.

From ``V_0 = alpha P`` the iterate is, per eigenvalue ``l`` of ``P``,
``v_T(l) = (1 - (1 - alpha l^2)^(2^T)) / l``
(:func:`~.spectrum.newton_scalar_iterate`): ``l h(l^2)`` with ``h``
a polynomial of degree ``2^T - 1``. Where
``t = 2^T alpha l^2 <= 4``, ``h`` is as smooth as ``(1 - e^-t) / t``, and a
Chebyshev series of degree :data:`DEGREE` in ``x = l^2`` on
``[0, x_c = 4 / (2^T alpha)]`` matches it to about 1e-10 of its size. Only
the eigenvalues above ``sqrt(x_c)`` need to be known one by one: with the
released checkpoints' back-off start, 2 to 34 of the 1,050 of SOFT-Tiny's
and SOFT-Norm-Tiny's kernels at 800 x 1344 (with the ridge start hundreds,
where :func:`deflated_apply` declines).

For the tridiagonal ``T`` of ``P`` (:func:`~.lapack.tridiagonalize`) and a
thin block ``Y``::

    V_T Y = Z_b diag(v_T(l_b)) Z_b^T Y + T h(T^2) (I - Z_b Z_b^T) Y

with the large eigenpairs ``(l_b, Z_b)`` from ``?stemr`` (those alone) and
``h(T^2)`` by the Chebyshev recurrence, each step one pentadiagonal product.
Outside ``[0, x_c]`` the series grows fast, so every step projects its
result off ``Z_b`` again: no component along a large eigenvector survives
rounding. All of it runs in float64 on ``O(m (k + k_b))`` numbers per step,
instead of ``?stedc``'s full eigenvectors (up to ``O(m^3)``) and two
``m x m`` by ``m x k`` products.
"""
import math
from typing import Optional

import torch
from torch import Tensor

from . import lapack
from .spectrum import newton_scalar_iterate

DEGREE = 12
"""Degree of the Chebyshev series of ``h`` on ``t <= T_SPLIT``."""
T_SPLIT = 4.0
"""Eigenvalues with ``2^T alpha l^2`` above this are taken one by one."""
MAX_COLUMNS = 64
"""Widest ``Y`` taken (the attention's head width); wider ones, as the
identity of :func:`~mmsoft.ops.newton_inverse`, cost more than the full
eigenvectors."""


def max_large(m: int) -> int:
    """Most eigenpairs taken one by one for an ``m x m`` matrix: beyond
    ``max(8, m // 24)`` ``?stedc`` is as fast (measured at ``m`` = 1,050 on
    SOFT-Norm-Tiny's back-off kernels, where 34 large eigenpairs took 16 ms
    against ``?stedc``'s 33 ms, and SOFT-Tiny's ridge kernels, where 12 took
    8.5 ms against 8.7 ms)."""
    return max(8, m // 24)


def deflated_apply(diag: Tensor, off: Tensor, y_t: Tensor, alpha: float, reg: float,
                   num_iters: int) -> Optional[Tensor]:
    """``V_T Y`` for the tridiagonal ``T + reg I``, or None where the full
    eigenvectors are the cheaper (or the only sound) way.

    None when ``Y`` has more than :data:`MAX_COLUMNS` columns, more than
    :func:`max_large` eigenvalues lie above ``sqrt(x_c)``, one lies below
    ``-sqrt(x_c)``, the entries or ``alpha`` are not finite, or ``?stemr``
    fails.

    Args:
        diag (Tensor): The diagonal ``(m,)`` of ``T``.
        off (Tensor): Its off-diagonal ``(m - 1,)``.
        y_t (Tensor): ``Y`` transposed, ``(k, m)``.
        alpha (float): The start ``V_0 = alpha P``.
        reg (float): Added to ``T``'s diagonal (``P = T + reg I``).
        num_iters (int): Newton steps ``T``.

    Returns:
        Tensor or None: ``(V_T Y)^T``, ``(k, m)`` in float64.
    """
    m, k = diag.shape[0], y_t.shape[0]
    if m < 2 or k > MAX_COLUMNS or not 0 < alpha < math.inf:
        return None
    d = diag.double() + reg
    e = off.double()
    if not (torch.isfinite(d).all() and torch.isfinite(e).all()):
        return None
    x_c = T_SPLIT / (2.0**num_iters * alpha)
    split = math.sqrt(x_c)
    bound = 2 * float(d.abs().max() + 2 * e.abs().max()) + 1  # beyond Gershgorin's
    large, z_b = d.new_empty(0), d.new_empty(0, m)
    try:
        if split < bound:  # else every eigenvalue is in the series' range
            if lapack.tridiagonal_count(d, e, -bound, -split):
                return None
            count = lapack.tridiagonal_count(d, e, split, bound)
            if count > max_large(m):
                return None
            if count:
                large, z_b = lapack.tridiagonal_eigh_in(d, e, split, bound, count)
    except RuntimeError:  # ?stemr failed; ?stedc takes the matrix
        return None
    y = y_t.to(torch.float64, copy=True)
    coords = y @ z_b.t()
    out = (coords * newton_scalar_iterate(large, alpha * large, num_iters)) @ z_b
    rest = y.sub_(coords @ z_b)
    coefficients = _coefficients(alpha, num_iters, x_c)
    series = _chebyshev_series(rest, d, e, z_b, x_c, coefficients)
    return out.add_(_tridiagonal_product(series, d, e))


def _coefficients(alpha: float, num_iters: int, x_c: float) -> Tensor:
    """Chebyshev coefficients of ``h(x) = v_T(sqrt x) / sqrt x`` on
    ``[0, x_c]`` (interpolation at :data:`DEGREE` + 1 Chebyshev nodes)."""
    j = torch.arange(DEGREE + 1, dtype=torch.float64)
    theta = math.pi * (j + 0.5) / (DEGREE + 1)
    root = ((theta.cos() + 1) * (x_c / 2)).sqrt()
    h = newton_scalar_iterate(root, alpha * root, num_iters) / root
    coefficients = (torch.cos(j.unsqueeze(1) * theta) @ h) * (2.0 / (DEGREE + 1))
    coefficients[0] /= 2
    return coefficients


def _chebyshev_series(u0: Tensor, d: Tensor, e: Tensor, z_b: Tensor, x_c: float,
                      coefficients: Tensor) -> Tensor:
    """``sum_j c_j C_j(S) U`` for ``S = 2 T^2 / x_c - I`` on rows ``U`` that
    are orthogonal to ``z_b``'s rows, each term projected off them again."""
    scale = 4.0 / x_c  # the diagonals of 2 S, the recurrence's operator
    square = d * d
    square[1:] += e * e
    square[:-1] += e * e
    bands = (square * scale - 2.0, e * (d[:-1] + d[1:]) * scale, e[:-1] * e[1:] * scale)

    def step(u: Tensor, previous: Optional[Tensor]) -> Tensor:
        out = _banded_product(u, bands)
        out = out.mul_(0.5) if previous is None else out.sub_(previous)
        return out.sub_((out @ z_b.t()) @ z_b)

    total = u0 * coefficients[0]
    before, current = u0, step(u0, None)
    total.add_(current, alpha=float(coefficients[1]))
    for c in coefficients[2:].tolist():
        before, current = current, step(current, before)
        total.add_(current, alpha=c)
    return total


def _banded_product(u: Tensor, bands) -> Tensor:
    """Rows ``u`` times the symmetric banded matrix with diagonal ``bands[0]``
    and off-diagonals ``bands[1:]`` (the first above, then the next)."""
    out = u * bands[0]
    for shift, band in enumerate(bands[1:], 1):
        out[:, shift:].addcmul_(u[:, :-shift], band)
        out[:, :-shift].addcmul_(u[:, shift:], band)
    return out


def _tridiagonal_product(u: Tensor, d: Tensor, e: Tensor) -> Tensor:
    """Rows ``u`` times the tridiagonal matrix ``(d, e)``."""
    return _banded_product(u, (d, e))
