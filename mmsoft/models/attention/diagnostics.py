"""Diagnostics of a SOFT attention layer, for analysis tools and tests.

They read a :class:`~.soft_attention.SOFTAttention` without changing it:
:func:`attention_row` (``tools/analysis/visualize_attention.py``) and
:func:`inverse_residual` (how well the bottleneck inverse converged).
"""
from typing import Tuple

import torch
from torch import Tensor

from mmsoft.ops import bottleneck_inverse, gaussian_kernel, newton_residual, regularised

from .soft_attention import SOFTAttention


@torch.no_grad()
def attention_row(attn: SOFTAttention, x: Tensor, hw_shape: Tuple[int, int],
                  index: int) -> Tensor:
    """Kernel attention weights of one query over all tokens, per head.

    Row ``index`` of ``A1 P A1^T`` from the low-rank factors, in O(N m)
    memory (the N x N matrix is never formed); in exact mode, the row of
    the full kernel. The value convolution is not part of it.

    Args:
        attn (SOFTAttention): The layer.
        x (Tensor): Its input tokens (B, N, C).
        hw_shape (tuple[int, int]): Their grid (H, W).
        index (int): Query position, ``row * W + column``.

    Returns:
        Tensor: (B, h, N).
    """
    attn.check(x, hw_shape)
    batch, num_tokens, _ = x.shape
    q = attn.query_heads(x)
    query = q[:, index:index + 1]
    if attn.mode == 'exact':
        return gaussian_kernel(query, q).view(batch, attn.num_heads, num_tokens)
    landmarks = attn.query_landmarks(q, hw_shape)
    middle = bottleneck_inverse(gaussian_kernel(landmarks, landmarks), attn.inverse,
                                group=attn.num_heads)
    row = (gaussian_kernel(query, landmarks) @ middle) @ gaussian_kernel(landmarks, q)
    return row.view(batch, attn.num_heads, num_tokens)


@torch.no_grad()
def inverse_residual(attn: SOFTAttention, x: Tensor,
                     hw_shape: Tuple[int, int]) -> Tensor:
    """How well the bottleneck inverse of this input was computed.

    Args:
        attn (SOFTAttention): A low-rank layer.
        x (Tensor): Its input tokens (B, N, C).
        hw_shape (tuple[int, int]): Their grid (H, W).

    Returns:
        Tensor: ``||P V P - P|| / ||P||`` per image and head, (B, h), with
        ``P = A2 + reg I`` and ``V`` the inverse of ``attn.inverse`` (without
        SOFT-Norm's scaling); near zero when the Newton iteration has
        converged.
    """
    if attn.mode == 'exact':
        raise ValueError("inverse_residual needs a low-rank layer; mode='exact' "
                         'has no inverse.')
    attn.check(x, hw_shape)
    q = attn.query_heads(x)
    a2 = gaussian_kernel(*(attn.query_landmarks(q, hw_shape), ) * 2)
    inverse = bottleneck_inverse(a2, attn.inverse.replace(normalize=False),
                                 group=attn.num_heads)
    residual = newton_residual(regularised(a2, attn.inverse.reg), inverse)
    return residual.view(x.shape[0], attn.num_heads)
