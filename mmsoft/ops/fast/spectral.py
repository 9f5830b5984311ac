"""The Newton iterate from a spectral decomposition: the same function, no loop.

Every Newton iterate ``V_k`` is a polynomial in ``P = a + reg I``. With
``P = U diag(l) U^T``, ``V_T = U diag(v_T) U^T`` where ``v_0 = alpha l`` and
``v <- 2 v - l v^2`` (:func:`newton_scalar_iterate`), so ``V_T @ rhs`` costs
one decomposition and a few thin products instead of ``2 T`` products of
``m x m`` matrices. Two routes compute it on CPU (:data:`SPECTRAL_ROUTES`):

- ``'eigh'``: ``torch.linalg.eigh`` (the LAPACK torch is built with, MKL in
  the x86 wheels) gives ``U``; ``V_T rhs = U (v_T * U^T rhs)``.
- ``'tridiagonal'``: LAPACK through SciPy (:mod:`.lapack`) reduces
  ``a = Q T Q^T`` (``?sytrd``) and decomposes the tridiagonal
  ``T = Z diag(l) Z^T`` (``?stedc``); ``V_T rhs = Q Z (v_T * Z^T Q^T rhs)``
  with ``Q`` applied as its Householder reflectors (``?ormtr``). ``U = Q Z``
  is never formed: the ``2 m^3`` back-transformation that ``eigh`` spends
  on it is replaced by products with the ``k <= 64`` columns of ``rhs``.

Both cut a batch into one part per :func:`~.thread_split.split_workers` and
solve each part on a single-threaded worker. Which is faster depends on the
machine (:mod:`.newton_routes` measures it). Where no backward needs the
factors again, :func:`spectral_solve` decomposes and applies each matrix in
one piece of work, with buffers of one matrix instead of the batch's, and
on the tridiagonal route from the few large eigenpairs of ``T`` where that
is cheaper (:mod:`.newton_deflated`).
"""
import contextlib
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from . import lapack
from .execution import compiling
from .thread_split import map_single_threaded, parallel_eigh, split_workers

SPECTRAL_ROUTES = ('eigh', 'tridiagonal')


def newton_scalar_iterate(values: Tensor, start: Tensor, num_iters: int) -> Tensor:
    """``num_iters`` steps of ``v <- 2 v - l v^2`` for each eigenvalue ``l``.

    With ``e_k = 1 - l v_k`` a step is ``v_{k+1} = v_k (1 + e_k)`` and
    ``e_{k+1} = e_k^2``, so ``v_T = v_0 prod_{k<T} (1 + e_1^(2^(k-1)))`` for
    ``k >= 1``, evaluated in float64 (where ``e_1`` keeps ``l v_0`` even for
    the smallest ``l``) and returned in the input dtype. Each factor reads
    ``e_1`` once: written as the recursion, ``torch.compile`` (inductor)
    inlines ``v`` into every later step and the expression grows as ``3^T``,
    so compiling a model never finishes.

    Args:
        values (Tensor): Eigenvalues ``l`` of ``P``.
        start (Tensor): ``v_0 = alpha * l``, same shape.
        num_iters (int): Number of steps ``T``.

    Returns:
        Tensor: ``v_T``, in the dtype of ``values``.
    """
    v = start.double()
    if num_iters == 0:
        return v.to(values.dtype)
    e0 = 1 - values.double() * v
    v = v * (1 + e0)
    e1 = e0 * e0
    for k in range(1, num_iters):
        v = v * (1 + e1.pow(2.0 ** (k - 1)))
    return v.to(values.dtype)


class SpectralFactors(NamedTuple):
    """``V_T`` of a batch ``(B, m, m)`` as factors; see :func:`spectral_factors`.

    ``values`` is ``v_T`` per eigenvalue, ``(B, m)``. Route ``'eigh'``:
    ``vectors`` holds the eigenvectors ``U`` as columns. Route
    ``'tridiagonal'``: ``vectors`` holds ``Z^T`` (the eigenvectors of the
    tridiagonal ``T`` as rows), ``reflectors`` and ``tau`` describe ``Q``.
    """

    route: str
    values: Tensor
    vectors: Tensor
    reflectors: Optional[Tensor] = None
    tau: Optional[Tensor] = None


