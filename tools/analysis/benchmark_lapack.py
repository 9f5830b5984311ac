"""How the tridiagonal Newton route calls LAPACK, against the alternatives.

The route (mmsoft/ops/fast/spectral.py) calls SciPy's ?sytrd, ?stedc, ?stemr
and ?ormtr through mmsoft's ctypes binding (mmsoft/ops/fast/lapack.py), on
split workers, with SciPy's BLAS on one thread while they run. This tool
times, in float32 on m x m landmark kernels:

- each routine through the binding and through scipy.linalg.lapack's wrapper
  (?stevd for ?stedc, which it lacks; ?ormtr has no wrapper), one call at a
  time and two calls at once from two threads, SciPy's BLAS on one thread;
- the route's solve of --heads matrices split over two workers, with SciPy's
  BLAS on one thread (as the route runs it) and at its own count (no window),
  and whether three runs give the same bits.

Prints the CPU and a Markdown table (medians of --repeats, round-robin).

Example:
  python tools/analysis/benchmark_lapack.py --sizes 256 1050
"""
import argparse
import os
import statistics
import threading
import time
from typing import Callable, Dict, List

import numpy as np
import scipy.linalg.lapack as scipy_lapack
import torch
from threadpoolctl import threadpool_limits

from mmsoft.ops.fast import lapack, route_choice, spectral
from mmsoft.ops.fast.threads import map_single_threaded
from mmsoft.ops.newton import initial_scale
from mmsoft.utils.env import cpu_model

LARGE = 16
"""Eigenpairs asked of ?stemr (the deflated solve takes 2 to 34)."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=int, nargs='+', default=[1050])
    parser.add_argument('--heads', type=int, default=10)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.heads < 2:
        parser.error('--repeats must be >= 1 and --heads >= 2.')
    return args


def in_two_threads(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` twice at once, from two new threads."""
    def run():
        threads = [threading.Thread(target=fn) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return run


def time_cases(cases: Dict[str, Callable[[], object]],
               repeats: int) -> Dict[str, float]:
    """Median milliseconds of each case, round-robin after a warm-up."""
    times: Dict[str, List[float]] = {name: [] for name in cases}
    for round_ in range(repeats + 1):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def routine_cases(m: int) -> Dict[str, Callable[[], object]]:
    """Each routine by the binding and by scipy.linalg.lapack's wrapper."""
    a = route_choice.landmark_kernel_of_size(m)[0].contiguous()
    _, diag, off, _ = lapack.tridiagonalize(a)
    a_np, d_np, e_np = a.numpy(), diag.numpy(), off.numpy()
    lwork = int(scipy_lapack.ssytrd_lwork(m, lower=1)[0])
    upper = float(diag.abs().max() + 2 * off.abs().max()) + 1
    values = torch.linalg.eigvalsh(a.double())
    lower = float(values[-LARGE - 1] + values[-LARGE]) / 2
    e_full = np.r_[e_np, np.float32(0)]
    single = {
        '?sytrd, binding': lambda: lapack.tridiagonalize(a),
        '?sytrd, scipy.linalg.lapack': lambda: scipy_lapack.ssytrd(
            a_np, lower=1, lwork=lwork),
        '?stedc, binding': lambda: lapack.tridiagonal_eigh(diag, off),
        '?stevd, scipy.linalg.lapack': lambda: scipy_lapack.sstevd(d_np.copy(),
                                                                   e_np.copy()),
        f'?stemr ({LARGE} eigenpairs), binding': lambda: lapack.tridiagonal_eigh_in(
            diag, off, lower, upper, LARGE),
        # range 1: the eigenvalues in (lower, upper]; the routine overwrites
        # d and e, so each call gets copies, as the binding's calls do.
        f'?stemr ({LARGE} eigenpairs), scipy.linalg.lapack':
            lambda: scipy_lapack.sstemr(d_np.copy(), e_full.copy(), 1, lower, upper,
                                        0, 0),
    }
    both = {f'{name}, two threads at once': in_two_threads(fn)
            for name, fn in single.items()}
    return {**single, **both}


def split_solve(m: int, heads: int, window: bool) -> Callable[[], torch.Tensor]:
    """The tridiagonal route's solve of ``heads`` matrices on two workers,
    with the route's BLAS window or without it."""
    a3 = route_choice.landmark_kernel_of_size(m).expand(heads, m, m).contiguous()
    rhs3 = torch.randn(heads, m, 32, generator=torch.Generator().manual_seed(1))
    alphas = initial_scale(a3, 0.0, backoff=True, group=heads).flatten().tolist()
    solve = spectral._MATRIX_ROUTES['tridiagonal'].solve

    def run() -> torch.Tensor:
        out = torch.empty_like(rhs3)
        pieces = range(heads)
        if window:
            with lapack.single_threaded():
                map_single_threaded(lambda i: solve(out[i], a3[i], rhs3[i], alphas[i],
                                                    0.0, 20), pieces, workers=2)
        else:
            map_single_threaded(lambda i: solve(out[i], a3[i], rhs3[i], alphas[i],
                                                0.0, 20), pieces, workers=2)
        return out
    return run


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    header = (f'CPU: {cpu_model()}, {os.cpu_count()} logical cores; SciPy BLAS '
              f'threads {lapack._scipy_blas()[0][0]()}; medians of '
              f'{args.repeats}, round-robin')
    print(header, flush=True)
    rows = []
    for m in args.sizes:
        with threadpool_limits(1, user_api='blas'):
            for name, ms in time_cases(routine_cases(m), args.repeats).items():
                rows.append(dict(m=m, case=name, ms=ms, same=''))
        runs = {f'tridiagonal solve of {args.heads} heads, two workers, '
                f'{label}': split_solve(m, args.heads, window)
                for label, window in (('SciPy BLAS on one thread', True),
                                      ('SciPy BLAS at its count', False))}
        for name, ms in time_cases(runs, args.repeats).items():
            outs = [runs[name]() for _ in range(3)]
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            rows.append(dict(m=m, case=name, ms=ms, same='yes' if same else 'no'))
        print(f'm = {m} done', flush=True)
    print('\n' + header)
    print('| m | case | ms | three runs, same bits |')
    print('|---|---|---|---|')
    for r in rows:
        print(f"| {r['m']} | {r['case']} | {r['ms']:.2f} | {r['same']} |")
    return rows


if __name__ == '__main__':
    main()
