"""The two products with the ``N x m`` kernel ``A1 = k(q, k)``, in tiles.

SOFT's attention multiplies by the query-landmark kernel twice,
``u = A1^T v`` (:func:`kernel_project`) and ``out = A1 w``
(:func:`kernel_expand`), and never needs ``A1`` whole: each is evaluated a
tile of query rows at a time (:func:`tile_elements` kernel entries, sized to
stay in cache), each tile's kernel computed from one matrix product of
augmented points and an ``exp2``. On CPU the query rows are split into one
span per intra-op thread and each span's tiles run on a single-threaded
worker (:mod:`.threads`), so the threads join once per call instead of
after every operation on every tile.

With autograd, :func:`lowrank` runs both products and the middle factor
between them with one backward that recomputes each tile instead of storing
the kernel: the gradients of the queries, landmarks and values come from
the tile's kernel ``K`` and the incoming gradients, in cache, never as an
``N x m`` tensor. Under ``torch.compile`` the forward products run as the
operators ``mmsoft::kernel_project`` and ``mmsoft::kernel_expand``.

The landmarks' own ``m x m`` kernel ``A2`` (:func:`landmark_kernel`) is
split the same way, a part of the heads per worker.

:data:`PRODUCTS` is what the low-rank attention gets from
:func:`mmsoft.ops.dispatch.lowrank_products`.
"""
import contextlib
import functools
import os
from typing import Callable, ContextManager, Iterator, List, Optional, Tuple

import torch
from torch import Tensor
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from .. import execution
from ..execution import compiling, eager_cpu, exporting
from ..gaussian_kernel import augmented_points, gaussian_kernel
from .threads import caller_on_one_thread, map_single_threaded, row_spans, split_workers

L2_TILES = 4
"""A kernel tile holds this many times the per-core L2 cache, in float32.
Measured on 2 cores, SOFT's three stage shapes at 800 x 1344: with 2 MiB L2
(AVX-512 Xeon) 8 MiB tiles were fastest, with 512 KiB L2 (AMD EPYC, Zen 3)
1-2 MiB tiles, 1.25x faster than 8 MiB ones."""
DEFAULT_L2 = 2 << 20
ONE_PIECE_ELEMENTS = 1 << 23
"""Without autograd and without a tile size set, a kernel of at most this
many entries (32 MiB in float32) is computed once, in one piece, instead of
twice in tiles: at 512 x 512 (m = 256) SOFT-Tiny's three stage shapes took
18.5 / 18.9 / 6.0 ms that way against 23.4 / 23.4 / 17.0 ms tiled, on 2 cores
of an AVX-512 Xeon; at 64 MiB the two were even or tiles won."""
ONE_PIECE_GRAD_ELEMENTS = 1 << 21
"""With autograd and without a tile size set, the products with a kernel of
at most this many entries (8 MiB in float32) are declined to autograd
through the kernel held whole (the plain products): at 224 x 224, batch 8
(m = 49, 4.7 MiB), SOFT-Tiny's three stage shapes took 22.9 / 9.5 / 6.9 ms
that way against 49.4 / 13.0 / 10.5 ms for :func:`lowrank`; at 20 MiB
(m = 256) the two were even, at 32 MiB :func:`lowrank` took 80 against
130 ms. Autograd keeps the kernel and its exponent for the backward: with a
16 MiB limit (512 x 512's first stage held whole) a 512 x 512 training step
of SOFT-Tiny peaked at 521 against 390 MiB."""


@functools.lru_cache(maxsize=None)
def l2_cache_bytes() -> int:
    """The per-core L2 cache of CPU 0 from Linux's sysfs, else
    :data:`DEFAULT_L2`."""
    root = '/sys/devices/system/cpu/cpu0/cache'
    try:
        for index in sorted(os.listdir(root)):
            with open(os.path.join(root, index, 'level')) as f:
                if f.read().strip() != '2':
                    continue
            with open(os.path.join(root, index, 'size')) as f:
                size = f.read().strip().upper()
            scale = {'K': 1 << 10, 'M': 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip('KM')) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2


