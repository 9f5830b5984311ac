"""Resizing of learned absolute position embeddings."""
import math
import operator
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmsoft.ops import exporting


def resize_pos_embed(pos_embed: Tensor, dst_hw: Tuple[int, int],
                     num_extra_tokens: int = 0) -> Tensor:
    """Bilinearly resize a square grid of position embeddings to ``dst_hw``.

    Args:
        pos_embed (Tensor): (1, num_extra_tokens + S * S, C): extra tokens
            (such as a class token slot) first, then an S x S grid.
        dst_hw (tuple[int, int]): Target grid (H, W).
        num_extra_tokens (int): Leading tokens kept as they are. Defaults to 0.

    Returns:
        Tensor: (1, num_extra_tokens + H * W, C); ``pos_embed`` itself when the
        grid already has that size (except while exporting, so that the
        graph resizes at every size).
    """
    extra, grid = pos_embed[:, :num_extra_tokens], pos_embed[:, num_extra_tokens:]
    # Plain ints, also under a JIT trace (where shapes are tensors): the
    # stored grid is a constant of the model; only dst_hw follows the input.
    tokens = operator.index(grid.shape[1])
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise ValueError(
            f'Position embeddings of shape {tuple(pos_embed.shape)} with '
            f'{num_extra_tokens} extra tokens do not hold a square grid.')
    if not exporting() and (side, side) == tuple(dst_hw):  # exports resize always
        return pos_embed
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=tuple(dst_hw), mode='bilinear',
                         align_corners=False)
    return torch.cat([extra, grid.flatten(2).transpose(1, 2)], dim=1)
