"""The Gaussian kernel that replaces softmax attention in SOFT."""
import torch
from torch import Tensor


def squared_distance(x: Tensor, y: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances ``||x_i - y_j||^2``.

    Computed as ``||x||^2 + ||y||^2 - 2 x.y`` with one batched matmul and
    clamped at zero (rounding can make the expansion slightly negative).

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.

    Returns:
        Tensor: Distances of shape ``(..., N, M)``.
    """
    x_sq = x.pow(2).sum(-1, keepdim=True)
    y_sq = y.pow(2).sum(-1).unsqueeze(-2)
    return torch.clamp_min(x_sq + y_sq - 2 * (x @ y.transpose(-2, -1)), 0)


def gaussian_kernel(x: Tensor, y: Tensor) -> Tensor:
    """Gaussian kernel ``exp(-||x_i - y_j||^2 / 2)`` between two point sets.

    SOFT scales queries by ``d ** -0.25`` before calling this, which gives the
    paper's ``exp(-||q_i - k_j||^2 / (2 sqrt(d)))``.

    Args:
        x (Tensor): Points of shape ``(..., N, d)``.
        y (Tensor): Points of shape ``(..., M, d)``.

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
    return torch.exp(-0.5 * squared_distance(x, y))
