"""SOFT-Tiny and SOFT-Norm-Tiny against mmdet's PVT-Tiny at detection sizes.

One image per call, random weights: forward at each --shape (default
800 x 1344, the COCO configs' input, and 512 x 512, the ADE20K crop) and a
training step (forward and backward of the summed feature maps) at each
--train-shape (default the same two). Every SOFT backbone runs with each
Newton inverse of --inverses (ridge: mmsoft's training default; backoff: the released
checkpoints') and each Newton route of --routes (auto: the route measured
for this machine; eigh, tridiagonal or loop force one, for comparison).
The cases of one shape and mode run round-robin (one warm-up each, then
--repeats calls; medians), so they share any load of the machine alike.
Prints the CPU, its fp32 matmul peak, the thread count and the Newton route
in use, then a Markdown table with each case's time over PVT-Tiny's, taken
within each round (the median over the rounds, and the lowest and highest:
a round's ratio cancels a drift of the machine's speed that both shared),
with --memory each training step's peak resident memory (a fresh process
per case), and a second table: one profiled call's time by kind of work
(the Newton inverse, attention products, convolutions, linear layers,
norms and element-wise operations, copies, the rest) and the call's
multiply-accumulates as a share of the matmul peak. Writes detection.csv to
--out-dir.

Examples:
  python tools/analysis/benchmark_detection.py
  python tools/analysis/benchmark_detection.py --routes auto eigh --repeats 5
  python tools/analysis/benchmark_detection.py --shape 800 1344 --no-train
  python tools/analysis/benchmark_detection.py --memory --train-shape 512 512
"""
import argparse
import os
from pathlib import Path
from typing import List

import torch

