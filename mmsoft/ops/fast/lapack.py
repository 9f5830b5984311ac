"""Four LAPACK routines torch does not expose, from SciPy's LAPACK, by ctypes.

The tridiagonal route of the Newton iterate (:mod:`.spectral`) needs
``?sytrd`` (reduce a symmetric matrix to tridiagonal form ``A = Q T Q^T``),
``?stedc`` (eigenvalues and eigenvectors of ``T``, divide and conquer),
``?stemr`` (those of ``T`` in an interval only, :mod:`.deflated`) and
``?ormtr`` (multiply by ``Q`` kept as Householder reflectors). SciPy publishes
its LAPACK as C function pointers in ``scipy.linalg.cython_lapack``; they are
called here through ctypes, which releases the GIL, on torch tensors' memory
(no copies through NumPy). ``scipy.linalg.lapack`` wraps ``?sytrd``,
``?stemr`` and ``?stevd`` but not ``?ormtr``, holds the GIL while they run
(two threads run them one after the other) and returns new NumPy arrays
(``?stemr`` an ``n x n`` block of eigenvectors for the few asked for); the
design page has the measurement. Everything is optional: without SciPy
:func:`unavailable_reason` says why and the tridiagonal route is not
registered.

SciPy's OpenBLAS (a pthreads build) has one thread count for the whole
process (its ``openblas_set_num_threads_local`` sets that same count).
Calls made from several threads at once with more than one BLAS thread each
oversubscribe the cores and round differently from run to run, so
:func:`single_threaded` sets SciPy's BLAS to one thread, through
threadpoolctl, while split work runs LAPACK, and puts the count back when
the last such call ends. Only SciPy's BLAS is touched (NumPy and torch
carry their own). This is the one process-wide count the speed layer
changes; the design page lists the window and the switches that avoid it.

LAPACK is column-major. A C-contiguous ``(n, n)`` tensor read by LAPACK is
its transpose; for symmetric matrices LAPACK's upper triangle (``'U'``) is
the tensor's lower triangle, the one ``torch.linalg.eigh`` reads.
"""
import contextlib
import ctypes
import functools
import os
import threading
from typing import Callable, Dict, Iterator, Optional, Tuple

import torch
from threadpoolctl import ThreadpoolController
from torch import Tensor

_PTR = ctypes.c_void_p
_ARGS = {'sytrd': 10, 'stedc': 11, 'stemr': 21, 'ormtr': 13}
_PREFIX = {torch.float32: 's', torch.float64: 'd'}


@functools.lru_cache(maxsize=None)
def _binding() -> Tuple[Optional[Dict[str, Callable]], str]:
    """``(routines, reason)``; routines None when unavailable."""
    try:  # SciPy may be missing: then the tridiagonal route says why
        import scipy.linalg.cython_lapack as cython_lapack
    except ImportError as err:
        return None, f'SciPy is not installed ({err})'
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    routines = {}
    for prefix in _PREFIX.values():
        for name, nargs in _ARGS.items():
            capsule = cython_lapack.__pyx_capi__.get(prefix + name)
            if capsule is None:
                return None, f'SciPy has no LAPACK {prefix + name}'
            address = get_pointer(capsule, get_name(capsule))
            routines[prefix + name] = ctypes.CFUNCTYPE(None, *[_PTR] * nargs)(address)
    return routines, ''


_COUNT_FUNCTIONS = (
    ('scipy_openblas_get_num_threads', 'scipy_openblas_set_num_threads'),
    ('openblas_get_num_threads', 'openblas_set_num_threads'))


