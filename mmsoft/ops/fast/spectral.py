"""The spectral Newton routes: the iterate from one decomposition per matrix.

With ``P = U diag(l) U^T``, ``V_T = U diag(v_T) U^T`` (:mod:`.spectrum`), so
``V_T @ rhs`` costs one decomposition and a few thin products instead of the
loop's ``2 T`` products of ``m x m`` matrices. Two routes, CPU only (GPU
eigensolvers are far slower than the loop's products):

- ``'eigh'``: ``torch.linalg.eigh`` (the LAPACK torch is built with, MKL in
  the x86 wheels) gives ``U``; ``V_T rhs = U (v_T * U^T rhs)``.
- ``'tridiagonal'``: LAPACK through SciPy (:mod:`.lapack`) reduces
  ``a = Q T Q^T`` (``?sytrd``) and decomposes the tridiagonal
  ``T = Z diag(l) Z^T`` (``?stedc``); ``V_T rhs = Q Z (v_T * Z^T Q^T rhs)``
  with ``Q`` applied as its Householder reflectors (``?ormtr``). ``U = Q Z``
  is never formed: the ``2 m^3`` back-transformation that ``eigh`` spends
  on it is replaced by products with the ``k <= 64`` columns of ``rhs``.
  Without a backward, the few eigenpairs of ``T`` past the polynomial part
  of the iterate come from ``?stemr`` and the rest from a Chebyshev series
  (:mod:`.deflated`) wherever that is cheaper than ``?stedc``.

A route works one matrix at a time, each on a single-threaded worker
(:func:`~.threads.map_over_batch`). Without a backward (``solve``) a
matrix is decomposed and applied in one piece of work, with buffers of one
matrix that the worker's allocator reuses; with one (``factorize``, then
``apply``) the factors of the batch are kept. Under ``torch.compile`` the
three run as the operators ``mmsoft::newton_solve``,
``mmsoft::newton_factorize`` and ``mmsoft::newton_apply_factors``, so a
compiled model keeps the split.
"""
import contextlib
from typing import Callable, Dict, List, NamedTuple, Tuple

import torch
from torch import Tensor

from ..dispatch import Factors, NewtonRoute
from ..execution import compiling
from . import lapack
from .deflated import deflated_apply
from .spectrum import newton_spectrum
from .threads import map_over_batch, split_workers


class _MatrixRoute(NamedTuple):
    """A spectral route's work on one matrix ``i`` of a batch, writing into
    the batch's buffers."""

    factor_shapes: Callable[[int, int], List[Tuple[int, ...]]]
    factor: Callable[..., None]   # (a, values, *factors, alpha, reg, num_iters)
    apply: Callable[..., None]    # (out, rhs, values, *factors)
    solve: Callable[..., None]    # (out, a, rhs, alpha, reg, num_iters)
    uses_lapack: bool


def _eigenvector_apply(u: Tensor, values: Tensor, rhs: Tensor) -> Tensor:
    """``U diag(values) U^T rhs`` for eigenvectors ``U`` as columns."""
    return u @ (values.unsqueeze(-1) * (u.transpose(-2, -1) @ rhs))


def _eigh_factor(a: Tensor, values: Tensor, vectors: Tensor, alpha: float,
                 reg: float, num_iters: int) -> None:
    eigvals, u = torch.linalg.eigh(a)
    values.copy_(newton_spectrum(eigvals, alpha, reg, num_iters))
    vectors.copy_(u)


def _eigh_apply(out: Tensor, rhs: Tensor, values: Tensor, vectors: Tensor) -> None:
    out.copy_(_eigenvector_apply(vectors.to(rhs.dtype), values.to(rhs.dtype), rhs))


def _eigh_solve(out: Tensor, a: Tensor, rhs: Tensor, alpha: float, reg: float,
                num_iters: int) -> None:
    eigvals, u = torch.linalg.eigh(a)
    values = newton_spectrum(eigvals, alpha, reg, num_iters).to(rhs.dtype)
    out.copy_(_eigenvector_apply(u.to(rhs.dtype), values, rhs))


