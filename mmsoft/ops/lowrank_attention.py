"""SOFT attention on already projected queries and values (no parameters).

Shapes: queries ``q`` (B, N, d), landmarks ``k`` (B, m, d) and values ``v``
(B, N, dv), with batch and heads folded into ``B``; queries are scaled by
``d ** -0.25`` by the caller. Three evaluations of the same function:

- :func:`soft_lowrank_attention`: ``A1 @ (P @ (A1^T @ V))`` with
  ``A1 = k(Q, K~)`` (N x m) and ``P`` the inverse of ``A2 = k(K~, K~)``
  applied to the m x dv matrix ``A1^T @ V`` (:func:`~.bottleneck.bottleneck_apply`,
  which :class:`~.bottleneck.InverseCfg` configures);
  time ``O(N m d + T m^3)``, memory ``O(N m)``. Above ``chunk_size`` tokens it
  runs chunk by chunk under activation checkpointing, so no N x m matrix is
  ever held whole and the backward recomputes the chunks it needs.
- :func:`soft_reference_attention`: the same maths the plain way (distances
  through products with ones matrices, the N x m product ``A1 @ P`` first),
  kept as a baseline for tests and benchmarks.
- :func:`exact_gaussian_attention`: the full N x N kernel ``k(Q, Q) @ V``
  that the low-rank factorisation approximates.
"""
from typing import Iterator, List, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .bottleneck import (
    DEFAULT_INVERSE,
    InverseCfg,
    bottleneck_apply,
    bottleneck_inverse,
)
from .execution import compiling, exporting, tile_elements
from .gaussian_kernel import augmented_points, gaussian_kernel
from .thread_split import map_single_threaded, row_spans, split_workers


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
    of ``v``. Without autograd (unless exporting) the N x m kernel is never
    held whole either: it is computed tile by tile
    (:func:`~.execution.tile_elements` entries) into one reused buffer, once
    for ``A1^T @ V`` and again for ``A1 @ w``.

    Args:
        q (Tensor): Scaled queries (B, N, d).
        k (Tensor): Landmarks (B, m, d).
        v (Tensor): Values (B, N, dv).
        inverse (InverseCfg): The middle factor. Defaults to ``InverseCfg()``.
        chunk_size (int, optional): With autograd, when set and smaller than
            N, evaluate in chunks of this many queries with recomputation in
            the backward, so no N x m kernel is stored for the backward.
            Defaults to None (one piece).
        group (int): Consecutive batch entries that are the heads of one
            image (they share the back-off step). Defaults to 1.

    Returns:
        Tensor: (B, N, dv).
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f'chunk_size must be positive, got {chunk_size}.')
    out_dtype = v.dtype
    with torch.autocast(device_type=q.device.type, enabled=False):
        q, k, v = _at_least_float32(q, k, v)
        a2 = gaussian_kernel(k, k)

        def middle(u: Tensor) -> Tensor:
            return bottleneck_apply(a2, u, inverse, group)

        n = q.shape[-2]
        # Exported, the kernel is one piece: a loop over tiles would be
        # unrolled into the graph, tile by tile.
        if not exporting() and not (
                torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))):
            out = _tiled_lowrank(q, k, v, middle)
        elif chunk_size is None or exporting() or chunk_size >= n:
            a1 = gaussian_kernel(q, k)
            out = a1 @ middle(a1.transpose(-2, -1) @ v)
        else:
            starts = range(0, n, chunk_size)
            u = sum(_checkpointed(_project, q[:, s:s + chunk_size], k,
                                  v[:, s:s + chunk_size]) for s in starts)
            w = middle(u)
            out = torch.cat([_checkpointed(_expand, q[:, s:s + chunk_size], k, w)
                             for s in starts], dim=1)
    return out.to(out_dtype)


def _tiled_lowrank(q: Tensor, k: Tensor, v: Tensor, middle) -> Tensor:
    """``A1 @ middle(A1^T @ v)`` without autograd, one kernel tile at a time.

    A kernel larger than one tile is computed twice, tile by tile, by
    :func:`kernel_project` and :func:`kernel_expand`, which costs
    ``N m (d + 2)`` more multiply-adds but keeps each tile in cache; in eager
    mode a kernel that fits in one tile is computed once. Under
    ``torch.compile`` both run as the operators ``mmsoft::kernel_project``
    and ``mmsoft::kernel_expand``, so the compiled model keeps the tiles and
    the work split.
    """
    if not compiling() and _tile_rows(q, k) >= q.shape[-2]:
        kernel = gaussian_kernel(q, k)
        return torch.bmm(kernel, middle(torch.bmm(kernel.transpose(-2, -1), v)))
    if compiling():
        project = torch.ops.mmsoft.kernel_project
        expand = torch.ops.mmsoft.kernel_expand
    else:
        project, expand = kernel_project, kernel_expand
    return expand(q, k, middle(project(q, k, v)))


