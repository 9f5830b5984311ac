"""SOFT attention module: projections, landmarks and the value convolution."""
import dataclasses
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from mmsoft.ops import (
    NEWTON_VARIANTS,
    InverseCfg,
    InverseSlot,
    exact_gaussian_attention,
    exporting,
    in_graph,
    soft_lowrank_attention,
    soft_reference_attention,
)
from mmsoft.registry import register_model

from ..utils.token_maps import tokens_as_map
from .token_mixer import TokenMixer

LANDMARKS = ('conv', 'avgpool')
MODES = ('lowrank', 'exact')
IMPLS = ('fast', 'reference')
AUTO_CHUNK_ELEMENTS = 1 << 26  # chunk when one N x m kernel exceeds 256 MiB fp32
# ... in chunks of 16 MiB: at 1024 px on a 2-core CPU forward+backward took
# 3.6 s and 397 MiB with 4096-token chunks against 7.2 s and 1306 MiB with
# two chunks of 2^26 elements.
CHUNK_ELEMENTS = 1 << 22


def capped_grid(height: int, width: int, max_landmarks: int) -> Tuple[int, int]:
    """The largest grid of at most ``max_landmarks`` cells with ``height:width``.

    Args:
        height (int): Rows of the landmark grid before the cap.
        width (int): Columns of the landmark grid before the cap.
        max_landmarks (int): The cap.

    Returns:
        tuple[int, int]: Rows and columns, each at least 1 and at most the
        original.
    """
    if height * width <= max_landmarks:
        return height, width
    scale = math.sqrt(max_landmarks / (height * width))
    rows = max(1, min(height, int(height * scale)))
    cols = max(1, min(width, max_landmarks // rows))
    return rows, cols


@register_model
class SOFTAttention(TokenMixer):
    """Softmax-free attention (SOFT) with linear complexity.

    Queries double as keys (the Gaussian kernel is then symmetric positive
    semi-definite) and are scaled by ``d ** -0.25``. ``m`` landmark tokens come
    from a strided ``r x r`` convolution of each head's query map (shared by
    all heads) followed by LayerNorm and GELU. The kernel attention is the
    low-rank product ``A1 pinv(A2) A1^T V`` with ``A1 = k(Q, Q~)`` (N x m),
    ``A2 = k(Q~, Q~)`` (m x m) and ``pinv`` by 20 Newton-Raphson steps. A
    depthwise ``k x k`` convolution of the values, one filter per head, is
    added before the output projection.

    The arguments fall in three groups. The model (they change the
    function): ``sr_ratio``, ``conv_size``, ``qkv_bias``, ``normalize``,
    ``landmark``, ``max_landmarks``, ``inverse`` and ``mode``. The
    implementation (same function): ``impl`` and ``chunk_size``.
    Diagnostics (attention rows, inverse residuals) live in
    :mod:`mmsoft.models.attention.diagnostics`.

    Args:
        embed_dims (int): Channels C of the tokens.
        num_heads (int): Number of heads h; C must be divisible by h.
        sr_ratio (int): Landmark sampling ratio r (kernel and stride of the
            landmark convolution or pooling). Defaults to 1.
        conv_size (int): Kernel size k of the value convolution (odd).
            Defaults to 3.
        qkv_bias (bool): Bias in the query and value projections.
            Defaults to True.
        normalize (bool): SOFT-Norm: use ``D^-1/2 pinv(A2) D^-1/2`` with
            ``D = diag(A2 1)``. Defaults to False.
        landmark (str): ``'conv'`` (convolution + LayerNorm + GELU, as
            released) or ``'avgpool'`` (parameter-free average pooling).
            Defaults to ``'conv'``.
        max_landmarks (int, optional): Cap on the number of landmarks. The
            landmark grid is average-pooled down to at most this many cells
            (aspect ratio kept), so the cost stays linear in N at large
            inputs. Defaults to None (no cap, as released).
        inverse (dict | InverseCfg | InverseSlot, optional): How
            ``pinv(A2)`` is computed: the fields of
            :class:`mmsoft.ops.InverseCfg` (``method``, ``num_iters``,
            ``reg``, ``backoff``) or ``variant='ridge'``/
            ``'backoff'``; ``normalize`` is set above. A SOFT backbone passes
            the :class:`mmsoft.ops.InverseSlot` all its layers share (its
            ``normalize`` must agree). Defaults to None: ``InverseCfg()``,
            20 Newton steps on ``A2 + 0.01 I``.
        mode (str): ``'lowrank'`` or ``'exact'`` (the full N x N kernel the
            low-rank product approximates; quadratic memory, for tests and
            small inputs). ``'exact'`` uses no landmarks and no inverse, so
            ``max_landmarks``, ``inverse``, ``normalize``, ``impl`` and
            ``chunk_size`` are errors with it; ``landmark`` still decides
            the parameters, so the weights load either way.
            Defaults to ``'lowrank'``.
        impl (str): ``'fast'`` or ``'reference'`` (the plain evaluation of
            the kernel attention and the value convolution, for comparisons;
            same parameters and function, never chunked). Defaults to
            ``'fast'``.
        chunk_size (int | str | None): Fast path under ``torch.compile``
            with autograd: evaluate the low-rank product in chunks of this
            many tokens, recomputing them in the backward instead of storing
            the N x m kernel (in eager mode the product always runs in
            cache-sized tiles, forward and backward). ``'auto'`` chunks only
            when one N x m kernel per batch would exceed 2^26 elements, then
            in chunks of 2^22 elements; None never chunks. Defaults to
            ``'auto'``.
        init_cfg (dict, optional): Initialisation config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models import SOFTAttention
        >>> attn = SOFTAttention(embed_dims=64, num_heads=2, sr_ratio=8,
        ...                      conv_size=9)
        >>> x = torch.rand(2, 56 * 56, 64)
        >>> attn(x, (56, 56)).shape
        torch.Size([2, 3136, 64])
        >>> released = SOFTAttention(64, 2, inverse=dict(variant='backoff'))
        >>> released.inverse.backoff, released.inverse.reg
        (True, 0.0)
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 sr_ratio: int = 1,
                 conv_size: int = 3,
                 qkv_bias: bool = True,
                 normalize: bool = False,
                 landmark: str = 'conv',
                 max_landmarks: Optional[int] = None,
                 inverse: Union[dict, InverseCfg, None] = None,
                 mode: str = 'lowrank',
                 impl: str = 'fast',
                 chunk_size: Union[int, str, None] = 'auto',
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(embed_dims, num_heads, init_cfg=init_cfg)
        for name, value, choices in (('landmark', landmark, LANDMARKS),
                                     ('mode', mode, MODES),
                                     ('impl', impl, IMPLS)):
            if value not in choices:
                raise ValueError(f'Unknown {name} {value!r}; use one of {choices}.')
        if sr_ratio < 1 or conv_size < 1 or conv_size % 2 == 0:
            raise ValueError(f'sr_ratio must be >= 1 and conv_size odd, got '
                             f'{sr_ratio} and {conv_size}.')
        if max_landmarks is not None and max_landmarks < 1:
            raise ValueError(
                f'max_landmarks must be >= 1 or None, got {max_landmarks}.')
        if not (chunk_size in (None, 'auto') or
                (isinstance(chunk_size, int) and chunk_size > 0)):
            raise ValueError(f"chunk_size must be a positive int, 'auto' or None, "
                             f'got {chunk_size!r}.')
        if impl == 'reference' and chunk_size not in (None, 'auto'):
            raise ValueError(f"impl='reference' never chunks; drop chunk_size="
                             f'{chunk_size!r} or use the fast path.')
        if mode == 'exact':
            unused = [name for name, value, default in (
                ('max_landmarks', max_landmarks, None), ('inverse', inverse, None),
                ('normalize', normalize, False), ('impl', impl, 'fast'),
                ('chunk_size', chunk_size, 'auto')) if value != default]
            if unused:
                raise ValueError(f"mode='exact' is the full N x N kernel without "
                                 f'landmarks or inverse; it does not use {unused}. '
                                 'Remove them or use the default low-rank mode.')
        if not isinstance(inverse, (dict, InverseCfg, InverseSlot, type(None))):
            fields = [f.name for f in dataclasses.fields(InverseCfg)
                      if f.name != 'normalize'] + ['variant']
            raise TypeError(
                f'inverse must be a dict of InverseCfg fields {fields} (variant: '
                f'one of {list(NEWTON_VARIANTS)}), an InverseCfg or None; got '
                f'{inverse!r}. For example '
                "inverse=dict(variant='backoff') for the released checkpoints' "
                "Newton inverse, or inverse=dict(method='solve'); on the SOFT "
                "backbone, newton='ridge' or 'backoff' chooses the variant.")
        if isinstance(inverse, dict) and 'normalize' in inverse:
            raise ValueError('Set normalize on SOFTAttention (normalize=True), not '
                             'in its inverse settings.')
        self.sr_ratio = sr_ratio
        self.landmark = landmark
        self.max_landmarks = max_landmarks
        if not isinstance(inverse, InverseSlot):
            inverse = InverseSlot(InverseCfg.build(inverse, normalize=normalize))
        elif inverse.cfg.normalize != normalize:
            raise ValueError(f'normalize={normalize} disagrees with the shared '
                             f'inverse {inverse.cfg}.')
        self.inverse_slot = inverse
        self.mode = mode
        self.chunk_size = chunk_size
        self.impl = impl

        d = self.head_dims
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        if landmark == 'conv':
            self.landmark_conv = nn.Conv2d(d, d, sr_ratio, stride=sr_ratio,
                                           bias=False)
            self.landmark_norm = nn.LayerNorm(d, eps=1e-5)
        self.v_conv = nn.Conv2d(num_heads, num_heads, conv_size,
                                padding=conv_size // 2, groups=num_heads,
                                bias=False)
        self.proj = nn.Linear(embed_dims, embed_dims)

    @property
    def normalize(self) -> bool:
        """Whether this is SOFT-Norm's attention."""
        return self.inverse.normalize

    def extra_repr(self) -> str:
        return (f'sr_ratio={self.sr_ratio}, landmark={self.landmark!r}, '
                f'mode={self.mode!r}, max_landmarks={self.max_landmarks}, '
                f'inverse={self.inverse}')

    def landmark_grid(self, height: int, width: int) -> Optional[Tuple[int, int]]:
        """The landmark grid ``(rows, cols)`` for a token grid of that size, as
        :meth:`landmarks` makes it (None in ``'exact'`` mode).

        Args:
            height (int): Token grid rows H.
            width (int): Token grid columns W.

        Returns:
            tuple[int, int] | None: ``floor(H / r) x floor(W / r)``, one
            landmark for a map smaller than ``r`` on a side, capped by
            ``max_landmarks``.
        """
        if self.mode == 'exact':
            return None
        r = self.sr_ratio
        grid = (1, 1) if height < r or width < r else (height // r, width // r)
        if self.max_landmarks is not None:
            grid = capped_grid(*grid, self.max_landmarks)
        return grid

    def landmarks(self, q_map: Tensor, groups: int = 1) -> Tensor:
        """Landmark tokens from query maps.

        The landmark grid is ``floor(H / r) x floor(W / r)``. A map smaller
        than ``r`` on either side has no full ``r x r`` window, so the whole
        map is pooled into a single landmark: ``'avgpool'`` takes its mean and
        ``'conv'`` applies the convolution to the map adaptively average-pooled
        to ``r x r``. Runs in the dtype of ``q_map`` (float32 or float64) under
        autocast.

        Args:
            q_map (Tensor): Scaled queries as maps, (B * h, d, H, W); or, with
                ``groups``, (B, groups * d, H, W) maps whose channels are the
                heads' one after the other (the convolution then runs once
                per head, as a grouped convolution).
            groups (int): Heads per map. Defaults to 1.

        Returns:
            Tensor: Landmarks (B * h, m, d).
        """
        r = self.sr_ratio
        height, width = q_map.shape[-2:]
        too_small = height < r or width < r
        with torch.autocast(device_type=q_map.device.type, enabled=False):
            if self.landmark == 'conv':
                if too_small:
                    q_map = F.adaptive_avg_pool2d(q_map, (r, r))
                weight = self.landmark_conv.weight.to(q_map.dtype).repeat(
                    groups, 1, 1, 1)
                grid = F.conv2d(q_map, weight, stride=r, groups=groups)
            elif too_small:
                grid = F.adaptive_avg_pool2d(q_map, 1)
            else:
                grid = F.avg_pool2d(q_map, r, r)
            if self.max_landmarks is not None:
                grid = F.adaptive_avg_pool2d(
                    grid, capped_grid(*grid.shape[-2:], self.max_landmarks))
            tokens = grid.flatten(2).transpose(1, 2)
            if groups > 1:  # (B, m, groups * d) to (B * groups, m, d)
                batch, num = tokens.shape[:2]
                tokens = tokens.reshape(batch, num, groups, self.head_dims)
                tokens = tokens.transpose(1, 2).reshape(batch * groups, num,
                                                        self.head_dims)
            if self.landmark == 'conv':
                norm = self.landmark_norm
                tokens = F.gelu(F.layer_norm(
                    tokens, norm.normalized_shape, norm.weight.to(tokens.dtype),
                    norm.bias.to(tokens.dtype), norm.eps))
        return tokens

    @property
    def inverse(self) -> InverseCfg:
        """The inverse in force (from :attr:`inverse_slot`, which a SOFT
        backbone shares between its layers)."""
        return self.inverse_slot.cfg

    def queries(self, x: Tensor, scale: float = 1.0) -> Tensor:
        """Query projection in at least float32, even under autocast.

        The Gaussian kernel is sensitive to small changes of the queries, so
        the whole query path (projection, landmarks, kernel, inverse) runs in
        float32: under bfloat16 autocast this keeps outputs and gradients
        within 1e-2 relative of float32, which half-precision queries do not.

        Args:
            x (Tensor): Tokens (B, N, C).
            scale (float): Multiplies the queries, applied to the projection's
                weight and bias (no pass over the queries). Defaults to 1.

        Returns:
            Tensor: Queries (B, N, C), float32 or float64.
        """
        dtype = torch.promote_types(x.dtype, torch.float32)
        weight, bias = self.q.weight.to(dtype), self.q.bias
        bias = None if bias is None else bias.to(dtype)
        if scale != 1.0:
            weight = weight * scale
            bias = None if bias is None else bias * scale
        with torch.autocast(device_type=x.device.type, enabled=False):
            return F.linear(x.to(dtype), weight, bias)

    def query_heads(self, x: Tensor) -> Tensor:
        """Scaled queries with batch and heads folded, (B * h, N, d).

        Args:
            x (Tensor): Tokens (B, N, C).

        Returns:
            Tensor: ``q * d ** -0.25`` per head, float32 or float64; for one
            image a view of the projection's output (no copy).
        """
        batch, num_tokens, _ = x.shape
        h, d = self.num_heads, self.head_dims
        q = self.queries(x, d**-0.25).reshape(batch, num_tokens, h, d).transpose(1, 2)
        return q.reshape(batch * h, num_tokens, d)

    def query_landmarks(self, q: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """Landmarks (B * h, m, d) of folded queries ``q`` (B * h, N, d).

        The fast path in eager mode takes the heads' maps as one
        channels-last map of all channels (for one image a view of the
        projection's output) through :meth:`landmarks` with ``groups`` the
        heads; the reference path, and graphs (whose backward replays the
        views on gradients laid out otherwise), as a batch of per-head maps,
        which copies them.
        """
        h, d = self.num_heads, self.head_dims
        if self.impl == 'reference' or in_graph():
            return self.landmarks(q.transpose(1, 2).reshape(q.shape[0], d, *hw_shape))
        batch, num_tokens = q.shape[0] // h, q.shape[1]
        tokens = q.reshape(batch, h, num_tokens, d).transpose(1, 2).reshape(
            batch, num_tokens, h * d)
        return self.landmarks(tokens_as_map(tokens, hw_shape), groups=h)

    def resolve_chunk_size(self, batch: int, num_tokens: int,
                           num_landmarks: int) -> Optional[int]:
        """The chunk size in tokens for this call, or None for one piece."""
        if exporting():  # one piece: no size-dependent choice in the graph
            return None
        if self.chunk_size != 'auto':
            return self.chunk_size
        per_token = max(1, batch * num_landmarks)
        if num_tokens * per_token <= AUTO_CHUNK_ELEMENTS:
            return None
        return max(1, CHUNK_ELEMENTS // per_token)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """Attend over tokens ``x`` (B, N, C) laid out on ``hw_shape`` (H, W).

        Returns:
            Tensor: (B, N, C).
        """
        self.check(x, hw_shape)
        batch, num_tokens, _ = x.shape
        h, d = self.num_heads, self.head_dims
        q = self.query_heads(x)  # (B * h, N, d): batch and heads folded
        v = self.v(x)  # (B, N, C), channel c = head * d + j
        v_heads = v.view(batch, num_tokens, h, d).transpose(1, 2).reshape(
            batch * h, num_tokens, d)

        if self.mode == 'exact':
            out = exact_gaussian_attention(q, v_heads)
        else:
            landmarks = self.query_landmarks(q, hw_shape)
            if self.impl == 'reference':
                out = soft_reference_attention(q, landmarks, v_heads, self.inverse,
                                               group=h)
            else:
                chunk = self.resolve_chunk_size(batch * h, num_tokens,
                                                landmarks.shape[1])
                out = soft_lowrank_attention(q, landmarks, v_heads, self.inverse,
                                             chunk_size=chunk, group=h)

        out = out.view(batch, h, num_tokens, d).transpose(1, 2).reshape(
            batch, num_tokens, self.embed_dims)
        return self.proj(out + self.value_conv(v, hw_shape))

    def value_conv(self, v: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        """The value convolution: one ``k x k`` filter per head, on each of its
        ``d`` channels.

        The fast path runs it depthwise over all C channels of V viewed
        channels-last (no copy); the reference path as the formula reads,
        a grouped convolution over V laid out as (B * d, h, H, W), which
        copies V twice and is several times slower on CPU.

        Args:
            v (Tensor): Values (B, N, C), channel ``head * d + j``.
            hw_shape (tuple[int, int]): Their grid (H, W).

        Returns:
            Tensor: (B, N, C).
        """
        batch, num_tokens, _ = v.shape
        h, d = self.num_heads, self.head_dims
        if self.impl == 'reference':
            v_map = v.view(batch, num_tokens, h, d).permute(0, 3, 2, 1).reshape(
                batch * d, h, *hw_shape)
            out = self.v_conv(v_map).view(batch, d, h, num_tokens)
            return out.permute(0, 3, 2, 1).reshape(batch, num_tokens, self.embed_dims)
        weight = self.v_conv.weight.repeat_interleave(d, dim=0)
        out = F.conv2d(tokens_as_map(v, hw_shape), weight, padding=self.v_conv.padding,
                       groups=self.embed_dims)
        return out.flatten(2).transpose(1, 2)