def _eigenbasis_apply_(z_t: Tensor, values: Tensor, y_t: Tensor) -> Tensor:
    """``Z diag(values) Z^T Y`` in place on ``y_t`` (``Y`` transposed, a
    C-contiguous ``(k, m)`` tensor), for ``Z^T`` as the rows of ``z_t``."""
    w = torch.mm(z_t, y_t.t()).mul_(values.unsqueeze(-1))
    return torch.mm(w.t(), z_t, out=y_t)


def _tridiagonal_factor(a: Tensor, values: Tensor, z_t: Tensor, house: Tensor,
                        tau: Tensor, alpha: float, reg: float, num_iters: int) -> None:
    _, diag, off, tau_i = lapack.tridiagonalize(a, out=house)
    eigvals, _ = lapack.tridiagonal_eigh(diag, off, out=z_t)
    values.copy_(newton_spectrum(eigvals, alpha, reg, num_iters))
    tau.copy_(tau_i)


def _tridiagonal_apply(out: Tensor, rhs: Tensor, values: Tensor, z_t: Tensor,
                       house: Tensor, tau: Tensor) -> None:
    y_t = lapack.apply_q(house, tau, rhs.t().contiguous(), True)
    _eigenbasis_apply_(z_t, values.to(rhs.dtype), y_t)
    out.copy_(lapack.apply_q(house, tau, y_t, False).t())


def _tridiagonal_solve(out: Tensor, a: Tensor, rhs: Tensor, alpha: float,
                       reg: float, num_iters: int) -> None:
    house, diag, off, tau = lapack.tridiagonalize(a)
    y_t = lapack.apply_q(house, tau, rhs.t().contiguous(), True)
    w_t = deflated_apply(diag, off, y_t, alpha, reg, num_iters)
    if w_t is None:  # more than a few large eigenvalues: all of them
        eigvals, z_t = lapack.tridiagonal_eigh(diag, off)
        values = newton_spectrum(eigvals, alpha, reg, num_iters).to(rhs.dtype)
        _eigenbasis_apply_(z_t, values, y_t)
    else:
        y_t.copy_(w_t)
    out.copy_(lapack.apply_q(house, tau, y_t, False).t())


_MATRIX_ROUTES: Dict[str, _MatrixRoute] = {
    'eigh': _MatrixRoute(lambda b, m: [(b, m), (b, m, m)], _eigh_factor,
                         _eigh_apply, _eigh_solve, uses_lapack=False),
    'tridiagonal': _MatrixRoute(
        lambda b, m: [(b, m), (b, m, m), (b, m, m), (b, max(m - 1, 0))],
        _tridiagonal_factor, _tridiagonal_apply, _tridiagonal_solve,
        uses_lapack=True),
}


def _over_batch(route: str, fn: Callable[[int], None], batch: int,
                like: Tensor) -> None:
    """``fn(i)`` for each matrix on the workers; SciPy's BLAS on one thread
    (:func:`~.lapack.single_threaded`) while a LAPACK route's pieces run on
    one torch thread each (on the workers, or in a one-thread caller)."""
    one_thread = _MATRIX_ROUTES[route].uses_lapack and (
        min(split_workers(like), batch) > 1 or torch.get_num_threads() == 1)
    with lapack.single_threaded() if one_thread else contextlib.nullcontext():
        map_over_batch(fn, batch, like)


def _solve(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
           route: str) -> Tensor:
    """``V_T @ rhs3`` of a batch ``(B, m, m)``, ``(B, m, k)``, ``(B,)``,
    each matrix decomposed and applied where it is made."""
    out = torch.empty_like(rhs3, memory_format=torch.contiguous_format)
    solve, alphas = _MATRIX_ROUTES[route].solve, alpha.tolist()
    _over_batch(route, lambda i: solve(out[i], a3[i], rhs3[i], alphas[i], reg,
                                       num_iters), a3.shape[0], a3)
    return out


