"""Work split over single-threaded workers: same results, thread count restored."""
import multiprocessing as mp
import os
import threading
import time

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmsoft.ops import (
    InverseCfg,
    gaussian_kernel,
    newton_inverse,
    newton_iterate,
    soft_lowrank_attention,
    use_newton_route,
    use_work_split,
)
from mmsoft.ops.fast import spectral
from mmsoft.ops.fast.kernel_tiles import landmark_kernel
from mmsoft.ops.fast.spectrum import newton_spectrum
from mmsoft.ops.fast.threads import (
    caller_on_one_thread,
    map_single_threaded,
    row_spans,
    split_workers,
)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def symmetric(batch, m, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, m, m, generator=gen, dtype=dtype)
    return x @ x.transpose(-2, -1) / m


def test_workers_run_one_thread_each_concurrently_and_the_count_is_restored(two_threads):
    both_started = threading.Barrier(2, timeout=30)

    def probe(item):
        both_started.wait()  # deadlocks (BrokenBarrierError) if run one by one
        return item, threading.get_ident(), torch.get_num_threads()

    results = map_single_threaded(probe, [0, 1])
    assert [r[0] for r in results] == [0, 1]
    assert len({r[1] for r in results}) == 2
    assert threading.get_ident() not in {r[1] for r in results}
    assert all(r[2] == 1 for r in results)
    assert torch.get_num_threads() == 2


def test_calls_with_fewer_pieces_reuse_the_workers(two_threads):
    def idents(n):
        started = threading.Barrier(n, timeout=30)

        def probe(_):
            started.wait()
            return threading.get_ident()

        return set(map_single_threaded(probe, range(n)))

    three = idents(3)
    assert len(three) == 3
    assert idents(2) <= three  # no new threads for a smaller call


def test_thread_count_is_restored_when_a_worker_fails(two_threads):
    def fail(item):
        raise RuntimeError(f'piece {item} failed')

    with pytest.raises(RuntimeError, match='piece 0 failed'):
        map_single_threaded(fail, [0, 1])
    assert torch.get_num_threads() == 2


def test_workers_build_no_autograd_graph(two_threads):
    x = torch.ones(3, requires_grad=True)
    outs = map_single_threaded(lambda s: x * s, [1.0, 2.0])
    assert all(out.grad_fn is None for out in outs)


