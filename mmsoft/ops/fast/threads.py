"""CPU work split into whole pieces, one single-threaded worker per piece.

torch parallelises each operation over its intra-op threads and joins them
at the end of it; a multi-threaded LAPACK eigensolver joins them thousands
of times per matrix (its tridiagonal reduction is a long chain of small
parallel steps), and SOFT's tiled kernel runs a few short parallel
operations per tile. On an idle machine that costs little. On a shared one
a thread is often descheduled, every join waits for it while its partners
spin, and SOFT-Tiny's default path at 800 x 1344 went from 3.5 s to 10-86 s
under two busy processes on two cores (the eigendecompositions alone from
1.9 s to 5-74 s). Handing each thread a whole piece of the work (some of a
batch's matrices, a span of the kernel's rows) joins once per piece
instead, and is as fast when idle.
"""
import contextlib
import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

import torch
from torch import Tensor

from .execution import eager_cpu, work_split

T = TypeVar('T')
R = TypeVar('R')

WORKER_NAME = 'mmsoft-split'
"""The name prefix of the split workers' threads."""
_POOL: Optional[ThreadPoolExecutor] = None
_POOL_KEY: Tuple[int, int] = (0, 0)  # (process id, workers) the pool was made for
_POOL_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _thread_local_setters() -> Tuple[Callable[[int], int], ...]:
    """OpenMP's ``omp_set_num_threads`` (a per-thread setting) and, where
    torch carries MKL, ``MKL_Set_Num_Threads_Local``, both as torch's own
    ``libtorch_cpu`` resolves them (other packages may load OpenMP runtimes
    of their own, e.g. scikit-learn's libgomp); empty where torch's OpenMP
    runtime is not found."""
    try:
        with open('/proc/self/maps') as maps:
            paths = {line.split()[-1] for line in maps if '.so' in line}
    except OSError:
        return ()
    libraries = sorted(p for p in paths
                       if os.path.basename(p).startswith('libtorch_cpu'))
    if not libraries:
        return ()
    # Looked up through torch's library handle, a symbol resolves in that
    # library and then in the libraries it was linked against.
    library = ctypes.CDLL(libraries[0])
    setters = []
    for name, restype in (('omp_set_num_threads', None),
                          ('MKL_Set_Num_Threads_Local', ctypes.c_int)):
        function = getattr(library, name, None)
        if function is not None:
            function.restype, function.argtypes = restype, [ctypes.c_int]
            setters.append(function)
    has_openmp = any(s.__name__ == 'omp_set_num_threads' for s in setters)
    return tuple(setters) if has_openmp else ()


def _one_thread() -> None:
    """A worker's initializer: torch (OpenMP, MKL) runs one thread here.

    torch reads its thread count for a thread at the thread's first parallel
    operation, from the process default; that happens first. Then the
    worker's own OpenMP (and MKL) setting is lowered to one thread, which no
    other thread sees. Where no OpenMP runtime can be reached,
    ``torch.set_num_threads(1)`` does it, which also lowers the process
    default until :func:`_pool` puts it back.
    """
    torch.get_num_threads()
    for setter in _thread_local_setters():
        setter(1)
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _pool(workers: int) -> ThreadPoolExecutor:
    """The shared pool of at least ``workers`` single-threaded workers, made on
    first use, again after a fork and when more workers are asked for (never
    to fewer: calls with fewer pieces reuse it). Every worker is started (and
    set to one thread) before the pool is used."""
    global _POOL, _POOL_KEY
    pid = os.getpid()
    with _POOL_LOCK:
        if _POOL is None or _POOL_KEY[0] != pid or _POOL_KEY[1] < workers:
            if _POOL is not None and _POOL_KEY[0] == pid:
                _POOL.shutdown(wait=False)
            # A forked child inherits the executor but not its threads.
            threads = torch.get_num_threads()
            _POOL = ThreadPoolExecutor(workers, thread_name_prefix=WORKER_NAME,
                                       initializer=_one_thread)
            started = threading.Barrier(workers + 1)
            for _ in range(workers):  # start every worker now, each once
                _POOL.submit(started.wait)
            started.wait()
            if not _thread_local_setters():
                torch.set_num_threads(threads)  # the process default, as it was
            _POOL_KEY = (pid, workers)
        return _POOL


def split_workers(x: Tensor) -> int:
    """How many single-threaded workers share work on ``x`` (1: no split).

    torch's intra-op thread count for a CPU tensor in plain eager code
    (:func:`~.execution.eager_cpu`) while :func:`~.execution.work_split` is
    on (inside :func:`caller_on_one_thread`, the count outside it), else 1.
    """
    if not eager_cpu(x) or not work_split():
        return 1
    return getattr(_CALLER, 'workers', None) or torch.get_num_threads()