def _factorize(a3: Tensor, alpha: Tensor, reg: float, num_iters: int,
               route: str) -> List[Tensor]:
    """The factors of ``V_T`` for a batch: ``v_T`` per eigenvalue ``(B, m)``,
    then the route's own (eigh: ``U``; tridiagonal: ``Z^T``, the reflectors
    and their scales)."""
    matrix_route = _MATRIX_ROUTES[route]
    batch, m = a3.shape[:2]
    factors = [a3.new_empty(shape) for shape in matrix_route.factor_shapes(batch, m)]
    alphas = alpha.tolist()
    _over_batch(route, lambda i: matrix_route.factor(
        a3[i], *(f[i] for f in factors), alphas[i], reg, num_iters), batch, a3)
    return factors


def _apply(factors: List[Tensor], rhs3: Tensor, route: str) -> Tensor:
    """``V_T @ rhs3`` from :func:`_factorize`'s factors."""
    out = torch.empty_like(rhs3, memory_format=torch.contiguous_format)
    apply = _MATRIX_ROUTES[route].apply
    _over_batch(route, lambda i: apply(out[i], rhs3[i], *(f[i] for f in factors)),
                rhs3.shape[0], rhs3)
    return out


@torch.library.custom_op('mmsoft::newton_solve', mutates_args=())
def _solve_op(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
              route: str) -> Tensor:
    return _solve(a3, rhs3, alpha, reg, num_iters, route)


@_solve_op.register_fake
def _(a3: Tensor, rhs3: Tensor, alpha: Tensor, reg: float, num_iters: int,
      route: str) -> Tensor:
    return torch.empty_like(rhs3, memory_format=torch.contiguous_format)


@torch.library.custom_op('mmsoft::newton_factorize', mutates_args=())
def _factorize_op(a3: Tensor, alpha: Tensor, reg: float, num_iters: int,
                  route: str) -> List[Tensor]:
    return _factorize(a3, alpha, reg, num_iters, route)


@_factorize_op.register_fake
def _(a3: Tensor, alpha: Tensor, reg: float, num_iters: int,
      route: str) -> List[Tensor]:
    batch, m = a3.shape[:2]
    return [a3.new_empty(s) for s in _MATRIX_ROUTES[route].factor_shapes(batch, m)]


@torch.library.custom_op('mmsoft::newton_apply_factors', mutates_args=())
def _apply_op(factors: List[Tensor], rhs3: Tensor, route: str) -> Tensor:
    return _apply(factors, rhs3, route)


@_apply_op.register_fake
def _(factors: List[Tensor], rhs3: Tensor, route: str) -> Tensor:
    return torch.empty_like(rhs3, memory_format=torch.contiguous_format)


def _spectral_route(name: str) -> NewtonRoute:
    """The :class:`~mmsoft.ops.dispatch.NewtonRoute` of spectral route ``name``."""

    def solve(a3: Tensor, rhs3: Tensor, alpha3: Tensor, reg: float,
              num_iters: int) -> Tensor:
        op = torch.ops.mmsoft.newton_solve if compiling() else _solve
        return op(a3, rhs3, alpha3.reshape(-1), reg, num_iters, name)

    def factorize(a3: Tensor, alpha3: Tensor, reg: float, num_iters: int) -> Factors:
        op = torch.ops.mmsoft.newton_factorize if compiling() else _factorize
        return tuple(op(a3, alpha3.reshape(-1), reg, num_iters, name))

    def apply(factors: Factors, rhs3: Tensor) -> Tensor:
        op = torch.ops.mmsoft.newton_apply_factors if compiling() else _apply
        return op(list(factors), rhs3.contiguous(), name)

    def unable(device_type: str, in_export: bool) -> str:
        if in_export:
            return 'an eigendecomposition has no ONNX operator'
        if device_type != 'cpu':
            return 'it runs on CPU only'
        if name == 'tridiagonal' and not lapack.available():
            return f'it needs LAPACK through SciPy: {lapack.unavailable_reason()}'
        return ''

    return NewtonRoute(name, solve, factorize, apply, unable)


EIGH = _spectral_route('eigh')
TRIDIAGONAL = _spectral_route('tridiagonal')