@pytest.mark.parametrize('batch,m', [(5, 40), (6, 30), (1, 25)])
def test_split_eigh_factors_are_torch_eigh(two_threads, batch, m):
    a = symmetric(batch, m)
    alpha = torch.full((batch,), 0.5, dtype=torch.float64)
    values, vectors = spectral._factorize(a, alpha, 0.0, 0, 'eigh')
    ref_values, _ = torch.linalg.eigh(a)
    assert values.shape == (batch, m) and vectors.shape == (batch, m, m)
    # No Newton step: v_0 = alpha * l per eigenvalue.
    torch.testing.assert_close(values, newton_spectrum(ref_values, 0.5, 0.0, 0),
                               rtol=1e-12, atol=1e-12)
    rebuilt = (vectors * (values / 0.5).unsqueeze(-2)) @ vectors.transpose(-2, -1)
    torch.testing.assert_close(rebuilt, a, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('route', ['eigh', 'tridiagonal'])
def test_newton_through_split_routes_equals_the_loop(two_threads, route):
    a = symmetric(4, 120, seed=1)
    with use_newton_route(route):
        torch.testing.assert_close(newton_inverse(a), newton_iterate(a),
                                   rtol=1e-9, atol=1e-9)


class _Recorder(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_no_split_under_a_dispatch_mode_or_off_cpu(two_threads):
    x = torch.zeros(2, 4, 4)
    assert split_workers(x) == 2
    with _Recorder():
        assert split_workers(x) == 1
    assert split_workers(torch.zeros(2, 4, 4, device='meta')) == 1


def test_row_spans_cover_the_rows_once():
    for n, parts in [(10, 3), (7, 2), (2, 4), (1, 1)]:
        spans = row_spans(n, parts)
        assert len(spans) == min(n, parts)
        assert [i for lo, hi in spans for i in range(lo, hi)] == list(range(n))


@pytest.mark.parametrize('tile_elements', [12 * 3 * 7, 12 * 3 * 40])
def test_split_tiles_equal_one_thread(monkeypatch, tile_elements):
    # 22 or 4 tiles over 150 rows, shared by two workers or run by one thread.
    monkeypatch.setenv('MMSOFT_TILE_ELEMENTS', str(tile_elements))
    gen = torch.Generator().manual_seed(0)
    q, v = torch.randn(3, 150, 16, generator=gen), torch.randn(3, 150, 8, generator=gen)
    k = torch.randn(3, 12, 16, generator=gen) * 0.7
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                outs.append(soft_lowrank_attention(q, k, v, InverseCfg(normalize=True)))
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)


def test_landmark_kernel_split_over_heads_is_the_gaussian_kernel(two_threads, monkeypatch):
    import mmsoft.ops.fast.kernel_tiles as kernel_products
    k = torch.randn(5, 40, 8, generator=torch.Generator().manual_seed(0))
    pieces = []

    def spy(fn, items, **kwargs):
        pieces.append(len(items))
        return map_single_threaded(fn, items, **kwargs)

    monkeypatch.setattr(kernel_products, 'map_single_threaded', spy)
    with torch.no_grad():
        split = landmark_kernel(k)
    with_grad = landmark_kernel(k.clone().requires_grad_())
    assert pieces == [2]  # the five heads in two parts, only without autograd
    torch.testing.assert_close(split, gaussian_kernel(k, k), rtol=0, atol=0)
    assert with_grad.grad_fn is not None
    torch.testing.assert_close(with_grad.detach(), split, rtol=1e-6, atol=1e-7)


def _eigh_in_child(a, queue):
    with use_newton_route('eigh'):
        queue.put(newton_inverse(a).shape[-1])


def test_a_forked_child_gets_its_own_workers(two_threads):
    # The matrices are made before the fork: any multi-threaded torch
    # operation in a child forked after the parent ran one hangs in OpenMP.
    a = symmetric(4, 30)
    with use_newton_route('eigh'):
        newton_inverse(a)  # the parent's pool exists
    ctx = mp.get_context('fork')
    queue = ctx.Queue()
    child = ctx.Process(target=_eigh_in_child, args=(a, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail('the eigh route hung in a forked child')
    assert child.exitcode == 0 and queue.get(timeout=5) == 30


def test_split_worker_cpu_counts_the_workers_and_not_the_caller(two_threads):
    from mmsoft.benchmark.timing import split_worker_cpu_seconds

    def spin(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    map_single_threaded(spin, [0.0, 0.0])  # the workers exist
    before = split_worker_cpu_seconds()
    spin(0.5)  # the calling thread's CPU is not the workers'
    assert split_worker_cpu_seconds() - before < 0.1
    map_single_threaded(spin, [0.3, 0.3])
    assert split_worker_cpu_seconds() - before >= 0.5


def test_the_caller_runs_one_thread_while_the_split_keeps_its_workers(two_threads):
    x = torch.zeros(4)
    both_started = threading.Barrier(2, timeout=30)

    def probe(_):
        both_started.wait()  # deadlocks (BrokenBarrierError) if run one by one
        return threading.get_ident()

    other = []
    with caller_on_one_thread(x):
        assert torch.get_num_threads() == 1 and split_workers(x) == 2
        with caller_on_one_thread(x):  # nested: no change, nothing restored early
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
        assert len(set(map_single_threaded(probe, [0, 1]))) == 2
        thread = threading.Thread(target=lambda: other.append(torch.get_num_threads()))
        thread.start()
        thread.join()
    assert other == [2]  # other threads keep the process's count
    assert torch.get_num_threads() == 2 and split_workers(x) == 2
    with pytest.raises(RuntimeError, match='inside'):
        with caller_on_one_thread(x):
            raise RuntimeError('inside')
    assert torch.get_num_threads() == 2
    with use_work_split(False), caller_on_one_thread(x):  # no split: untouched
        assert torch.get_num_threads() == 2


def _choose_in_child(queue):
    from mmsoft.ops.fast import route_choice
    queue.put(route_choice.choose('cpu', 1100))


def test_a_child_forked_while_a_route_is_measured_measures_its_own(monkeypatch):
    # GNU OpenMP is not fork-safe: a child forked after a parallel torch
    # operation hangs at its first one (plain torch too), so the child here
    # runs one thread; mmsoft's own state (the pool, the route choices, the
    # BLAS window) starts anew in it instead of waiting on the parent's locks.
    from mmsoft.ops.fast import route_choice
    parent, measuring, release = os.getpid(), threading.Event(), threading.Event()

    def measure(m, rounds=1):
        if os.getpid() == parent:
            measuring.set()
            release.wait(60)  # holds the choice's lock until released
        return dict(route='loop', m=m, ms={'loop': 1.0}, busy=None, when='now')

    monkeypatch.setattr(route_choice, 'measure', measure)
    route_choice.forget_measurements()
    holder = threading.Thread(target=route_choice.choose, args=('cpu', 70))
    holder.start()
    try:
        assert measuring.wait(60)
        ctx = mp.get_context('fork')
        queue = ctx.Queue()
        child = ctx.Process(target=_choose_in_child, args=(queue,))
        child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            pytest.fail("a forked child waited on the parent's route lock")
        assert child.exitcode == 0 and queue.get(timeout=5) == 'loop'
    finally:
        release.set()
        holder.join()
        route_choice.forget_measurements()
