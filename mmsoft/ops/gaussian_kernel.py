"""The Gaussian kernel that replaces softmax attention in SOFT."""
from typing import Optional

import torch
from torch import Tensor


def augmented_points(x: Tensor, y: Tensor) -> tuple:
    """``[x, -|x|^2/2, 1]`` and ``[y, 1, -|y|^2/2]``, whose products are
    ``x.y - |x|^2/2 - |y|^2/2 = -||x - y||^2 / 2``.

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.

    Returns:
        tuple[Tensor, Tensor]: Shapes ``(..., N, d + 2)`` and ``(..., M, d + 2)``.
    """
    x_sq = x.pow(2).sum(-1, keepdim=True).mul(-0.5)
    y_sq = y.pow(2).sum(-1, keepdim=True).mul(-0.5)
    return (torch.cat([x, x_sq, torch.ones_like(x_sq)], dim=-1),
            torch.cat([y, torch.ones_like(y_sq), y_sq], dim=-1))


def half_neg_squared_distance(x: Tensor, y: Tensor,
                              out: Optional[Tensor] = None) -> Tensor:
    """``-||x_i - y_j||^2 / 2`` from one matmul of :func:`augmented_points`.

    The whole ``N x M`` result is written once, by the matmul, with no
    broadcast additions over it. Not clamped: rounding can make entries
    slightly positive.

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.
        out (Tensor, optional): Written with the result (no autograd).
            Defaults to None (a new tensor).

    Returns:
        Tensor: Shape ``(..., N, M)``.
    """
    x_aug, y_aug = augmented_points(x, y)
    return torch.matmul(x_aug, y_aug.transpose(-2, -1), out=out)


def squared_distance(x: Tensor, y: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances ``||x_i - y_j||^2``.

    The expansion ``||x||^2 + ||y||^2 - 2 x.y`` (one matmul, see
    :func:`half_neg_squared_distance`), clamped at zero where rounding makes
    it slightly negative.

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.

    Returns:
        Tensor: Distances of shape ``(..., N, M)``.
    """
    return half_neg_squared_distance(x, y).mul(-2).clamp_min(0)


def gaussian_kernel(x: Tensor, y: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Gaussian kernel ``exp(-||x_i - y_j||^2 / 2)`` between two point sets.

    SOFT scales queries by ``d ** -0.25`` before calling this, which gives the
    paper's ``exp(-||q_i - k_j||^2 / (2 sqrt(d)))``. Without autograd the
    clamp and the exponential run in place on the matmul's result, so an
    ``N x M`` kernel costs one matmul and two passes over memory.

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.
        out (Tensor, optional): Written with the kernel (no autograd).
            Defaults to None (a new tensor).

    Returns:
        Tensor: Kernel values in ``(0, 1]`` of shape ``(..., N, M)``.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import gaussian_kernel
        >>> x = torch.zeros(1, 2, 4)
        >>> gaussian_kernel(x, x)
        tensor([[[1., 1.],
                 [1., 1.]]])
    """
    exponent = half_neg_squared_distance(x, y, out)
    if out is None and torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
        return exponent.clamp_max(0).exp()
    return exponent.clamp_max_(0).exp_()
