"""Agent attention (Han et al., ECCV 2024).

Written from the paper, arXiv 2312.08874, Section 3. A small set of ``n``
agent tokens ``A``, pooled from the queries, first aggregates the values
from all keys and then broadcasts them back to every query, two softmax
attentions of cost ``O(N n d)`` each (Eq. 3):

    O = sigma(Q A^T) sigma(A K^T) V  =  Attn(Q, A, Attn(A, K, V))

with ``sigma`` the row softmax of ``d ** -0.5``-scaled products. The full
module (Eq. 4) adds agent biases inside both softmaxes and a depthwise
convolution of the values for feature diversity:

    O = sigma(Q A^T + B2) sigma(A K^T + B1) V + DWC(V)

The paper builds ``B1`` (n x N) and ``B2`` (N x n) from several learned
components; here each is one learned ``b x b`` map per head and agent,
resized bilinearly to the token grid, so it follows the input size.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model.weight_init import trunc_normal_
from torch import Tensor

from mmsoft.registry import register_model

from .peers import _QKVAttention


@register_model
class AgentAttention(_QKVAttention):
    """Agent attention with agent biases and a depthwise value convolution.

    Agents are the queries adaptively average-pooled to an ``s x s`` grid
    (``n = s^2``), per head. ``O = softmax(Q A^T / sqrt(d) + B2)
    softmax(A K^T / sqrt(d) + B1) V + DWC(V)`` (arXiv 2312.08874, Eq. 3-4).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        qkv_bias (bool): Bias in the projections. Defaults to True.
        agent_grid (int): Side s of the agent grid; ``n = s^2`` agents.
            Defaults to 7 (49 agents, the paper's usual number).
        bias_grid (int): Side b of the learned agent-bias maps.
            Defaults to 7.
        dwc_size (int): Kernel of the depthwise convolution (odd).
            Defaults to 3 (the paper's choice).
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models.attention.agent import AgentAttention
        >>> attn = AgentAttention(embed_dims=64, num_heads=2)
        >>> attn(torch.rand(2, 56 * 56, 64), (56, 56)).shape
        torch.Size([2, 3136, 64])
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 agent_grid: int = 7, bias_grid: int = 7, dwc_size: int = 3,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        for name, value in (('agent_grid', agent_grid), ('bias_grid', bias_grid)):
            if value < 1:
                raise ValueError(f'{name} must be >= 1, got {value}.')
        if dwc_size < 1 or dwc_size % 2 == 0:
            raise ValueError(
                f'dwc_size must be a positive odd number, got {dwc_size}.')
        self.agent_grid = agent_grid
        num_agents = agent_grid**2
        self.agent_bias = nn.Parameter(
            torch.zeros(num_heads, num_agents, bias_grid, bias_grid))   # B1
        self.query_bias = nn.Parameter(
            torch.zeros(num_heads, num_agents, bias_grid, bias_grid))   # B2^T
        trunc_normal_(self.agent_bias, std=.02)
        trunc_normal_(self.query_bias, std=.02)
        self.dwc = nn.Conv2d(embed_dims, embed_dims, dwc_size, padding=dwc_size // 2,
                             groups=embed_dims)

    def agents(self, q: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """Agent tokens: queries (B, h, N, d) pooled to (B, h, n, d)."""
        batch, heads, _, d = q.shape
        grid = q.transpose(-2, -1).reshape(batch * heads, d, *hw_shape)
        pooled = F.adaptive_avg_pool2d(grid, self.agent_grid)
        return pooled.flatten(2).transpose(1, 2).view(batch, heads, -1, d)

    @staticmethod
    def resized_bias(bias: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """A bias map (h, n, b, b) resized to the token grid: (h, n, N)."""
        resized = F.interpolate(bias, size=hw_shape, mode='bilinear',
                                align_corners=False)
        return resized.flatten(2)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        batch, num_tokens, _ = x.shape
        q, k, v = self.qkv(x)                                          # (B, h, N, d)
        scale = self.head_dims**-0.5
        agents = self.agents(q, hw_shape)                              # (B, h, n, d)
        b1 = self.resized_bias(self.agent_bias, hw_shape)              # (h, n, N)
        b2 = self.resized_bias(self.query_bias, hw_shape).transpose(-2, -1)
        aggregated = ((agents @ k.transpose(-2, -1)) * scale + b1).softmax(-1) @ v
        out = ((q @ agents.transpose(-2, -1)) * scale + b2).softmax(-1) @ aggregated
        v_map = v.transpose(-2, -1).reshape(batch, self.embed_dims, *hw_shape)
        dwc = self.dwc(v_map).view(batch, self.num_heads, self.head_dims, num_tokens)
        return self.merge(out + dwc.transpose(-2, -1))
