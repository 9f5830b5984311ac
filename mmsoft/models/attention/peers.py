"""Other efficient attentions that plug into the SOFT backbone in SOFT's place.

The paper's Table 1 setting: the SOFT-Tiny architecture with its stage 1-3
token mixer swapped. Each module follows the token-mixer contract of
:mod:`.token_mixer` (built with ``embed_dims`` and ``num_heads``, declaring
the backbone hints it uses, called as ``attn(x, hw_shape)``); use one with
``SOFT(attn_cfg=dict(type='SoftmaxAttention2d'))``. All have q, k, v and
output projections (SOFT has no key projection, so they hold ``C^2 + C``
more parameters per layer); none takes ``conv_size`` (SOFT's value
convolution is part of SOFT), and only the two that pool take ``sr_ratio``.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmsoft.registry import register_model

from .token_mixer import TokenMixer


class _QKVAttention(TokenMixer):
    """Shared projections and head reshaping of the peers."""

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, init_cfg=init_cfg)
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)

    def split(self, x: Tensor) -> Tensor:
        """(B, N, C) to (B, h, N, d)."""
        batch, num_tokens, _ = x.shape
        return x.view(batch, num_tokens, self.num_heads, -1).transpose(1, 2)

    def merge(self, x: Tensor) -> Tensor:
        """(B, h, N, d) to the projected (B, N, C)."""
        batch, _, num_tokens, _ = x.shape
        return self.proj(x.transpose(1, 2).reshape(batch, num_tokens, -1))

    def qkv(self, x: Tensor, kv_source: Optional[Tensor] = None
            ) -> Tuple[Tensor, Tensor, Tensor]:
        k, v = self.kv(x if kv_source is None else kv_source).chunk(2, dim=-1)
        return self.split(self.q(x)), self.split(k), self.split(v)


@register_model
class SoftmaxAttention2d(_QKVAttention):
    """Full softmax attention, O(N^2) (the "Transformer" row of Table 1).

    Also the attention of the class-token stage (:meth:`attend` takes tokens
    without a grid).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        qkv_bias (bool): Bias in the projections. Defaults to True.
        use_sdpa (bool): Use ``F.scaled_dot_product_attention`` (fused kernels)
            instead of the plain softmax of ``Q K^T``. Defaults to True.
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models import SOFT
        >>> from mmsoft.models.attention.peers import SoftmaxAttention2d
        >>> attn = SoftmaxAttention2d(embed_dims=64, num_heads=2)
        >>> attn(torch.rand(2, 14 * 14, 64), (14, 14)).shape
        torch.Size([2, 196, 64])
        >>> # Any peer replaces SOFT attention in the backbone from a config:
        >>> model = SOFT(arch='tiny', attn_cfg=dict(type='SoftmaxAttention2d'))
        >>> model(torch.rand(1, 3, 64, 64))[0].shape
        torch.Size([1, 512])
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 use_sdpa: bool = True, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        self.use_sdpa = use_sdpa

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        return self.attend(x)

    def attend(self, x: Tensor) -> Tensor:
        """Softmax attention over any tokens (B, N, C), a class token included."""
        q, k, v = self.qkv(x)
        if self.use_sdpa:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.head_dims**-0.5
            out = attn.softmax(-1) @ v
        return self.merge(out)


@register_model
class SpatialReductionAttention(_QKVAttention):
    """Softmax attention over keys and values pooled by a strided convolution.

    PVT's spatial-reduction attention (Linformer's projection in 2-D): an
    ``r x r`` stride-``r`` convolution and LayerNorm shrink the key/value
    tokens to ``N / r^2``; cost O(N^2 / r^2).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        sr_ratio (int): Reduction ratio r. Defaults to 1 (no reduction).
        qkv_bias (bool): Bias in the projections. Defaults to True.
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models.attention.peers import SpatialReductionAttention
        >>> attn = SpatialReductionAttention(embed_dims=64, num_heads=2, sr_ratio=8)
        >>> attn(torch.rand(2, 56 * 56, 64), (56, 56)).shape
        torch.Size([2, 3136, 64])
    """

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 1,
                 qkv_bias: bool = True, init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = nn.LayerNorm(embed_dims)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        source = x
        if self.sr_ratio > 1 and min(hw_shape) >= self.sr_ratio:
            grid = x.transpose(1, 2).reshape(x.shape[0], -1, *hw_shape)
            source = self.norm(self.sr(grid).flatten(2).transpose(1, 2))
        q, k, v = self.qkv(x, source)
        return self.merge(F.scaled_dot_product_attention(q, k, v))


