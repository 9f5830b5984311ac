"""SOFT attention on already projected queries and values (no parameters).

Shapes: queries ``q`` (B, N, d), landmarks ``k`` (B, m, d) and values ``v``
(B, N, dv), with batch and heads folded into ``B``; queries are scaled by
``d ** -0.25`` by the caller. Three evaluations of the same function:

- :func:`soft_lowrank_attention`: ``A1 @ (P @ (A1^T @ V))`` with
  ``A1 = k(Q, K~)`` (N x m) and ``P`` the inverse of ``A2 = k(K~, K~)``
  applied to the m x dv matrix ``A1^T @ V`` (:func:`~.bottleneck.bottleneck_apply`,
  which :class:`~.bottleneck.InverseCfg` configures); time
  ``O(N m d + T m^3)``. The kernel products are those registered at
  :mod:`.dispatch` where they apply (the speed layer's: cache-sized tiles,
  split over workers, with a backward that recomputes each tile), else the
  plain products, chunk by chunk under activation checkpointing above
  ``chunk_size`` tokens with autograd.
- :func:`soft_reference_attention`: the same maths the plain way (distances
  through products with ones matrices, the N x m product ``A1 @ P`` first,
  the Newton loop), kept as a baseline for tests and benchmarks.
- :func:`exact_gaussian_attention`: the full N x N kernel ``k(Q, Q) @ V``
  that the low-rank factorisation approximates.
"""
import contextlib
from typing import Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .bottleneck import (
    DEFAULT_INVERSE,
    InverseCfg,
    bottleneck_apply,
    bottleneck_inverse,
)
from .dispatch import lowrank_products, use_newton_route
from .execution import exporting
from .gaussian_kernel import gaussian_kernel
from .regions import region


def _at_least_float32(*tensors: Tensor) -> tuple:
    """Half-precision tensors cast to float32; float32 and float64 unchanged."""
    dtype = torch.promote_types(tensors[0].dtype, torch.float32)
    return tuple(t.to(dtype) for t in tensors)


def _project(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``A1^T @ V`` for one chunk of queries: (B, m, dv)."""
    return gaussian_kernel(q, k).transpose(-2, -1) @ v


def _expand(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
    """``A1 @ w`` for one chunk of queries: (B, n, dv)."""
    return gaussian_kernel(q, k) @ w


def soft_lowrank_attention(q: Tensor, k: Tensor, v: Tensor,
                           inverse: InverseCfg = DEFAULT_INVERSE,
                           chunk_size: Optional[int] = None,
                           group: int = 1) -> Tensor:
    """SOFT attention ``A1 @ (P @ (A1^T @ V))``; the N x N kernel is never formed.

    The kernel and the inverse run in float32 (float64 stays float64) when
    the inputs are half precision or autocast is on; the result has the dtype
    of ``v``. The products with the N x m kernel are those of the registered
    :class:`~.dispatch.LowrankProducts` where they apply (the speed layer
    never holds the kernel whole: it computes it tile by tile, again in the
    backward), else the plain formula (exported: one piece).

    Args:
        q (Tensor): Scaled queries (B, N, d).
        k (Tensor): Landmarks (B, m, d).
        v (Tensor): Values (B, N, dv).
        inverse (InverseCfg): The middle factor. Defaults to ``InverseCfg()``.
        chunk_size (int, optional): Where the plain products run with
            autograd (under ``torch.compile``), when set and smaller than N,
            evaluate in chunks of this many queries with recomputation in
            the backward. Defaults to None (one piece).
        group (int): Consecutive batch entries that are the heads of one
            image (they share the back-off step). Defaults to 1.

    Returns:
        Tensor: (B, N, dv).
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f'chunk_size must be positive, got {chunk_size}.')
    out_dtype = v.dtype
    fast = lowrank_products()
    context = fast.caller_context(q) if fast else contextlib.nullcontext()
    with torch.autocast(device_type=q.device.type, enabled=False), context, \
            region('kernel'):
        q, k, v = _at_least_float32(q, k, v)
        a2 = fast.landmark_kernel(k) if fast else None
        if a2 is None:
            a2 = gaussian_kernel(k, k)

        def middle(a2: Tensor, u: Tensor) -> Tensor:
            return bottleneck_apply(a2, u, inverse, group)

        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v))
        out = fast.lowrank(q, k, v, a2, middle, needs_grad) if fast else None
        if out is None:
            out = _plain_lowrank(q, k, v, lambda u: middle(a2, u), chunk_size)
    return out.to(out_dtype)


def _plain_lowrank(q: Tensor, k: Tensor, v: Tensor, middle,
                   chunk_size: Optional[int]) -> Tensor:
    """``A1 @ middle(A1^T @ v)`` by plain products, in chunks of ``chunk_size``
    queries (recomputed in the backward) unless exporting."""
    n = q.shape[-2]
    if chunk_size is None or exporting() or chunk_size >= n:
        a1 = gaussian_kernel(q, k)
        return a1 @ middle(a1.transpose(-2, -1) @ v)
    starts = range(0, n, chunk_size)
    u = sum(_checkpointed(_project, q[:, s:s + chunk_size], k, v[:, s:s + chunk_size])
            for s in starts)
    w = middle(u)
    return torch.cat([_checkpointed(_expand, q[:, s:s + chunk_size], k, w)
                      for s in starts], dim=1)


def _checkpointed(fn, *args: Tensor) -> Tensor:
    """Run ``fn`` storing only its inputs when any of them needs a gradient."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in args):
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def _kernel_with_ones(x: Tensor, y: Tensor) -> Tensor:
    """Gaussian kernel with squared norms spread by ones-matrix products."""
    dim = x.shape[-1]
    x_sq = (x * x) @ x.new_ones(dim, y.shape[-2])
    y_sq = x.new_ones(x.shape[-2], dim) @ (y * y).transpose(-2, -1)
    dist = x_sq + y_sq - 2 * (x @ y.transpose(-2, -1))
    return torch.exp(-0.5 * dist.clamp_min(0))


def soft_reference_attention(q: Tensor, k: Tensor, v: Tensor,
                             inverse: InverseCfg = DEFAULT_INVERSE,
                             group: int = 1) -> Tensor:
    """The plain evaluation of :func:`soft_lowrank_attention`, for comparison.

    Squared distances are formed with products against ones matrices and the
    factors are multiplied left to right, ``(A1 @ P) @ (A1^T @ V)``, as a
    direct transcription of the formula does; a Newton inverse is evaluated
    by the reference loop (route ``'loop'``, whatever the route setting
    outside says). Same arguments (without ``chunk_size``) and result.
    """
    out_dtype = v.dtype
    with torch.autocast(device_type=q.device.type, enabled=False), \
            use_newton_route('loop'):
        q, k, v = _at_least_float32(q, k, v)
        p = bottleneck_inverse(_kernel_with_ones(k, k), inverse, group)
        a1 = _kernel_with_ones(q, k)
        out = (a1 @ p) @ (a1.transpose(-2, -1) @ v)
    return out.to(out_dtype)


def exact_gaussian_attention(q: Tensor, v: Tensor) -> Tensor:
    """The full kernel attention ``k(Q, Q) @ V`` (N x N memory), at least float32.

    Args:
        q (Tensor): Scaled queries (B, N, d).
        v (Tensor): Values (B, N, dv).

    Returns:
        Tensor: (B, N, dv).
    """
    out_dtype = v.dtype
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, v = _at_least_float32(q, v)
        out = gaussian_kernel(q, q) @ v
    return out.to(out_dtype)