from mmsoft.benchmark.breakdown import KINDS, macs_by_kind, time_by_kind
from mmsoft.benchmark.detection import BACKBONES, INVERSES, build_runs, case_names
from mmsoft.benchmark.report import write_csv
from mmsoft.benchmark.timing import (
    matmul_peak,
    medians,
    paired_ratios,
    peak_memory_of,
    sample_round_robin,
)
from mmsoft.ops import newton_route_names
from mmsoft.utils import check_outputs_in
from mmsoft.utils.env import cpu_model, format_route_report


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--shape', type=int, nargs=2, action='append',
                        metavar=('H', 'W'),
                        help='forward input size (repeatable; default 800 1344 and '
                        '512 512)')
    parser.add_argument('--train-shape', type=int, nargs=2, action='append',
                        metavar=('H', 'W'),
                        help='training-step input size (repeatable; default 512 512 '
                        'and 800 1344)')
    parser.add_argument('--no-train', action='store_true',
                        help='skip the training step')
    parser.add_argument('--backbones', nargs='+', default=list(BACKBONES),
                        choices=list(BACKBONES))
    parser.add_argument('--inverses', nargs='+', default=list(INVERSES),
                        choices=list(INVERSES))
    parser.add_argument('--routes', nargs='+', default=['auto'],
                        choices=list(newton_route_names()))
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--threads', type=int,
                        help="torch threads (default: torch's)")
    parser.add_argument('--no-breakdown', action='store_true',
                        help='skip the time by kind of work (one profiled call and '
                        'one counted call per case)')
    parser.add_argument('--memory', action='store_true',
                        help="peak memory of each case's training step, each in a "
                        'fresh process')
    parser.add_argument('--out-dir', default='work_dirs/benchmark_detection')
    parser.add_argument('--force', action='store_true',
                        help='replace detection.csv in --out-dir when it exists')
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f'--repeats must be >= 1, got {args.repeats}.')
    if args.threads is not None and args.threads < 1:
        parser.error(f'--threads must be >= 1, got {args.threads}.')
    args.shape = args.shape or [[800, 1344], [512, 512]]
    args.train_shape = args.train_shape or [[512, 512], [800, 1344]]
    return args


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    try:
        check_outputs_in(args.out_dir, ['detection.csv'], args.force)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if args.threads:
        torch.set_num_threads(args.threads)
    peak = matmul_peak('cpu')
    header = (f'CPU: {cpu_model()}, {os.cpu_count()} logical cores, '
              f'{torch.get_num_threads()} torch threads, fp32 matmul peak '
              f'{peak:.0f} GFLOP/s; torch {torch.__version__}; '
              f'medians of {args.repeats}, round-robin')
    print(header, flush=True)
    cases = case_names(args.backbones, args.inverses, args.routes)
    jobs = [(tuple(shape), False) for shape in args.shape]
    if not args.no_train:
        jobs += [(tuple(shape), True) for shape in args.train_shape]
    rows = []
    for shape, train in jobs:
        runs = build_runs(cases, shape)
        samples = sample_round_robin(runs, args.repeats, train)
        ratios = paired_ratios(samples, 'PVT-Tiny') if 'PVT-Tiny' in samples else {}
        mode = 'training step' if train else 'forward'
        for label, t in medians(samples).items():
            vs_pvt = ratios.get(label, (float('nan'),) * 3)
            rows.append(dict(input=f'{shape[0]} x {shape[1]}', mode=mode,
                             backbone=label, wall_s=t['wall_s'], cpu_s=t['cpu_s'],
                             vs_pvt=vs_pvt[0], vs_pvt_low=vs_pvt[1],
                             vs_pvt_high=vs_pvt[2]))
            if not args.no_breakdown:
                rows[-1].update(breakdown(runs[label], train, peak))
            if args.memory and train:
                rows[-1]['peak_mib'] = training_peak_mib(cases, label, shape)
            print(f'{rows[-1]["input"]} {mode} {label}: {rows[-1]["wall_s"]:.2f} s',
                  flush=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / 'detection.csv', rows)
    print('\n' + header)
    print(format_route_report())
    memory = ' | peak MiB' if args.memory else ''
    print('| input | mode | backbone | wall s | CPU s | time / PVT-Tiny time '
          f'(rounds: lowest-highest){memory} |')
    print('|---|---|---|---|---|---|' + ('---|' if memory else ''))
    for r in rows:
        peak_mib = f" | {r['peak_mib']:.0f}" if 'peak_mib' in r else (
            ' | -' if memory else '')
        print(f"| {r['input']} | {r['mode']} | {r['backbone']} | {r['wall_s']:.2f} "
              f"| {r['cpu_s']:.2f} | {r['vs_pvt']:.2f} "
              f"({r['vs_pvt_low']:.2f}-{r['vs_pvt_high']:.2f}){peak_mib} |")
    if not args.no_breakdown:
        print_breakdown(rows)
    return rows


def breakdown(run, train: bool, peak: float) -> dict:
    """One profiled call's seconds by kind of work, and one counted call's
    multiply-accumulates, for a row of the table."""
    seconds = time_by_kind(lambda: run(train))
    macs = macs_by_kind(lambda: run(train))
    row = {f's_{kind}': seconds[kind] for kind in KINDS}
    row.update(profiled_s=seconds['total'], gmacs=macs['total'] / 1e9,
               peak_share=2 * macs['total'] / seconds['total'] / (peak * 1e9))
    return row


def print_breakdown(rows: List[dict]) -> None:
    print('\nTime by kind of work (seconds of one profiled call; the profiler adds '
          'a little), and the call\'s multiply-accumulates at the achieved rate:')
    print('| input | mode | backbone | ' + ' | '.join(KINDS)
          + ' | total | GMAC | share of the matmul peak |')
    print('|---|---|---|' + '---|' * (len(KINDS) + 3))
    for r in rows:
        kinds = ' | '.join(f"{r[f's_{kind}']:.3f}" for kind in KINDS)
        print(f"| {r['input']} | {r['mode']} | {r['backbone']} | {kinds} | "
              f"{r['profiled_s']:.3f} | {r['gmacs']:.1f} | {r['peak_share']:.0%} |")


def training_peak_mib(cases, label: str, shape) -> float:
    """Peak resident memory of one training step of case ``label``, in a
    fresh process (MiB)."""
    _, backbone, inverse, route = next(c for c in cases if c[0] == label)
    return peak_memory_of(dict(detection=[backbone, inverse, route, list(shape)]),
                          True)


if __name__ == '__main__':
    main()
