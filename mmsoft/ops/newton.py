"""The Newton-Raphson iterate of SOFT: its start, its reference loop, its residual.

SOFT needs ``pinv(A2)`` for the ``m x m`` kernel between landmarks. The models
compute it with ``T`` Newton-Raphson steps ``V <- 2V - V P V`` on
``P = a + reg I``, started from ``V_0 = alpha P``. This module is the
function's definition: the two rules for ``alpha`` (:func:`initial_scale`:
one step per matrix, mmsoft's default, or the released checkpoints' back-off
over the heads of one image) and the loop itself (:func:`newton_iterate`),
float64-capable, which every other evaluation of the iterate (the routes of
:mod:`.dispatch`) is held to.
"""
import torch
from torch import Tensor

from .execution import in_graph
from .regions import region


def check_square(a: Tensor) -> None:
    """Raise a ValueError unless ``a`` holds square matrices ``(..., m, m)``."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(
            f'Expected square matrices of shape (..., m, m), got {tuple(a.shape)}.')


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


def identity_like(a: Tensor) -> Tensor:
    """Identity matrices broadcast to the shape of ``a`` (``(..., m, m)``)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return eye.expand_as(a)


def _max_row_sum(a: Tensor) -> Tensor:
    """Largest absolute row sum of each matrix, shape ``(...)``.

    For matrices without a negative entry (SOFT's kernels) the row sums
    themselves, with no ``|a|`` pass: 0.02 / 0.2 / 0.8 ms for SOFT-Tiny's
    kernels at 224 x 224 / 512 x 512 / 800 x 1344 against
    ``torch.linalg.matrix_norm``'s 0.8 / 2.3 / 5.3 ms (one CPU core).
    """
    if in_graph():  # no data-dependent branch (matrix_norm's export fixes the batch)
        return a.abs().sum(-1).amax(-1)
    if a.numel() and bool(a.amin() >= 0):
        return a.sum(-1).amax(-1)
    return a.abs().sum(-1).amax(-1)


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


def initial_scale(a: Tensor, reg: float, backoff: bool = False,
                  group: int = 1) -> Tensor:
    """``alpha`` of ``V_0 = alpha * P`` for ``P = a + reg I``, by either rule.

    Args:
        a (Tensor): Symmetric matrices ``(..., m, m)``.
        reg (float): Ridge added to the diagonal.
        backoff (bool): The released back-off rule on ``P``
            (:func:`backoff_initial_scale`) instead of the per-matrix step on
            ``a`` (:func:`newton_initial_scale`). Defaults to False.
        group (int): Matrices sharing the back-off step. Defaults to 1.

    Returns:
        Tensor: Shape ``(..., 1, 1)``.
    """
    with torch.no_grad():
        if backoff:
            return backoff_initial_scale(regularised(a, reg), group)
        return newton_initial_scale(a)


def newton_loop(p: Tensor, alpha: Tensor, num_iters: int) -> Tensor:
    """``num_iters`` steps ``V <- 2V - V P V`` from ``V_0 = alpha P``.

    Args:
        p (Tensor): The matrices ``P`` ``(..., m, m)``.
        alpha (Tensor): The start, broadcast against ``p`` (``(..., 1, 1)``).
        num_iters (int): Steps ``T``.

    Returns:
        Tensor: ``V_T``, shape of ``p``.
    """
    with torch.no_grad(), region('newton'):
        v = alpha * p
        shape = v.shape
        p3, v = p.reshape(-1, *shape[-2:]), v.reshape(-1, *shape[-2:])
        for _ in range(num_iters):
            v = torch.baddbmm(v, v, torch.bmm(p3, v), beta=2, alpha=-1)
        return v.reshape(shape)


def newton_iterate(a: Tensor, num_iters: int = 20, reg: float = 0.01,
                   backoff: bool = False, group: int = 1) -> Tensor:
    """The Newton iterate ``V_T`` of ``(a + reg I)^-1`` by the loop, without
    autograd: the reference every route is held to (float64 in the tests).

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
    check_square(a)
    with torch.no_grad():
        return newton_loop(regularised(a, reg), initial_scale(a, reg, backoff, group),
                           num_iters)


def newton_residual(a: Tensor, v: Tensor) -> Tensor:
    """Relative residual ``||A V A - A|| / ||A||`` of an approximate inverse.

    Zero when ``V`` is a generalised inverse of ``A``; for the Newton iterates
    of ``A`` it decreases monotonically. To judge an iterate of
    ``a + reg * I``, pass that matrix as ``A``.

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
    check_square(a)
    return torch.linalg.matrix_norm(a @ v @ a - a) / torch.linalg.matrix_norm(a)