def spectral_values(a: Tensor, route: str) -> Tuple[Tensor, SpectralFactors]:
    """Eigenvalues of ``a`` (``(..., m, m)``, lower triangle read) and the
    factors of route ``route`` with ``values`` still unset (the eigenvalues).

    Under ``torch.compile`` the decomposition runs as the operator
    ``mmsoft::spectral_decompose``, which keeps the work split.

    Args:
        a (Tensor): Symmetric matrices.
        route (str): One of :data:`SPECTRAL_ROUTES`.

    Returns:
        tuple[Tensor, SpectralFactors]: Eigenvalues ``(B, m)`` in ascending
        order and the factors of the flattened batch.
    """
    _check_route(route)
    if route == 'tridiagonal' and a.device.type != 'cpu':
        raise ValueError(f"The 'tridiagonal' route runs on CPU, got {a.device}.")
    m = a.shape[-1]
    a3 = a.detach().reshape(-1, m, m)
    decompose = torch.ops.mmsoft.spectral_decompose if compiling() else _decompose
    values, vectors, reflectors, tau = decompose(a3, route)
    if route == 'eigh':
        return values, SpectralFactors(route, values, vectors)
    return values, SpectralFactors(route, values, vectors, reflectors, tau)


def _check_route(route: str) -> None:
    if route not in SPECTRAL_ROUTES:
        raise ValueError(f'Unknown spectral route {route!r}; use one of '
                         f'{SPECTRAL_ROUTES}.')


