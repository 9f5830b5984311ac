"""Timing and peak-memory measurement of benchmark cases (see
:mod:`mmsoft.benchmark.cases`).

Times are medians of repeated calls after one warm-up; the cases of one suite
and size run round-robin, so they share any load of the machine alike. Peak
memory: on CUDA ``torch.cuda.max_memory_allocated``; on CPU (Linux) the rise
of the peak resident set size of a fresh process (``python -m
mmsoft.benchmark.timing``) over the same call, with glibc's mmap
threshold fixed so that freed buffers are returned.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Tuple

import torch

from mmsoft.ops.fast.threads import WORKER_NAME

from .cases import (
    attention_specs,
    backbone_specs,
    build_case,
)
from .detection import build_backbone, runner
from .report import format_row


def time_case(run: Callable[[bool], None], backward: bool, repeats: int) -> float:
    run(backward)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(backward)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sample_round_robin(runs: Dict[str, Callable[[bool], None]], repeats: int,
                       backward: bool = False,
                       split_cpu: bool = False) -> Dict[str, Dict[str, List[float]]]:
    """Every timed call of several cases, alternated so they share any load alike.

    Each case is called once to warm up, then the cases are called in turn,
    ``repeats`` rounds; call ``i`` of every case belongs to round ``i``.

    Args:
        runs (dict): Name to a closure ``run(backward)`` (as
            :func:`build_case` makes).
        repeats (int): Timed calls of each case, after one warm-up each.
        backward (bool): Time forward and backward (a training step) instead
            of the forward. Defaults to False.
        split_cpu (bool): Also report ``split_cpu_s``. Defaults to False.

    Returns:
        dict: Name to lists, one value per round, of ``wall_s`` (seconds),
        ``cpu_s`` (CPU seconds of this process, all its threads, during the
        call) and, with ``split_cpu``, ``split_cpu_s`` (the part spent by
        mmsoft's split workers, :func:`split_worker_cpu_seconds`).
    """
    for run in runs.values():
        run(backward)  # warm-up
    samples: Dict[str, Dict[str, List[float]]] = {name: {} for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            split = split_worker_cpu_seconds() if split_cpu else 0.0
            wall, cpu = time.perf_counter(), time.process_time()
            run(backward)
            taken = samples[name]
            taken.setdefault('wall_s', []).append(time.perf_counter() - wall)
            taken.setdefault('cpu_s', []).append(time.process_time() - cpu)
            if split_cpu:
                taken.setdefault('split_cpu_s', []).append(
                    split_worker_cpu_seconds() - split)
    return samples


def time_round_robin(runs: Dict[str, Callable[[bool], None]], repeats: int,
                     backward: bool = False,
                     split_cpu: bool = False) -> Dict[str, Dict[str, float]]:
    """The medians of :func:`sample_round_robin` (same arguments): name to
    ``wall_s``, ``cpu_s`` and, with ``split_cpu``, ``split_cpu_s``."""
    return medians(sample_round_robin(runs, repeats, backward, split_cpu))


def medians(samples: Dict[str, Dict[str, List[float]]]) -> Dict[str, Dict[str, float]]:
    """Each list of :func:`sample_round_robin`'s result replaced by its median."""
    return {name: {key: statistics.median(values) for key, values in taken.items()}
            for name, taken in samples.items()}


def paired_ratios(samples: Dict[str, Dict[str, List[float]]],
                  reference: str) -> Dict[str, Tuple[float, float, float]]:
    """Each case's wall time over the reference case's, round by round.

    A shared machine's speed drifts between rounds; a ratio taken within
    each round of :func:`sample_round_robin` cancels what both cases of the
    round shared, where a ratio of the two medians would not.

    Args:
        samples (dict): The result of :func:`sample_round_robin`.
        reference (str): The name of the case the others are divided by.

    Returns:
        dict: Name to ``(median, lowest, highest)`` of its per-round ratios
        (``(1.0, 1.0, 1.0)`` for the reference itself).
    """
    base = samples[reference]['wall_s']
    result = {}
    for name, taken in samples.items():
        ratios = [t / b for t, b in zip(taken['wall_s'], base)]
        result[name] = (statistics.median(ratios), min(ratios), max(ratios))
    return result


def split_worker_cpu_seconds() -> float:
    """CPU seconds used so far by the threads of mmsoft's work split
    (:mod:`mmsoft.ops.fast.threads`), from ``/proc`` (Linux; 0 elsewhere),
    at clock-tick resolution."""
    ticks = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100
    total = 0
    for thread in threading.enumerate():
        if not thread.name.startswith(WORKER_NAME) or thread.native_id is None:
            continue
        try:
            with open(f'/proc/self/task/{thread.native_id}/stat') as f:
                fields = f.read().rpartition(')')[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def peak_memory(spec: dict, backward: bool, device: str) -> float:
    """Peak memory of one call in MiB (see the module docstring); NaN when the
    measuring process fails."""
    if device.startswith('cuda'):
        run = build_case(spec, device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(backward)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    return peak_memory_of(dict(spec=spec), backward)


def peak_memory_of(case: dict, backward: bool) -> float:
    """The rise of the peak resident memory (MiB) over one CPU call of
    ``case`` in a fresh process: ``dict(spec=...)`` (a case of
    :mod:`.cases`) or ``dict(detection=[backbone, inverse, route, [H, W]])``
    (one of :mod:`.detection`); NaN when that process fails."""
    payload = json.dumps(dict(case=case, backward=backward,
                              threads=torch.get_num_threads()))
    # A fixed mmap threshold stops glibc from raising it after large frees,
    # so freed buffers go back to the system and the peak RSS follows the
    # live tensors instead of the heap's high-water mark.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072')
    result = subprocess.run(
        [sys.executable, '-m', 'mmsoft.benchmark.timing', payload],
        capture_output=True, text=True, timeout=3600, env=env)
    if result.returncode != 0:
        return float('nan')
    return float(result.stdout.strip().splitlines()[-1])


def _status_kib(field: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise RuntimeError(f'{field} missing from /proc/self/status')


def measure_one(payload: str) -> None:
    """Child process: print the rise of peak RSS (MiB) over one call.

    The kernel's peak-RSS mark is reset after the model is built (Linux
    ``clear_refs``), so only the call itself counts.
    """
    args = json.loads(payload)
    torch.set_num_threads(args['threads'])
    case = args['case']
    if 'detection' in case:
        backbone, inverse, route, shape = case['detection']
        run = runner(build_backbone(backbone, inverse), route, shape)
    else:
        run = build_case(case['spec'], 'cpu')
    before = _status_kib('VmRSS')
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # reset VmHWM to the current RSS
    run(args['backward'])
    print((_status_kib('VmHWM') - before) / 1024)


def matmul_peak(device: str) -> float:
    """GFLOP/s of a 2048 x 2048 fp32 matrix product."""
    a = torch.randn(2048, 2048, device=device)
    run = lambda backward: (a @ a, torch.cuda.synchronize()  # noqa: E731
                            if device.startswith('cuda') else None)
    seconds = time_case(run, False, 5)
    return 2 * 2048**3 / seconds / 1e9



def run_suites(args) -> List[Dict]:
    specs = []
    if args.suite in ('attention', 'all'):
        specs += attention_specs(args)
    if args.suite in ('backbone', 'all'):
        specs += backbone_specs(args)
    # Cases of one suite are timed round-robin (every case once per repeat),
    # so a load change on a shared machine hits all of them alike.
    groups: Dict[tuple, List[dict]] = {}
    for spec in specs:
        groups.setdefault((spec['kind'], spec['size']), []).append(spec)
    rows = []
    for group in groups.values():
        runs = [build_case(spec, args.device) for spec in group]
        timings = {}
        for backward in (False, True):
            samples = [[] for _ in runs]
            for run in runs:  # warm-up
                run(backward)
            for _ in range(args.repeats):
                for i, run in enumerate(runs):
                    start = time.perf_counter()
                    run(backward)
                    samples[i].append(time.perf_counter() - start)
            timings[backward] = [statistics.median(s) for s in samples]
        del runs
        for i, spec in enumerate(group):
            row = dict(kind=spec['kind'], variant=spec['variant'], size=spec['size'],
                       tokens=spec.get('tokens', ''), forward_s=timings[False][i])
            if True in timings:
                row['fwd_bwd_s'] = timings[True][i]
            if spec['kind'] == 'backbone':
                row['forward_img_s'] = spec['batch'] / row['forward_s']
                row['fwd_bwd_img_s'] = spec['batch'] / row['fwd_bwd_s']
            if args.memory:
                row['forward_mib'] = peak_memory(spec, False, args.device)
                if 'fwd_bwd_s' in row:
                    row['fwd_bwd_mib'] = peak_memory(spec, True, args.device)
            rows.append(row)
            print(format_row(row), flush=True)
    return rows



if __name__ == '__main__':
    measure_one(sys.argv[1])
