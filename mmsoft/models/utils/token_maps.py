"""Tokens as a map, a view of the same memory."""
from typing import Tuple

import torch
from torch import Tensor


def tokens_as_map(tokens: Tensor, hw: Tuple[int, int]) -> Tensor:
    """Tokens (B, H * W, C), row by row on the grid ``hw``, as a (B, C, H, W)
    channels-last view of the same memory.

    A convolution reads a channels-last input and writes a channels-last
    output without reordering copies when its strides are exactly those of
    a channels-last tensor; a lone image's batch stride, which any value
    fits, is set to that value too.

    Args:
        tokens (Tensor): (B, N, C); a view where its rows of C channels are
            contiguous (else a copy).
        hw (tuple[int, int]): The grid (H, W), ``H * W = N``.

    Returns:
        Tensor: (B, C, H, W).
    """
    batch, _, channels = tokens.shape
    height, width = hw
    grid = tokens.reshape(batch, height, width, channels).permute(0, 3, 1, 2)
    if batch == 1 and grid.stride(0) != height * width * channels and \
            not torch.compiler.is_compiling():
        grid = grid.as_strided(grid.shape,
                               (height * width * channels, *grid.stride()[1:]))
    return grid
