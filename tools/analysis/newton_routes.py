"""Measure, keep, reset and print the Newton routes chosen for this machine.

The 'auto' route setting measures the routes of each size class of m (the
landmarks per stage) at a process's first forward of that size and keeps the
choice in memory (mmsoft.ops.fast.route_choice). This tool keeps choices on
disk for later processes, in newton_routes.json under $MMSOFT_CACHE_DIR
(else $XDG_CACHE_HOME/mmsoft, else ~/.cache/mmsoft), under a key naming the
CPU and the torch and SciPy versions:

  (no action)   print the route setting and the kept table, with the times
                each entry measured and how busy the machine was meanwhile
  --measure     measure the size classes of --sizes that have no usable
                entry yet, and keep them
  --remeasure   measure every size class of --sizes again, and keep them
  --reset       remove this machine's entries
  --compare     time every route that runs here at --sizes, without and with
                a backward, for the ridge and back-off starts, and print each
                one's gain over the next best (nothing is kept)

Measure on an idle machine: an entry taken while other processes kept a
quarter of the CPUs busy is marked as loaded.

Examples:
  python tools/analysis/newton_routes.py --measure
  python tools/analysis/newton_routes.py --remeasure --sizes 100 256 1050
  python tools/analysis/newton_routes.py --compare --sizes 96 256 1050
"""
import argparse
import os
from typing import Dict, List

import torch

from mmsoft.ops import NEWTON_VARIANTS
from mmsoft.ops.fast import route_choice
from mmsoft.utils.env import cpu_model, route_report

DEFAULT_SIZES = (96, 192, 384, 768, 1536)
"""One size per class from 64 to 2047 landmarks."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group()
    action.add_argument('--measure', action='store_true',
                        help='measure the size classes without a usable entry, keep')
    action.add_argument('--remeasure', action='store_true',
                        help='measure every size class of --sizes again, keep')
    action.add_argument('--reset', action='store_true',
                        help="remove this machine's entries")
    action.add_argument('--compare', action='store_true',
                        help='time every route at --sizes (nothing is kept)')
    parser.add_argument('--sizes', type=int, nargs='+', default=list(DEFAULT_SIZES),
                        metavar='M', help=f'sizes m (default {DEFAULT_SIZES})')
    parser.add_argument('--rounds', type=int, default=route_choice.ROUNDS,
                        help=f'timed rounds (default {route_choice.ROUNDS})')
    args = parser.parse_args(argv)
    small = [m for m in args.sizes if m < route_choice.MIN_MEASURED]
    if small and not args.compare:
        parser.error(f'--sizes {small}: sizes below {route_choice.MIN_MEASURED} '
                     'take the loop and are not measured.')
    if args.rounds < 1:
        parser.error(f'--rounds must be >= 1, got {args.rounds}.')
    return args


def header() -> str:
    return (f'CPU: {cpu_model()}, {os.cpu_count()} logical cores, '
            f'{torch.get_num_threads()} torch threads; torch {torch.__version__}')


def keep_measurements(sizes: List[int], again: bool, rounds: int) -> Dict[str, dict]:
    """Measure the size classes of ``sizes`` (all, or those without a usable
    entry) and keep them; returns what was measured."""
    usable, _ = route_choice.read_kept()
    measured = {}
    for m in sizes:
        key = str(route_choice.size_class(m))
        if key in measured or (key in usable and not again):
            continue
        measured[key] = route_choice.measure(m, rounds)
        print(f"m = {m}: {measured[key]['route']} {measured[key]['ms']}", flush=True)
    if measured:
        print(f'kept in {route_choice.keep(measured)}')
    return measured


def compare(sizes: List[int], rounds: int) -> List[dict]:
    """Every route's time at each size, start and mode, and the best one's
    gain over the next best."""
    rows = []
    for m in sizes:
        routes = route_choice.candidates(max(m, route_choice.MIN_MEASURED))
        for variant, settings in NEWTON_VARIANTS.items():
            for grad in (False, True):
                ms = route_choice.time_routes(m, routes, rounds, grad=grad, **settings)
                ranked = sorted(ms, key=ms.get)
                gain = ms[ranked[1]] / ms[ranked[0]] if len(ranked) > 1 else 1.0
                rows.append(dict(m=m, variant=variant, grad=grad, ms=ms,
                                 best=ranked[0], gain=gain))
                print(f'm = {m} {variant} {"training" if grad else "forward"}: {ms}',
                      flush=True)
    return rows


def print_table() -> None:
    for name, value in route_report().items():
        print(f'{name}: {value}')


def main(argv=None) -> None:
    args = parse_args(argv)
    print(header(), flush=True)
    if args.compare:
        rows = compare(args.sizes, args.rounds)
        routes = sorted({r for row in rows for r in row['ms']},
                        key=list(route_choice.registered_routes()).index)
        print('\n' + header())
        print('| m | start | mode | ' + ' | '.join(f'{r} ms' for r in routes)
              + ' | fastest | gain over the next |')
        print('|---|---|---|' + '---|' * len(routes) + '---|---|')
        for row in rows:
            times = ' | '.join(f"{row['ms'][r]:.2f}" if r in row['ms'] else '-'
                               for r in routes)
            mode = 'training (factors, 2 applications)' if row['grad'] else 'forward'
            print(f"| {row['m']} | {row['variant']} | {mode} | {times} | "
                  f"{row['best']} | {row['gain']:.2f}x |")
        return
    try:
        if args.reset:
            print(f"removed this machine's entries from {route_choice.reset()}")
        elif args.measure or args.remeasure:
            keep_measurements(args.sizes, args.remeasure, args.rounds)
    except (OSError, ValueError) as err:
        raise SystemExit(f'newton_routes.py: error: cannot write the kept table: '
                         f'{err}') from None
    route_choice.forget_measurements()
    print_table()


if __name__ == '__main__':
    main()