@register_model
class PerformerAttention(_QKVAttention):
    """Performer (FAVOR+): softmax kernel by positive orthogonal random features.

    ``exp(q.k / sqrt(d))`` is estimated with ``num_features`` positive random
    features, giving O(N m d) attention. The features are fixed until
    :meth:`redraw_features` is called.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        qkv_bias (bool): Bias in the projections. Defaults to True.
        num_features (int, optional): Random features per head; defaults to
            ``d * log(d)`` rounded up.
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models.attention.peers import PerformerAttention
        >>> attn = PerformerAttention(embed_dims=64, num_heads=2)
        >>> attn(torch.rand(2, 56 * 56, 64), (56, 56)).shape
        torch.Size([2, 3136, 64])
    """

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 num_features: Optional[int] = None,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        d = self.head_dims
        self.num_features = num_features or math.ceil(d * math.log(max(d, 2)))
        self.register_buffer('features', self._draw(), persistent=True)

    def _draw(self) -> Tensor:
        """Blocks of orthogonal Gaussian rows with chi-distributed norms."""
        d, m = self.head_dims, self.num_features
        blocks = []
        for _ in range(math.ceil(m / d)):
            q, _ = torch.linalg.qr(torch.randn(d, d))
            blocks.append(q.t())
        rows = torch.cat(blocks)[:m]
        return rows * torch.randn(m, d).norm(dim=1, keepdim=True)

    def redraw_features(self) -> None:
        """Draw new random features."""
        self.features.copy_(self._draw().to(self.features))

    def _feature_map(self, x: Tensor, is_query: bool) -> Tensor:
        x = x * self.head_dims**-0.25
        proj = x @ self.features.t()                                # (B, h, N, m)
        sq = x.pow(2).sum(-1, keepdim=True) / 2
        # Subtract a max for stability; it cancels in the normalisation.
        shift = proj.amax(-1, keepdim=True) if is_query else proj.amax(
            dim=(-2, -1), keepdim=True)
        return torch.exp(proj - sq - shift.detach()) / math.sqrt(self.num_features)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        q, k, v = self.qkv(x)
        q_prime = self._feature_map(q, True)
        k_prime = self._feature_map(k, False)
        kv = k_prime.transpose(-2, -1) @ v                          # (B, h, m, d)
        normaliser = q_prime @ k_prime.sum(-2, keepdim=True).transpose(-2, -1)
        return self.merge((q_prime @ kv) / normaliser.clamp_min(1e-6))


@register_model
class NystromAttention(_QKVAttention):
    """Nystromformer with 2-D average-pooled landmarks.

    Softmax attention approximated as ``softmax(Q K~^T) pinv(softmax(Q~ K~^T))
    softmax(Q~ K^T) V`` with landmarks ``Q~``, ``K~`` pooled over ``r x r``
    windows of the token grid; the pseudo-inverse by the Nystromformer
    iteration, initialised with ``A^T / (max column sum * max row sum)``.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        sr_ratio (int): Pooling window r. Defaults to 1.
        qkv_bias (bool): Bias in the projections. Defaults to True.
        num_iters (int): Pseudo-inverse iterations. Defaults to 6.
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models.attention.peers import NystromAttention
        >>> attn = NystromAttention(embed_dims=64, num_heads=2, sr_ratio=8)
        >>> attn(torch.rand(2, 56 * 56, 64), (56, 56)).shape
        torch.Size([2, 3136, 64])
    """

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 1,
                 qkv_bias: bool = True, num_iters: int = 6,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, qkv_bias, init_cfg)
        self.sr_ratio = sr_ratio
        self.num_iters = num_iters

    def _pool(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        batch, heads, _, d = x.shape
        grid = x.transpose(-2, -1).reshape(batch * heads, d, *hw_shape)
        r = min(self.sr_ratio, *hw_shape)
        pooled = F.avg_pool2d(grid, r, r)
        return pooled.flatten(2).transpose(1, 2).view(batch, heads, -1, d)

    @staticmethod
    def pinv(a: Tensor, num_iters: int) -> Tensor:
        """The Nystromformer iteration for the pseudo-inverse of ``a``."""
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        scale = a.abs().sum(-2).amax(-1) * a.abs().sum(-1).amax(-1)
        z = a.transpose(-2, -1) / scale[..., None, None]
        for _ in range(num_iters):
            az = a @ z
            z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
        return z

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        self.check(x, hw_shape)
        q, k, v = self.qkv(x)
        q = q * self.head_dims**-0.5
        q_land, k_land = self._pool(q, hw_shape), self._pool(k, hw_shape)
        kernel1 = (q @ k_land.transpose(-2, -1)).softmax(-1)
        kernel2 = (q_land @ k_land.transpose(-2, -1)).softmax(-1)
        kernel3 = (q_land @ k.transpose(-2, -1)).softmax(-1)
        out = kernel1 @ (self.pinv(kernel2, self.num_iters) @ (kernel3 @ v))
        return self.merge(out)