_CALLER = threading.local()  # workers: the split's size inside caller_on_one_thread


@contextlib.contextmanager
def caller_on_one_thread(x: Tensor) -> Iterator[None]:
    """The calling thread runs its own torch operations on one thread, while
    work on ``x`` is still split over :func:`split_workers` workers.

    Between the split pieces of SOFT's attention the caller runs short
    operations (the Newton step's scalars, the augmented queries, sums of
    the split parts). With torch's threads each is a parallel step whose
    threads join at its end; on a shared machine one of them is often
    descheduled and its partner spins until it returns, at every step. On
    one thread they never wait for each other. Only the calling thread's own
    OpenMP (and MKL) setting changes, as on the workers (:func:`_one_thread`),
    and is put back on exit; a no-op where the work is not split or torch's
    OpenMP runtime cannot be reached.

    Args:
        x (Tensor): A tensor of the work (:func:`split_workers` reads it).
    """
    workers = split_workers(x)
    setters = _thread_local_setters()
    if workers <= 1 or not setters or getattr(_CALLER, 'workers', None):
        yield
        return
    restore = []
    for setter in setters:
        previous = setter(1)  # MKL's returns its previous local count
        restore.append((setter, workers if previous is None else previous))
    _CALLER.workers = workers
    try:
        yield
    finally:
        _CALLER.workers = None
        for setter, value in restore:
            setter(value)


def _without_grad(fn: Callable[[T], R]) -> Callable[[T], R]:
    def run(item: T) -> R:
        with torch.no_grad():
            return fn(item)
    return run


def map_single_threaded(fn: Callable[[T], R], items: Sequence[T],
                        on_worker: bool = False,
                        workers: Optional[int] = None) -> List[R]:
    """``[fn(item) for item in items]`` on one-thread workers.

    With more than one item (or ``on_worker``) the items run concurrently on
    a shared pool of workers that each run torch on one thread; the calling
    thread and every other thread keep their settings. ``fn`` runs without
    autograd and must not depend on thread-local state (grad mode, autocast,
    dispatch modes, :mod:`~.execution` settings).

    Args:
        fn (callable): The work for one item.
        items (Sequence): The pieces.
        on_worker (bool): Run a single item on a worker too (one thread)
            instead of in the calling thread. Defaults to False.
        workers (int, optional): Run at most this many items at once, each
            worker taking the next item when it is done with one (so pieces
            of uneven cost balance). Defaults to None: one worker per item.

    Returns:
        list: The results in the order of ``items``.
    """
    if len(items) == 0 or (len(items) == 1 and not on_worker):
        with torch.no_grad():
            return [fn(item) for item in items]
    count = len(items) if workers is None else max(1, min(workers, len(items)))
    run = _without_grad(fn)
    if count == len(items):
        return list(_pool(count).map(run, items))
    results: List[R] = [None] * len(items)  # type: ignore[list-item]
    order = iter(range(len(items)))
    lock = threading.Lock()

    def take_turns(_) -> None:
        while True:
            with lock:
                index = next(order, None)
            if index is None:
                return
            results[index] = run(items[index])

    list(_pool(count).map(take_turns, range(count)))
    return results


def parallel_eigh(a: Tensor) -> Tuple[Tensor, Tensor]:
    """Eigenvalues and eigenvectors of symmetric matrices, as ``torch.linalg.eigh``.

    The batch is cut into one contiguous part per :func:`split_workers` and
    each part is solved on its own single-threaded worker
    (:func:`map_single_threaded`); a single matrix, or no split, is
    ``torch.linalg.eigh(a)``. No autograd graph is built.

    Args:
        a (Tensor): Symmetric matrices of shape ``(..., m, m)``; the lower
            triangle is read.

    Returns:
        tuple[Tensor, Tensor]: Eigenvalues ``(..., m)`` in ascending order
        and eigenvectors ``(..., m, m)`` as columns.
    """
    m = a.shape[-1]
    parts = [p for p in a.detach().reshape(-1, m, m).tensor_split(split_workers(a))
             if len(p)]
    if len(parts) <= 1:
        with torch.no_grad():
            return torch.linalg.eigh(a)
    results = map_single_threaded(torch.linalg.eigh, parts)
    values = torch.cat([r[0] for r in results]).reshape(a.shape[:-1])
    vectors = torch.cat([r[1] for r in results]).reshape(a.shape)
    return values, vectors


def row_spans(n: int, parts: int) -> List[Tuple[int, int]]:
    """``parts`` contiguous, near-equal ``(start, stop)`` spans of ``range(n)``
    (fewer when ``n < parts``)."""
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