def _decompose(a3: Tensor, route: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(eigenvalues, vectors, reflectors, tau)`` of a batch ``(B, m, m)``;
    the last two are empty for ``'eigh'``."""
    if route == 'eigh':
        values, vectors = parallel_eigh(a3)
        return values, vectors, a3.new_empty(0), a3.new_empty(0)
    batch, m = a3.shape[:2]
    reflectors = torch.empty_like(a3, memory_format=torch.contiguous_format)
    vectors = torch.empty_like(reflectors)
    values = a3.new_empty(batch, m)
    tau = a3.new_zeros(batch, max(m - 1, 0))

    def solve(indices: List[int]) -> None:
        for i in indices:
            _, diag, off, tau_i = lapack.tridiagonalize(a3[i], out=reflectors[i])
            values[i], _ = lapack.tridiagonal_eigh(diag, off, out=vectors[i])
            tau[i] = tau_i

    _map_over_batch(solve, batch, a3, uses_lapack=True)
    return values, vectors, reflectors, tau


def spectral_apply(factors: SpectralFactors, rhs: Tensor) -> Tensor:
    """``V_T @ rhs`` from :class:`SpectralFactors` (under ``torch.compile``
    the operator ``mmsoft::spectral_apply``).

    Args:
        factors (SpectralFactors): Of a batch of ``B`` matrices.
        rhs (Tensor): ``(..., m, k)`` with ``B`` matrices in its leading
            dimensions.

    Returns:
        Tensor: Same shape as ``rhs``.
    """
    shape = rhs.shape
    rhs3 = rhs.reshape(-1, *shape[-2:])
    empty = rhs.new_empty(0)
    reflectors = empty if factors.reflectors is None else factors.reflectors
    tau = empty if factors.tau is None else factors.tau
    apply = torch.ops.mmsoft.spectral_apply if compiling() else _apply
    out = apply(factors.values, factors.vectors, reflectors, tau, rhs3, factors.route)
    return out.reshape(shape)


def _apply(values: Tensor, vectors: Tensor, reflectors: Tensor, tau: Tensor,
           rhs3: Tensor, route: str) -> Tensor:
    """:func:`spectral_apply` on a batch ``rhs3`` ``(B, m, k)``."""
    values = values.to(rhs3.dtype)
    if route == 'eigh':
        return _eigenvector_apply(vectors.to(rhs3.dtype), values, rhs3)
    out_t = rhs3.transpose(-2, -1).contiguous()  # (B, k, m): column-major (m, k)

    def apply(indices: List[int]) -> None:
        for i in indices:
            _tridiagonal_apply(reflectors[i], tau[i], vectors[i], values[i], out_t[i])

    _map_over_batch(apply, rhs3.shape[0], rhs3, uses_lapack=True)
    return out_t.transpose(-2, -1)


def _eigenvector_apply(u: Tensor, values: Tensor, rhs: Tensor) -> Tensor:
    """``U diag(values) U^T rhs`` for eigenvectors ``U`` as columns (batched
    or one matrix)."""
    return u @ (values.unsqueeze(-1) * (u.transpose(-2, -1) @ rhs))


def _tridiagonal_apply(house: Tensor, tau: Tensor, z_t: Tensor, values: Tensor,
                       y_t: Tensor) -> Tensor:
    """``Q Z diag(values) Z^T Q^T Y`` for one matrix, in place on ``y_t``
    (``Y`` transposed, a C-contiguous ``(k, m)`` tensor), which it returns;
    ``Q`` as the reflectors of :func:`~.lapack.tridiagonalize`, ``Z^T`` as
    the rows of ``z_t``."""
    lapack.apply_q(house, tau, y_t, True)
    _eigenbasis_apply_(z_t, values, y_t)
    return lapack.apply_q(house, tau, y_t, False)


def _eigenbasis_apply_(z_t: Tensor, values: Tensor, y_t: Tensor) -> Tensor:
    """``Z diag(values) Z^T Y`` in place on ``y_t`` (``Y`` transposed, a
    C-contiguous ``(k, m)`` tensor), for ``Z^T`` as the rows of ``z_t``."""
    w = torch.mm(z_t, y_t.t()).mul_(values.unsqueeze(-1))
    return torch.mm(w.t(), z_t, out=y_t)


def newton_spectrum(eigvals: Tensor, alpha: Tensor, reg: float,
                    num_iters: int) -> Tensor:
    """``v_T`` per eigenvalue of ``P = a + reg I`` from the eigenvalues of
    ``a`` and the start ``alpha`` (broadcast against ``eigvals``):
    :func:`newton_scalar_iterate` from ``v_0 = alpha * l``."""
    values = eigvals + reg
    return newton_scalar_iterate(values, alpha * values, num_iters)


def spectral_solve(a: Tensor, rhs: Tensor, alpha: Tensor, reg: float, num_iters: int,
                   route: str) -> Tensor:
    """``V_T @ rhs`` by route ``route``, one matrix at a time, keeping no factors.

    The result of :func:`spectral_values`, :func:`newton_scalar_iterate` and
    :func:`spectral_apply`, for when the factors are not needed again (no
    backward): each matrix is decomposed, its ``v_T`` formed and applied to
    its ``rhs`` in one piece of work on one worker, with buffers of one
    matrix, which the worker's allocator reuses from matrix to matrix,
    instead of ``(B, m, m)`` batches of eigenvectors and reflectors that are
    mapped in fresh (and zeroed by the OS) at every call. On route
    ``'tridiagonal'`` the tridiagonal matrix's full eigenvectors are formed
    only where :func:`~.newton_deflated.deflated_apply` declines (more than a
    few eigenvalues past the polynomial part of the iterate). Under
    ``torch.compile`` it runs as the operator ``mmsoft::spectral_solve``.

    Args:
        a (Tensor): Symmetric matrices ``(..., m, m)``, lower triangle read.
        rhs (Tensor): ``(..., m, k)``.
        alpha (Tensor): ``V_0 = alpha * P`` per matrix, ``B`` values in any
            shape.
        reg (float): Ridge added to the eigenvalues of ``a``.
        num_iters (int): Newton steps ``T``.
        route (str): One of :data:`SPECTRAL_ROUTES`.

    Returns:
        Tensor: Same shape and dtype as ``rhs``.
    """
    _check_route(route)
    m = a.shape[-1]
    a3 = a.detach().reshape(-1, m, m)
    rhs3 = rhs.detach().reshape(-1, *rhs.shape[-2:])
    solve = torch.ops.mmsoft.spectral_solve if compiling() else _solve
    out = solve(a3, rhs3, alpha.detach().reshape(-1), reg, num_iters, route)
    return out.reshape(rhs.shape)


def _solve(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
           route: str) -> Tensor:
    """:func:`spectral_solve` on a batch ``(B, m, m)``, ``(B, m, k)``, ``(B,)``."""
    from .newton_deflated import deflated_apply  # imports this module
    out = torch.empty_like(rhs3, memory_format=torch.contiguous_format)

    def spectrum(values: Tensor, i: int) -> Tensor:
        return newton_spectrum(values, alpha[i], reg, num_iters).to(rhs3.dtype)

    def solve(indices: List[int]) -> None:
        for i in indices:
            if route == 'eigh':
                values, u = torch.linalg.eigh(a3[i])
                out[i] = _eigenvector_apply(u.to(rhs3.dtype), spectrum(values, i),
                                            rhs3[i])
            else:
                house, diag, off, tau = lapack.tridiagonalize(a3[i])
                y_t = lapack.apply_q(house, tau, rhs3[i].t().contiguous(), True)
                w_t = deflated_apply(diag, off, y_t, float(alpha[i]), reg, num_iters)
                if w_t is None:
                    values, z_t = lapack.tridiagonal_eigh(diag, off)
                    _eigenbasis_apply_(z_t, spectrum(values, i), y_t)
                else:
                    y_t.copy_(w_t)
                out[i] = lapack.apply_q(house, tau, y_t, False).t()

    _map_over_batch(solve, a3.shape[0], a3, uses_lapack=route == 'tridiagonal')
    return out


@torch.library.custom_op('mmsoft::spectral_decompose', mutates_args=())
def _decompose_op(a3: Tensor, route: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _decompose(a3, route)


@_decompose_op.register_fake
def _(a3: Tensor, route: str) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    batch, m = a3.shape[:2]
    if route == 'eigh':
        reflectors, tau = a3.new_empty(0), a3.new_empty(0)
    else:
        reflectors, tau = a3.new_empty(batch, m, m), a3.new_empty(batch, max(m - 1, 0))
    return a3.new_empty(batch, m), a3.new_empty(batch, m, m), reflectors, tau


@torch.library.custom_op('mmsoft::spectral_apply', mutates_args=())
def _apply_op(values: Tensor, vectors: Tensor, reflectors: Tensor, tau: Tensor,
              rhs3: Tensor, route: str) -> Tensor:
    return _apply(values, vectors, reflectors, tau, rhs3, route).contiguous()


@_apply_op.register_fake
def _(values: Tensor, vectors: Tensor, reflectors: Tensor, tau: Tensor,
      rhs3: Tensor, route: str) -> Tensor:
    return torch.empty_like(rhs3, memory_format=torch.contiguous_format)


@torch.library.custom_op('mmsoft::spectral_solve', mutates_args=())
def _solve_op(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
              route: str) -> Tensor:
    return _solve(a3, rhs3, alpha, reg, num_iters, route)


@_solve_op.register_fake
def _(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
      route: str) -> Tensor:
    return torch.empty_like(rhs3, memory_format=torch.contiguous_format)


def _map_over_batch(fn, batch: int, like: Tensor, uses_lapack: bool = False) -> None:
    """``fn(indices)`` for every matrix of the batch, a matrix at a time on
    :func:`~.thread_split.split_workers` workers (each takes the next
    matrix when done: decompositions of one size differ in cost).

    With ``uses_lapack``, SciPy's BLAS runs on one thread
    (:func:`~.lapack.single_threaded`) wherever the pieces run on one torch
    thread each: on the workers, or in a caller that runs one thread.
    """
    workers = min(split_workers(like), batch)
    one_thread = uses_lapack and (workers > 1 or torch.get_num_threads() == 1)
    with lapack.single_threaded() if one_thread else contextlib.nullcontext():
        if workers <= 1:
            with torch.no_grad():
                fn(list(range(batch)))
        else:
            map_single_threaded(fn, [[i] for i in range(batch)], workers=workers)