def tile_elements() -> int:
    """Kernel entries per tile: the setting of
    :func:`~mmsoft.ops.execution.tile_elements` (``MMSOFT_TILE_ELEMENTS``),
    else :data:`L2_TILES` times the L2 cache (in float32 entries)."""
    return execution.tile_elements() or L2_TILES * l2_cache_bytes() // 4


def _within(q: Tensor, k: Tensor, elements: int) -> bool:
    """Whether the kernel of ``q`` and ``k`` has at most ``elements`` entries,
    where no tile size is set (else at most none)."""
    limit = elements if execution.tile_elements() is None else 0
    return q.shape[0] * q.shape[-2] * k.shape[-2] <= limit


def _in_one_piece(q: Tensor, k: Tensor) -> bool:
    """Whether a forward without autograd computes the kernel once: it fits
    in one tile, or, without a tile size set, in :data:`ONE_PIECE_ELEMENTS`."""
    return _tile_rows(q, k) >= q.shape[-2] or _within(q, k, ONE_PIECE_ELEMENTS)


def _tile_rows(q: Tensor, k: Tensor) -> int:
    """Query rows per tile: :func:`tile_elements` kernel entries over the batch."""
    return max(1, tile_elements() // max(1, q.shape[0] * k.shape[-2]))  # batch 0 too


LOG2E = 1.4426950408889634
"""``log2(e)``: the tiles evaluate ``exp(x)`` as ``exp2(x log2(e))``."""


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


def _add_transposed_product_(acc: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``acc += a^T b`` for batches ``a`` (B, n, p) and ``b`` (B, n, r), a
    matrix at a time: each ``a^T`` goes to BLAS as a transposed operand, where
    ``baddbmm_`` copies the transposed batch first."""
    for i in range(acc.shape[0]):
        acc[i].addmm_(a[i].t(), b[i])
    return acc


def _spans(q: Tensor, rows: int) -> List[Tuple[int, int]]:
    """One span of query rows per worker (at most one per tile)."""
    n = q.shape[-2]
    return row_spans(n, min(split_workers(q), -(-n // rows)))


def kernel_project(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``A1^T @ v`` with ``A1 = k(q, k)``, tile by tile, without autograd.

    On CPU the query rows are split into one span per intra-op thread and
    each span's tiles run on a single-threaded worker
    (:mod:`.threads`), so the threads join once per call
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
            _add_transposed_product_(u, kernel, v[:, start:stop])
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


def landmark_kernel(k: Tensor) -> Tensor:
    """``A2 = k(k, k)`` of a batch of landmark sets ``(B, m, d)``: ``(B, m, m)``.

    :func:`~mmsoft.ops.gaussian_kernel` itself, except that on CPU
    without autograd the batch is cut into one part per
    :func:`~.threads.split_workers` and each part's kernel (one matrix
    product of augmented points, then the clamp and the exponential in place)
    is written into the result on a single-threaded worker: the heads'
    kernels are whole pieces, so the threads join once instead of after each
    of the three operations.

    Args:
        k (Tensor): Landmarks (B, m, d).

    Returns:
        Tensor: (B, m, m).
    """
    parts = row_spans(k.shape[0], split_workers(k)) if k.dim() == 3 else []
    if len(parts) <= 1 or (torch.is_grad_enabled() and k.requires_grad):
        return gaussian_kernel(k, k)
    out = k.new_empty(k.shape[0], k.shape[1], k.shape[1])

    def fill(span: Tuple[int, int]) -> None:
        lo, hi = span
        gaussian_kernel(k[lo:hi], k[lo:hi], out=out[lo:hi])

    map_single_threaded(fill, parts)
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


def _kernel_grads(q: Tensor, k: Tensor, rows: int, kernel_grad,
                  other: Tensor, other_from_kernel,
                  other_by_rows: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``q`` and ``k`` through the kernel, and of the product's
    other input, tile by tile.

    For each tile, ``kernel_grad(start, stop)`` gives ``dL/dK`` of its rows
    and ``other_from_kernel(K, start, stop, acc)`` adds the tile's share of
    the other input's gradient to ``acc`` (shaped like ``other``). With
    ``other_by_rows`` that gradient has a row per query (``v``'s), the tile
    writes its rows and all spans share one ``acc``; else it sums over the
    queries (``w``'s) and each span accumulates its own, summed at the end;
    ``dL/dX = dL/dK * K`` for the exponent ``X = -||q - k||^2 / 2``, then
    through the augmented points (``x.y - |x|^2/2 - |y|^2/2``) to ``q`` and
    ``k``. Autograd through the plain formula also zeroes the entries whose
    ``X`` rounding made positive (clamped to 0); their points coincide to
    rounding, so what they pass on, ``dL/dX (k - q)``, is of that size, and
    leaving them in spares a mask and its conversion per tile (2.6 of 7.9 ms
    a tile at 800 x 1344).

    Returns:
        tuple[Tensor, Tensor, Tensor]: ``dL/dq``, ``dL/dk`` and the other
        input's gradient.
    """
    q_aug, k_aug = augmented_points(q, k)
    k_aug_t = k_aug.transpose(-2, -1) * LOG2E
    batch, n, d = q.shape
    m = k.shape[-2]
    grad_q_aug = q_aug.new_empty(batch, n, d + 2)
    shared_acc = torch.empty_like(other) if other_by_rows else None

    def span_grads(span: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        lo, hi = span
        grad_k_aug = q.new_zeros(batch, m, d + 2)
        acc = shared_acc if other_by_rows else torch.zeros_like(other)
        exponent = q.new_empty(batch * min(rows, hi - lo) * m)
        for start in range(lo, hi, rows):
            stop = min(start + rows, hi)
            kernel = exponent[:batch * (stop - start) * m].view(batch, stop - start, m)
            torch.bmm(q_aug[:, start:stop], k_aug_t, out=kernel)
            kernel.clamp_max_(0).exp2_()
            other_from_kernel(kernel, start, stop, acc)
            dx = kernel_grad(start, stop).mul_(kernel)
            torch.bmm(dx, k_aug, out=grad_q_aug[:, start:stop])
            _add_transposed_product_(grad_k_aug, dx, q_aug[:, start:stop])
        return grad_k_aug, acc

    parts = map_single_threaded(span_grads, _spans(q, rows))
    grad_k_aug = sum((p[0] for p in parts[1:]), parts[0][0])
    grad_other = shared_acc if other_by_rows else sum(
        (p[1] for p in parts[1:]), parts[0][1])
    grad_q = grad_q_aug[..., :d] - q * grad_q_aug[..., d:d + 1]
    grad_k = grad_k_aug[..., :d] - k * grad_k_aug[..., d + 1:d + 2]
    return grad_q, grad_k, grad_other


class _LowRank(Function):
    """``out = A1 middle(a2, A1^T v)`` with one tiled backward for both kernel
    products.

    Backward: ``g_w = A1^T g`` (a pass like the forward's), then through
    ``middle``'s own autograd graph (the inverse and SOFT-Norm's scaling) to
    ``g_u`` and ``g_a2``, then one pass for everything the kernel passes on:
    ``dL/dA1 = g w^T + v g_u^T`` as one product of the rows ``[g, v]`` with
    ``[w, g_u]^T``, and ``dL/dv = A1 g_u``. Where a backward of each product
    would recompute the kernel and take its derivative, this takes the
    derivative once (at 800 x 1344's first stage, 0.79
    against 0.88 s for the attention's forward and backward).
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, a2: Tensor,
                middle: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        u = kernel_project(q, k, v)
        with torch.enable_grad():
            u.requires_grad_()
            a2_in = a2.detach().requires_grad_(a2.requires_grad)
            w = middle(a2_in, u)
        ctx.save_for_backward(q, k, v)
        ctx.middle = (u, a2_in, w)
        return kernel_expand(q, k, w.detach())

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        q, k, v = ctx.saved_tensors
        u, a2_in, w = ctx.middle
        grad_out = grad_out.contiguous()
        grad_w = kernel_project(q, k, grad_out)
        inputs = (u, a2_in) if a2_in.requires_grad else (u, )
        # Kept for another backward of the same graph (retain_graph, gradcheck).
        grads = torch.autograd.grad(w, inputs, grad_w, retain_graph=True)
        grad_u = grads[0].contiguous()
        left = torch.cat([grad_out, v], dim=-1)
        right_t = torch.cat([w.detach(), grad_u], dim=-1).transpose(-2, -1)

        def kernel_grad(start: int, stop: int) -> Tensor:  # dK = [g, v][w, gu]^T
            return torch.bmm(left[:, start:stop], right_t)

        def grad_v(kernel: Tensor, start: int, stop: int, acc: Tensor) -> None:
            torch.bmm(kernel, grad_u, out=acc[:, start:stop])  # dv = K gu

        grad_q, grad_k, grad_v_ = _kernel_grads(q, k, _tile_rows(q, k), kernel_grad, v,
                                                grad_v, other_by_rows=True)
        return grad_q, grad_k, grad_v_, grads[1] if len(grads) > 1 else None, None


def lowrank(q: Tensor, k: Tensor, v: Tensor, a2: Tensor,
            middle: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """``A1 @ middle(a2, A1^T @ v)`` with autograd: :class:`_LowRank`."""
    return _LowRank.apply(q, k, v, a2, middle)


class TiledProducts:
    """The low-rank attention's kernel products in tiles, split over the
    workers (:class:`~mmsoft.ops.dispatch.LowrankProducts`).

    Without autograd (eager or compiled, as the operators
    ``mmsoft::kernel_project`` and ``mmsoft::kernel_expand``) a kernel
    larger than one tile is computed twice, tile by tile, which costs
    ``N m (d + 2)`` more multiply-adds but keeps each tile in cache; in eager
    mode a kernel that fits in one tile, or in :data:`ONE_PIECE_ELEMENTS`, is
    computed once. With autograd in eager mode, :func:`lowrank`, whose one
    backward recomputes the tiles (against autograd through the kernel held
    whole it took 80 against 130 ms at 512 x 512's first stage, 698 against
    1891 ms at 800 x 1344's), except for a kernel of at most
    :data:`ONE_PIECE_GRAD_ELEMENTS`. Inside exports, and with autograd under
    ``torch.compile``, it declines (the plain products run).
    """

    def landmark_kernel(self, k: Tensor) -> Optional[Tensor]:
        return landmark_kernel(k)

    def lowrank(self, q: Tensor, k: Tensor, v: Tensor, a2: Tensor,
                middle: Callable[[Tensor, Tensor], Tensor],
                needs_grad: bool) -> Optional[Tensor]:
        if exporting() or (needs_grad and compiling()):
            return None
        if needs_grad:
            if _within(q, k, ONE_PIECE_GRAD_ELEMENTS):
                return None  # the plain products, through the kernel held whole
            return lowrank(q, k, v, a2, middle)
        if not compiling() and _in_one_piece(q, k):
            kernel = gaussian_kernel(q, k)
            return torch.bmm(kernel, middle(a2, torch.bmm(kernel.transpose(-2, -1), v)))
        if compiling():
            return torch.ops.mmsoft.kernel_expand(
                q, k, middle(a2, torch.ops.mmsoft.kernel_project(q, k, v)))
        return kernel_expand(q, k, middle(a2, kernel_project(q, k, v)))

    def caller_context(self, q: Tensor) -> ContextManager:
        # Eager CPU only: the context changes thread settings (no graph op).
        return caller_on_one_thread(q) if eager_cpu(q) else contextlib.nullcontext()


PRODUCTS = TiledProducts()