def _tile_rows(q: Tensor, k: Tensor) -> int:
    """Query rows per tile: :func:`~.execution.tile_elements` kernel entries
    over the batch."""
    return max(1, tile_elements() // max(1, q.shape[0] * k.shape[-2]))  # batch 0 too


LOG2E = 1.4426950408889634


def _tile_factors(q: Tensor, k: Tensor) -> Tuple[Tensor, Tensor]:
    """The augmented queries and, transposed and scaled by ``log2(e)``, the
    augmented landmarks: their product is the kernel's exponent in base 2, and
    ``exp2`` takes about half the time of ``exp`` on a CPU."""
    q_aug, k_aug = augmented_points(q, k)
    return q_aug, k_aug.transpose(-2, -1) * LOG2E


def _kernel_tiles(q_aug: Tensor, k_aug_t: Tensor, span: Tuple[int, int],
                  rows: int) -> Iterator[Tuple[int, int, Tensor]]:
    """``(start, stop, kernel rows)`` over ``span``, in one reused buffer,
    from the factors of :func:`_tile_factors`."""
    batch, m = q_aug.shape[0], k_aug_t.shape[-1]
    lo, hi = span
    buffer = q_aug.new_empty(batch * min(rows, hi - lo) * m)
    for start in range(lo, hi, rows):
        stop = min(start + rows, hi)
        kernel = buffer[:batch * (stop - start) * m].view(batch, stop - start, m)
        torch.bmm(q_aug[:, start:stop], k_aug_t, out=kernel)
        yield start, stop, kernel.clamp_max_(0).exp2_()


def _spans(q: Tensor, rows: int) -> List[Tuple[int, int]]:
    """One span of query rows per worker (at most one per tile)."""
    n = q.shape[-2]
    return row_spans(n, min(split_workers(q), -(-n // rows)))


def kernel_project(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``A1^T @ v`` with ``A1 = k(q, k)``, tile by tile, without autograd.

    On CPU the query rows are split into one span per intra-op thread and
    each span's tiles run on a single-threaded worker
    (:mod:`~mmsoft.ops.thread_split`), so the threads join once per call
    instead of after every operation on every tile.

    Args:
        q (Tensor): Queries (B, N, d).
        k (Tensor): Landmarks (B, m, d).
        v (Tensor): Values (B, N, dv).

    Returns:
        Tensor: (B, m, dv).
    """
    rows = _tile_rows(q, k)
    q_aug, k_aug_t = _tile_factors(q, k)

    def project(span: Tuple[int, int]) -> Tensor:
        u = q.new_zeros(q.shape[0], k.shape[-2], v.shape[-1])
        for start, stop, kernel in _kernel_tiles(q_aug, k_aug_t, span, rows):
            u.baddbmm_(kernel.transpose(-2, -1), v[:, start:stop])
        return u

    parts = map_single_threaded(project, _spans(q, rows))
    return sum(parts[1:], parts[0]) if parts else q.new_zeros(
        q.shape[0], k.shape[-2], v.shape[-1])


def kernel_expand(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
    """``A1 @ w`` with ``A1 = k(q, k)``, tile by tile, without autograd; split
    as :func:`kernel_project`.

    Args:
        q (Tensor): Queries (B, N, d).
        k (Tensor): Landmarks (B, m, d).
        w (Tensor): (B, m, dv).

    Returns:
        Tensor: (B, N, dv).
    """
    rows = _tile_rows(q, k)
    q_aug, k_aug_t = _tile_factors(q, k)
    out = q.new_empty(q.shape[0], q.shape[1], w.shape[-1])

    def expand(span: Tuple[int, int]) -> None:
        for start, stop, kernel in _kernel_tiles(q_aug, k_aug_t, span, rows):
            torch.bmm(kernel, w, out=out[:, start:stop])

    map_single_threaded(expand, _spans(q, rows))
    return out


@torch.library.custom_op('mmsoft::kernel_project', mutates_args=())
def _kernel_project_op(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return kernel_project(q, k, v)


@_kernel_project_op.register_fake
def _(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return q.new_empty(q.shape[0], k.shape[-2], v.shape[-1])


@torch.library.custom_op('mmsoft::kernel_expand', mutates_args=())
def _kernel_expand_op(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
    return kernel_expand(q, k, w)


@_kernel_expand_op.register_fake
def _(q: Tensor, k: Tensor, w: Tensor) -> Tensor:
    return q.new_empty(q.shape[0], q.shape[1], w.shape[-1])


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
    by the iteration loop whatever ``inverse.use_eig`` says. Same arguments
    (without ``chunk_size``) and result.
    """
    out_dtype = v.dtype
    if inverse.method == 'newton':
        inverse = inverse.replace(use_eig=False)
    with torch.autocast(device_type=q.device.type, enabled=False):
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
