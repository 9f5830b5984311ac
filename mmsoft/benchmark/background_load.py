"""Busy processes that load the CPU for a bounded time, for timing under load.

A controlled stand-in for the other jobs of a shared machine: ``n`` processes
that spin in pure Python (no threads, no memory traffic to speak of) until
they are stopped or their deadline passes, whichever comes first, so that a
killed benchmark never leaves them running for long.
"""
import multiprocessing as mp
import time
from contextlib import contextmanager
from typing import Iterator, List


def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


@contextmanager
def busy_processes(n: int, max_seconds: float = 900.0) -> Iterator[List[mp.Process]]:
    """Run ``n`` spinning processes for the ``with`` block.

    Args:
        n (int): Number of busy processes (0 for none).
        max_seconds (float): Each process ends by itself after this many
            seconds even if the block is still running. Defaults to 900.

    Yields:
        list: The started processes.

    Raises:
        ValueError: ``n`` is negative or ``max_seconds`` not positive.
    """
    if n < 0:
        raise ValueError(f'The number of busy processes must be >= 0, got {n}.')
    if max_seconds <= 0:
        raise ValueError(f'max_seconds must be positive, got {max_seconds}.')
    # fork: the spinner touches nothing of the parent's, and a spawned child
    # would first import this package (seconds) before loading anything.
    ctx = mp.get_context('fork' if 'fork' in mp.get_all_start_methods() else 'spawn')
    deadline = time.monotonic() + max_seconds
    procs = [ctx.Process(target=_spin, args=(deadline, ), daemon=True)
             for _ in range(n)]
    for proc in procs:
        proc.start()
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
