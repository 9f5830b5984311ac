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

What it changes, all of it per thread (no other thread sees a count move):
the pool's workers (threads named :data:`WORKER_NAME`) run torch on one
thread each, by lowering their own OpenMP count (threadpoolctl's OpenMP
controllers, a per-thread setting) and their own MKL count
(``MKL_Set_Num_Threads_Local`` of the MKL that torch links statically,
looked up in torch's ``libtorch_cpu``: threadpoolctl does not list an MKL
linked into another library, and without it a worker's MKL kept the
process's count, 2 in a 2-thread process); :func:`caller_on_one_thread`
does the same for the calling thread inside the attention and puts it back.
Where torch's OpenMP runtime cannot be reached the work is not split.
"""
import contextlib
import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar

import torch
from threadpoolctl import ThreadpoolController
from torch import Tensor

from ..execution import eager_cpu, work_split

T = TypeVar('T')
R = TypeVar('R')

WORKER_NAME = 'mmsoft-split'
"""The name prefix of the split workers' threads."""


@functools.lru_cache(maxsize=None)
def _openmp_controllers() -> tuple:
    """threadpoolctl's controllers of the OpenMP runtimes loaded with torch
    (each count they set is the calling thread's own)."""
    return tuple(ThreadpoolController().select(user_api='openmp').lib_controllers)


@functools.lru_cache(maxsize=None)
def _torch_mkl_local() -> Optional[Callable[[int], int]]:
    """``MKL_Set_Num_Threads_Local`` of the MKL inside torch's ``libtorch_cpu``
    (returns the thread's previous local count, 0 for none), or None."""
    name = {'posix': 'libtorch_cpu.so'}.get(os.name)
    path = os.path.join(os.path.dirname(torch.__file__), 'lib', name or '')
    if not name or not os.path.isfile(path):
        return None
    function = getattr(ctypes.CDLL(path), 'MKL_Set_Num_Threads_Local', None)
    if function is not None:
        function.restype, function.argtypes = ctypes.c_int, [ctypes.c_int]
    return function


def can_split() -> bool:
    """Whether a thread's own OpenMP count can be set here (else no split)."""
    return bool(_openmp_controllers())


def _limit_this_thread(count: int) -> Callable[[], None]:
    """Set the calling thread's OpenMP and MKL counts to ``count``; returns
    the function that puts them back."""
    restore = []
    for controller in _openmp_controllers():
        previous = controller.get_num_threads()
        controller.set_num_threads(count)
        restore.append(functools.partial(controller.set_num_threads, previous))
    mkl = _torch_mkl_local()
    if mkl is not None:
        restore.append(functools.partial(mkl, mkl(count)))

    def undo() -> None:
        for step in reversed(restore):
            step()
    return undo


def _one_thread() -> None:
    """A worker's initializer: torch (OpenMP, MKL) runs one thread here.

    torch reads its thread count for a thread at the thread's first parallel
    operation, from the process default; that happens first, then the
    worker's own counts are lowered to one, which no other thread sees.
    """
    torch.get_num_threads()
    _limit_this_thread(1)


class _Pool:
    """The shared pool of one process (a forked child makes its own: it
    inherits the executor and the lock but not the threads)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.executor: Optional[ThreadPoolExecutor] = None
        self.workers = 0


_POOL = _Pool()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The shared pool of at least ``workers`` single-threaded workers, made on
    first use, again in a forked child and when more workers are asked for
    (never to fewer: calls with fewer pieces reuse it). Every worker is
    started (and set to one thread) before the pool is used."""
    global _POOL
    if _POOL.pid != os.getpid():
        _POOL = _Pool()
    state = _POOL
    with state.lock:
        if state.executor is None or state.workers < workers:
            if state.executor is not None:
                state.executor.shutdown(wait=False)
            state.executor = ThreadPoolExecutor(
                workers, thread_name_prefix=WORKER_NAME, initializer=_one_thread)
            started = threading.Barrier(workers + 1)
            for _ in range(workers):  # start every worker now, each once
                state.executor.submit(started.wait)
            started.wait()
            state.workers = workers
        return state.executor


def split_workers(x: Tensor) -> int:
    """How many single-threaded workers share work on ``x`` (1: no split).

    torch's intra-op thread count for a CPU tensor in plain eager code
    (:func:`~mmsoft.ops.execution.eager_cpu`) while
    :func:`~mmsoft.ops.execution.work_split` is on and a thread's count can
    be set (:func:`can_split`; inside :func:`caller_on_one_thread`, the
    count outside it), else 1.
    """
    if not eager_cpu(x) or not work_split() or not can_split():
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
    OpenMP and MKL counts change, as on the workers, and are put back on
    exit; a no-op where the work is not split.

    Args:
        x (Tensor): A tensor of the work (:func:`split_workers` reads it).
    """
    workers = split_workers(x)
    if workers <= 1 or getattr(_CALLER, 'workers', None):
        yield
        return
    undo = _limit_this_thread(1)
    _CALLER.workers = workers
    try:
        yield
    finally:
        _CALLER.workers = None
        undo()


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
    dispatch modes, :mod:`~mmsoft.ops.execution` settings).

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


def map_over_batch(fn: Callable[[int], None], batch: int, like: Tensor) -> None:
    """``fn(i)`` for every matrix ``i`` of a batch, a matrix at a time on
    :func:`split_workers` workers (each takes the next matrix when done:
    decompositions of one size differ in cost), or in the calling thread
    where the work is not split."""
    workers = min(split_workers(like), batch)
    if workers <= 1:
        with torch.no_grad():
            for i in range(batch):
                fn(i)
        return
    map_single_threaded(fn, range(batch), workers=workers)


def row_spans(n: int, parts: int) -> List[Tuple[int, int]]:
    """``parts`` contiguous, near-equal ``(start, stop)`` spans of ``range(n)``
    (fewer when ``n < parts``)."""
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
