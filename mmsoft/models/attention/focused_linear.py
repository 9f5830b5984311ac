"""Focused linear attention (FLatten Transformer, Han et al., ICCV 2023).

Written from the paper, arXiv 2308.00442, Section 4. Linear attention
(Eq. 2) replaces ``softmax(Q K^T)`` by ``phi(Q) phi(K)^T`` and normalises each
row, so the product runs right to left in ``O(N d^2)``:

    O_i = phi(Q_i) (sum_j phi(K_j)^T V_j) / (phi(Q_i) sum_j phi(K_j)^T)

The focused mapping (Eq. 5-6) sharpens it without changing directions' norm:

    phi_p(x) = f_p(ReLU(x)),   f_p(x) = (||x|| / ||x ** p||) x ** p

with ``x ** p`` the element-wise power, and a depthwise convolution of the
values restores the rank the low-rank product lacks (Eq. 7):

    O = Sim(Q, K) V + DWC(V)
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmsoft.registry import register_model

from .peers import _QKVAttention

EPS = 1e-6
"""Smallest normaliser of a query row (a query with all-zero features)."""


def focused_map(x: Tensor, power: float) -> Tensor:
    """The focused mapping ``phi_p(x) = f_p(ReLU(x))`` of Eq. 5-6, over the last dim.

    Args:
        x (Tensor): Queries or keys, (..., d).
        power (float): Focusing factor p.

    Returns:
        Tensor: Non-negative features with the norm of ``ReLU(x)``, (..., d).
    """
    x = F.relu(x)
    powered = x.pow(power)
    # Zero only where ReLU(x) is zero; the clamp just avoids 0 / 0 there.
    powered_norm = powered.norm(dim=-1, keepdim=True).clamp_min(
        torch.finfo(x.dtype).tiny)
    return powered * (x.norm(dim=-1, keepdim=True) / powered_norm)


@register_model
class FocusedLinearAttention(_QKVAttention):
    """Focused linear attention with the rank-restoring depthwise convolution.

    ``O = phi_p(Q) phi_p(K)^T V / (phi_p(Q) phi_p(K)^T 1) + DWC(V)`` (FLatten,
    arXiv 2308.00442, Eq. 2, 5-7), per head, in ``O(N d^2)`` time and
    ``O(N d)`` memory. The DWC is a depthwise ``k x k`` convolution over the
    values' C channels laid out on the token grid.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        qkv_bias (bool): Bias in the projections. Defaults to True.
        focusing_factor (float): The power p of Eq. 5. Defaults to 3 (the
            paper's choice).
        dwc_size (int): Kernel of the depthwise convolution (odd). Defaults
            to 5 (the paper's choice).
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models.attention.focused_linear import FocusedLinearAttention
        >>> attn = FocusedLinearAttention(embed_dims=64, num_heads=2)
        >>> attn(torch.rand(2, 56 * 56, 64), (56, 56)).shape
        torch.Size([2, 3136, 64])
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 focusing_factor: float = 3., dwc_size: int = 5,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        if focusing_factor <= 0:
            raise ValueError(
                f'focusing_factor must be positive, got {focusing_factor}.')
        if dwc_size < 1 or dwc_size % 2 == 0:
            raise ValueError(
                f'dwc_size must be a positive odd number, got {dwc_size}.')
        self.focusing_factor = focusing_factor
        self.dwc = nn.Conv2d(embed_dims, embed_dims, dwc_size, padding=dwc_size // 2,
                             groups=embed_dims)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        batch, num_tokens, _ = x.shape
        q, k, v = self.qkv(x)                                         # (B, h, N, d)
        q = focused_map(q, self.focusing_factor)
        k = focused_map(k, self.focusing_factor)
        kv = k.transpose(-2, -1) @ v                                  # (B, h, d, d)
        normaliser = q @ k.sum(-2, keepdim=True).transpose(-2, -1)    # (B, h, N, 1)
        out = (q @ kv) / normaliser.clamp_min(EPS)  # 0 where phi(Q_i) = 0
        v_map = v.transpose(-2, -1).reshape(batch, self.embed_dims, *hw_shape)
        dwc = self.dwc(v_map).view(batch, self.num_heads, self.head_dims, num_tokens)
        return self.merge(out + dwc.transpose(-2, -1))