@functools.lru_cache(maxsize=None)
def _scipy_blas() -> Tuple[Tuple[Callable[[], int], Callable[[int], None]], ...]:
    """``(get, set)`` of the thread count of the BLAS that SciPy's LAPACK runs
    on: threadpoolctl finds the loaded BLAS that exports SciPy's prefixed
    ``scipy_ssytrd_`` (SciPy's wheels), else those that export ``ssytrd_``
    (a SciPy built on a shared BLAS); empty where none is found (then
    nothing is changed). The count is set through OpenBLAS's own functions
    on threadpoolctl's handle of the library: threadpoolctl's own setter of
    a pthreads OpenBLAS obeys only the first Python thread that used it and
    ignores every other, and the split's workers are other threads."""
    _binding()  # SciPy's LAPACK is loaded
    blas = ThreadpoolController().select(user_api='blas').lib_controllers
    for symbol in ('scipy_ssytrd_', 'ssytrd_'):
        found = [c.dynlib for c in blas if hasattr(c.dynlib, symbol)]
        if found:
            break
    controls = []
    for library in found:
        for get_name, set_name in _COUNT_FUNCTIONS:
            get = getattr(library, get_name, None)
            set_ = getattr(library, set_name, None)
            if get is not None and set_ is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                controls.append((get, set_))
                break
    return tuple(controls)


def unavailable_reason() -> str:
    """Why the routines cannot be used here, or ``''`` when they can."""
    return _binding()[1]


def available() -> bool:
    """Whether :func:`tridiagonalize`, :func:`tridiagonal_eigh`,
    :func:`tridiagonal_eigh_in`, :func:`tridiagonal_count` and :func:`apply_q`
    can run in this process."""
    return not unavailable_reason()


class _Window:
    """Threads inside :func:`single_threaded` and the counts to put back (a
    forked child starts its own)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.users = 0
        self.before: list = []


_WINDOW = _Window()


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run SciPy's BLAS on one thread while any thread is inside this block.

    The count is process-wide (see the module's note): the first thread to
    enter sets it to one and the last to leave puts the previous count back,
    so concurrent blocks nest safely.
    """
    global _WINDOW
    if _WINDOW.pid != os.getpid():
        _WINDOW = _Window()
    window, controls = _WINDOW, _scipy_blas()
    with window.lock:
        if window.users == 0:
            window.before = [get() for get, _ in controls]
            for _, set_ in controls:
                set_(1)
        window.users += 1
    try:
        yield
    finally:
        with window.lock:
            window.users -= 1
            if window.users == 0:
                for (_, set_), count in zip(controls, window.before):
                    set_(count)


def _routine(dtype: torch.dtype, name: str) -> Callable:
    routines = _binding()[0]
    if routines is None:
        raise RuntimeError('LAPACK through SciPy is unavailable: '
                           f'{unavailable_reason()}.')
    if dtype not in _PREFIX:
        raise TypeError(f'LAPACK routines take float32 or float64, got {dtype}.')
    return routines[_PREFIX[dtype] + name]


def _int(value: int):
    return ctypes.byref(ctypes.c_int(value))


def _ptr(t: Tensor) -> _PTR:
    return _PTR(t.data_ptr())


_UPPER, _LEFT = ctypes.c_char_p(b'U'), ctypes.c_char_p(b'L')


def _check(info: ctypes.c_int, name: str) -> None:
    if info.value != 0:
        raise RuntimeError(f'LAPACK {name} failed with info = {info.value}.')


def _workspace_size(call: Callable, dtype: torch.dtype) -> int:
    query = torch.zeros(1, dtype=dtype)
    call(query, -1)
    return max(1, int(query.item()))


