"""SOFT-Tiny and PVT-Tiny backbones timed side by side on a loaded CPU.

A shared machine runs other jobs; a backbone whose speed collapses when the
cores are busy is slow in practice. This tool times one image at --size
(default 800 x 1344, the detection setting) through the SOFT-Tiny and
SOFT-Norm-Tiny backbones (ridge inverse, the Newton route measured for this
machine) and mmdet's PVT-Tiny backbone, forward only,
for each number of torch threads (--threads) and each background load
(--loads: that many busy processes spinning on the same cores for the whole
measurement, ended after it or after --max-load-seconds), and with more than
one thread under each OpenMP wait policy (--wait-policies: the library's
default, or OMP_WAIT_POLICY=PASSIVE, where idle threads sleep instead of
spinning). Each (threads, policy, load) cell runs in a fresh process timing
both backbones round-robin (one warm-up, then --repeats calls each; medians).
Prints the CPU model, wall and CPU seconds (all threads, and the part spent
by SOFT's split workers; the rest is the main thread and its OpenMP team) and
each cell's slowdown against the same cell without load; writes load.csv to
--out-dir.

Example:
  python tools/analysis/benchmark_under_load.py --threads 1 2 --loads 0 2
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

MODELS = ('soft-tiny', 'soft-norm-tiny', 'pvt-tiny')
"""The backbones, names of :data:`mmsoft.benchmark.detection.BACKBONES`."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', type=int, nargs=2, default=[800, 1344],
                        metavar=('H', 'W'))
    parser.add_argument('--threads', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--loads', type=int, nargs='+', default=[0, 2],
                        help='numbers of busy background processes')
    parser.add_argument('--wait-policies', nargs='+', default=['default', 'passive'],
                        choices=['default', 'passive'],
                        help='OpenMP wait policies to try with more than one thread')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--max-load-seconds', type=float, default=1800.0,
                        help='the busy processes end by themselves after this')
    parser.add_argument('--out-dir', default='work_dirs/benchmark_under_load')
    parser.add_argument('--force', action='store_true',
                        help='replace load.csv in --out-dir when it exists')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.threads) < 1:
        parser.error(f'--threads must be positive, got {args.threads}.')
    if min(args.loads) < 0:
        parser.error(f'--loads must be >= 0, got {args.loads}.')
    if args.repeats < 1:
        parser.error(f'--repeats must be >= 1, got {args.repeats}.')
    return args


def worker(payload: str) -> None:
    """Time the backbones in this process and print the result as JSON."""
    import torch

    from mmsoft.benchmark.detection import build_backbone, runner
    from mmsoft.benchmark.timing import time_round_robin
    job = json.loads(payload)
    torch.set_num_threads(job['threads'])
    runs = {name: runner(build_backbone(name), 'auto', job['size']) for name in MODELS}
    print(json.dumps(time_round_robin(runs, job['repeats'], split_cpu=True)))


def measure_cell(args, threads: int, policy: str) -> Dict[str, Dict[str, float]]:
    """One fresh process timing every backbone with ``threads`` and ``policy``."""
    env = dict(os.environ)
    env.pop('OMP_WAIT_POLICY', None)
    if policy == 'passive':
        env['OMP_WAIT_POLICY'] = 'PASSIVE'
    job = json.dumps(dict(threads=threads, size=args.size, repeats=args.repeats))
    result = subprocess.run([sys.executable, __file__, '--worker', job], env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f'The timing process failed:\n{result.stderr[-2000:]}')
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker)
        return []
    from mmsoft.utils import check_outputs_in
    try:
        check_outputs_in(args.out_dir, ['load.csv'], args.force)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    from mmsoft.benchmark.background_load import busy_processes
    from mmsoft.benchmark.report import write_csv
    from mmsoft.utils.env import cpu_model
    cells = [(t, p) for t in args.threads
             for p in (args.wait_policies if t > 1 else ['default'])]
    rows = []
    for load in args.loads:
        with busy_processes(load, args.max_load_seconds):
            for threads, policy in cells:
                for model, t in measure_cell(args, threads, policy).items():
                    rows.append(dict(model=model, threads=threads, policy=policy,
                                     load=load, **t))
                    print(f'{model} threads {threads} {policy} load {load}: '
                          f'{t["wall_s"]:.2f} s', flush=True)
    idle = {(r['model'], r['threads'], r['policy']): r['wall_s']
            for r in rows if r['load'] == min(args.loads)}
    for r in rows:
        r['slowdown'] = r['wall_s'] / idle[r['model'], r['threads'], r['policy']]
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / 'load.csv', rows)
    print(f'\nCPU: {cpu_model()}, {os.cpu_count()} logical cores; '
          f'{args.size[0]} x {args.size[1]}, forward, medians of {args.repeats}')
    print(f'| backbone | threads | OpenMP wait | busy processes | wall s | CPU s '
          f'| of which split workers | slowdown vs {min(args.loads)} busy |')
    print('|---|---|---|---|---|---|---|---|')
    order = ('model', 'threads', 'policy', 'load')
    for r in sorted(rows, key=lambda r: tuple(r[k] for k in order)):
        print(f"| {r['model']} | {r['threads']} | {r['policy']} | {r['load']} | "
              f"{r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['split_cpu_s']:.2f} | "
              f"{r['slowdown']:.2f}x |")
    return rows


if __name__ == '__main__':
    main()