def tridiagonalize(a: Tensor, out: Optional[Tensor] = None
                   ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``A = Q T Q^T`` of one symmetric matrix (``?sytrd``), reading its lower
    triangle.

    Args:
        a (Tensor): A symmetric ``(n, n)`` CPU matrix, float32 or float64; not
            modified.
        out (Tensor, optional): A contiguous ``(n, n)`` tensor of ``a``'s dtype
            to hold the reflectors. Defaults to None (a new one).

    Returns:
        tuple[Tensor, Tensor, Tensor, Tensor]: The reflectors (an ``(n, n)``
        buffer for :func:`apply_q`), the diagonal ``(n,)`` and off-diagonal
        ``(n - 1,)`` of ``T``, and the reflectors' scales ``(n - 1,)``.
    """
    n, dtype = a.shape[-1], a.dtype
    sytrd = _routine(dtype, 'sytrd')
    house = out if out is not None else torch.empty_like(
        a, memory_format=torch.contiguous_format)
    house.copy_(a.detach())
    diag = torch.empty(n, dtype=dtype)
    off, tau = (torch.empty(max(n - 1, 1), dtype=dtype) for _ in range(2))
    info = ctypes.c_int(0)

    def call(work: Tensor, size: int) -> None:
        sytrd(_UPPER, _int(n), _ptr(house), _int(n), _ptr(diag), _ptr(off), _ptr(tau),
              _ptr(work), _int(size), ctypes.byref(info))

    size = _workspace_size(call, dtype)
    call(torch.empty(size, dtype=dtype), size)
    _check(info, 'sytrd')
    return house, diag, off[:n - 1], tau[:n - 1]


def tridiagonal_eigh(diag: Tensor, off: Tensor, out: Optional[Tensor] = None
                     ) -> Tuple[Tensor, Tensor]:
    """Eigenvalues and eigenvectors of a symmetric tridiagonal matrix (``?stedc``).

    Args:
        diag (Tensor): The diagonal ``(n,)``.
        off (Tensor): The off-diagonal ``(n - 1,)``.
        out (Tensor, optional): A contiguous ``(n, n)`` tensor to hold the
            eigenvectors. Defaults to None (a new one).

    Returns:
        tuple[Tensor, Tensor]: Eigenvalues ``(n,)`` in ascending order and the
        eigenvectors as the **rows** of an ``(n, n)`` tensor.
    """
    n, dtype = diag.shape[0], diag.dtype
    stedc = _routine(dtype, 'stedc')
    values = diag.clone()
    off = torch.cat([off, off.new_zeros(1)])  # stedc may touch e[n - 1]
    vectors = torch.empty(n, n, dtype=dtype) if out is None else out
    info = ctypes.c_int(0)
    compz = ctypes.c_char_p(b'I')

    def call(work: Tensor, size: int, iwork: Tensor, isize: int) -> None:
        stedc(compz, _int(n), _ptr(values), _ptr(off), _ptr(vectors), _int(n),
              _ptr(work), _int(size), _ptr(iwork), _int(isize), ctypes.byref(info))

    work, iwork = torch.zeros(1, dtype=dtype), torch.zeros(1, dtype=torch.int32)
    call(work, -1, iwork, -1)
    size, isize = max(1, int(work.item())), max(1, int(iwork.item()))
    call(torch.empty(size, dtype=dtype), size,
         torch.empty(isize, dtype=torch.int32), isize)
    _check(info, 'stedc')
    return values, vectors


def _stemr(diag: Tensor, off: Tensor, lower: float, upper: float,
           count: int) -> Tuple[Tensor, Tensor, int]:
    """``?stemr`` on the eigenvalues in ``(lower, upper]``; with ``count`` -1
    only their number (a Sturm count, no eigenvalue computed)."""
    n, dtype = diag.shape[0], diag.dtype
    stemr = _routine(dtype, 'stemr')
    d, e = diag.clone(), torch.cat([off, off.new_zeros(1)])  # both overwritten
    columns = max(count, 1)
    values = torch.empty(n, dtype=dtype)
    vectors = torch.empty(columns, n, dtype=dtype)
    support = torch.empty(2 * columns, dtype=torch.int32)
    work = torch.empty(max(1, 18 * n), dtype=dtype)
    iwork = torch.empty(max(1, 10 * n), dtype=torch.int32)
    found, info, tryrac = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(1)
    scalar = ctypes.c_float if dtype == torch.float32 else ctypes.c_double
    jobz = ctypes.c_char_p(b'V')
    stemr(jobz, ctypes.c_char_p(b'V'), _int(n), _ptr(d), _ptr(e),
          ctypes.byref(scalar(lower)), ctypes.byref(scalar(upper)), _int(0), _int(0),
          ctypes.byref(found), _ptr(values), _ptr(vectors), _int(n), _int(count),
          _ptr(support), ctypes.byref(tryrac), _ptr(work), _int(work.numel()),
          _ptr(iwork), _int(iwork.numel()), ctypes.byref(info))
    _check(info, 'stemr')
    if count < 0:
        return values[:0], vectors[:0], int(vectors.view(-1)[0].item())
    return values[:found.value], vectors[:found.value], found.value


def tridiagonal_count(diag: Tensor, off: Tensor, lower: float, upper: float) -> int:
    """How many eigenvalues of a symmetric tridiagonal matrix lie in
    ``(lower, upper]`` (``?stemr``'s count, from Sturm sequences).

    Args:
        diag (Tensor): The diagonal ``(n,)``, float32 or float64.
        off (Tensor): The off-diagonal ``(n - 1,)``.
        lower (float): Lower end of the interval (excluded).
        upper (float): Upper end (included).

    Returns:
        int: The number of eigenvalues in the interval.
    """
    return _stemr(diag, off, lower, upper, -1)[2]


def tridiagonal_eigh_in(diag: Tensor, off: Tensor, lower: float, upper: float,
                        count: int) -> Tuple[Tensor, Tensor]:
    """The eigenpairs of a symmetric tridiagonal matrix with eigenvalues in
    ``(lower, upper]`` (``?stemr``, multiple relatively robust
    representations: ``O(n)`` work per eigenpair).

    Args:
        diag (Tensor): The diagonal ``(n,)``, float32 or float64.
        off (Tensor): The off-diagonal ``(n - 1,)``.
        lower (float): Lower end of the interval (excluded).
        upper (float): Upper end (included).
        count (int): At least the number of eigenvalues in the interval
            (:func:`tridiagonal_count`).

    Returns:
        tuple[Tensor, Tensor]: The eigenvalues in ascending order and the
        eigenvectors as the **rows** of a ``(found, n)`` tensor.
    """
    values, vectors, _ = _stemr(diag, off, lower, upper, max(count, 0))
    return values, vectors


def apply_q(house: Tensor, tau: Tensor, rhs_t: Tensor, transpose: bool) -> Tensor:
    """``Q @ Y`` or ``Q^T @ Y`` for the ``Q`` of :func:`tridiagonalize` (``?ormtr``).

    Args:
        house (Tensor): The reflectors from :func:`tridiagonalize`.
        tau (Tensor): Their scales.
        rhs_t (Tensor): ``Y`` **transposed**, a C-contiguous ``(k, n)`` tensor;
            overwritten with the result (transposed).
        transpose (bool): ``Q^T @ Y`` instead of ``Q @ Y``.

    Returns:
        Tensor: ``rhs_t``, now ``(Q Y)^T`` or ``(Q^T Y)^T``.
    """
    k, n = rhs_t.shape
    dtype = house.dtype
    if n < 2 or k == 0:
        return rhs_t
    ormtr = _routine(dtype, 'ormtr')
    trans = ctypes.c_char_p(b'T' if transpose else b'N')
    info = ctypes.c_int(0)

    def call(work: Tensor, size: int) -> None:
        ormtr(_LEFT, _UPPER, trans, _int(n), _int(k), _ptr(house), _int(n), _ptr(tau),
              _ptr(rhs_t), _int(n), _ptr(work), _int(size), ctypes.byref(info))

    size = _workspace_size(call, dtype)
    call(torch.empty(size, dtype=dtype), size)
    _check(info, 'ormtr')
    return rhs_t
