"""Time and memory of SOFT against its reference path and its peers.

Suites (--suite):
  attention  one stage-1 attention layer (C=64, 2 heads, r=8) alone, for image
             sizes --sizes (tokens N = (size/4)^2): SOFT fast, reference,
             chunked, landmark-capped and Newton-loop paths,
             and the peers (softmax SDPA, spatial reduction, Performer,
             Nystromformer); quadratic ones only up to --max-quadratic-tokens.
  backbone   whole SOFT backbones (--archs, default tiny), batch --batch, at
             image sizes --sizes (default 224): the fast and reference paths
             by default, or any --variants (the peers plug into the same
             backbone in place of SOFT attention, the paper's Table 1
             setting); forward and forward+backward throughput (images/s).
  detection  one 800 x 1344 image through the SOFT-Tiny backbone (the
             faithful Newton iterate as evaluated by default and by the
             plain loop, landmark cap, exact solve) and mmdet's PVT-Tiny
             backbone, forward only; each SOFT variant's relative deviation
             from the default's outputs is reported beside its time.
Times are medians of --repeats runs after one warm-up; the cases of a suite
and size run round-robin, so they share any load of the machine alike.
Peak memory (--memory):
on CUDA torch.cuda.max_memory_allocated; on CPU (Linux) the rise of the peak
resident set size of a fresh process over the same call, with glibc's mmap
threshold fixed so that freed buffers are returned (it still includes
allocator overhead). The machine's fp32 matmul peak (GFLOP/s) is measured first.
On a CPU shared with other jobs use --threads 1: with more threads than free
cores, OpenMP barriers wait on descheduled threads and single calls take 10-100x
longer at random (measured: 0.03 s vs 2 s for the same call).
Writes benchmark.csv and benchmark.png to --out-dir and prints a table.

Examples:
  python tools/analysis/benchmark.py --suite attention --sizes 224 512 1024 --memory
  python tools/analysis/benchmark.py --suite backbone --batch 16
  python tools/analysis/benchmark.py --suite backbone --archs tiny small medium
  python tools/analysis/benchmark.py --suite backbone --batch 1 --memory \
      --sizes 224 384 512 --variants soft spatial-reduction performer softmax-sdpa
  python tools/analysis/benchmark.py --suite all --out-dir work_dirs/benchmark
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

SOFT_VARIANTS = {
    'soft': dict(type='SOFTAttention'),
    'soft-reference': dict(type='SOFTAttention', impl='reference', chunk_size=None),
    'soft-chunked': dict(type='SOFTAttention', chunk_size=4096),
    'soft-capped': dict(type='SOFTAttention', max_landmarks=49),
    'soft-newton-loop': dict(type='SOFTAttention', inverse=dict(use_eig=False)),
}
PEERS = {
    'softmax-sdpa': dict(type='SoftmaxAttention2d'),
    'softmax-plain': dict(type='SoftmaxAttention2d', use_sdpa=False),
    'spatial-reduction': dict(type='SpatialReductionAttention'),
    'performer': dict(type='PerformerAttention'),
    'nystromformer': dict(type='NystromAttention'),
}
QUADRATIC = ('softmax-sdpa', 'softmax-plain')
DEFAULT_SIZES = {'attention': [224, 448, 640, 1024], 'backbone': [224]}
DEFAULT_VARIANTS = {'attention': list(SOFT_VARIANTS) + list(PEERS),
                    'backbone': ['soft', 'soft-reference']}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--suite', default='attention',
                        choices=['attention', 'backbone', 'detection', 'all'])
    parser.add_argument('--sizes', type=int, nargs='+',
                        help='image sizes (default: 224 448 640 1024 for the '
                        'attention suite, 224 for the backbone suite)')
    parser.add_argument('--variants', nargs='+',
                        choices=list(SOFT_VARIANTS) + list(PEERS),
                        help='attentions to run (default: all of them for the '
                        'attention suite, soft and soft-reference for the '
                        'backbone suite)')
    parser.add_argument('--batch', type=int, default=16,
                        help='batch of the backbone suite')
    parser.add_argument('--archs', nargs='+', default=['tiny'],
                        choices=['tiny', 'small', 'medium', 'large', 'huge'],
                        help='SOFT sizes of the backbone suite')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--max-quadratic-tokens', type=int, default=16384,
                        help='largest N for the O(N^2) softmax attentions')
    parser.add_argument('--memory', action='store_true',
                        help='also measure peak memory (slower on CPU)')
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--threads', type=int,
                        help="CPU threads (torch.set_num_threads); torch's default "
                        'when not given')
    parser.add_argument('--out-dir', default='work_dirs/benchmark')
    parser.add_argument('--measure-one', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ----------------------------------------------------------------- the cases
def attention_cfg(name: str) -> dict:
    """A fresh config of the SOFT variant or peer called ``name``."""
    return dict(PEERS.get(name) or SOFT_VARIANTS[name])


def build_case(spec: dict, device: str) -> Callable[[bool], None]:
    """A closure running one forward (and backward when asked) of ``spec``."""
    import mmsoft  # noqa: F401
    from mmsoft.models.attention import build_token_mixer
    torch.manual_seed(0)
    kind = spec['kind']
    if kind == 'attention':
        side = spec['size'] // 4
        module = build_token_mixer(attention_cfg(spec['variant']), 64, 2,
                                   sr_ratio=8, conv_size=9)
        inputs = (torch.randn(1, side * side, 64, device=device), (side, side))
    elif kind == 'backbone':
        from mmsoft.models import SOFT
        module = SOFT(arch=spec['arch'], attn_cfg=attention_cfg(spec['attn']))
        size = spec['size']
        inputs = (torch.randn(spec['batch'], 3, size, size, device=device), )
    else:  # detection
        height, width = 800, 1344
        if spec['variant'] == 'pvt-tiny':
            from mmdet.models.backbones import PyramidVisionTransformer
            module = PyramidVisionTransformer(num_layers=[2, 2, 2, 2])
        else:
            from mmsoft.models import SOFT
            module = SOFT(arch='tiny-norm', out_type='featmap',
                          out_indices=(0, 1, 2, 3), img_size=224,
                          attn_cfg=dict(type='SOFTAttention', normalize=True,
                                        **spec['attn']))
        inputs = (torch.randn(1, 3, height, width, device=device), )
    module = module.to(device)

    def run(backward: bool):
        """One call; returns the forward's outputs (None with backward)."""
        out = None
        if backward:
            loss = module(*inputs)
            loss = loss if isinstance(loss, torch.Tensor) else sum(
                o.sum() for o in loss)
            loss.sum().backward()
        else:
            with torch.no_grad():
                out = module(*inputs)
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        return out
    return run


def time_case(run: Callable[[bool], None], backward: bool, repeats: int) -> float:
    run(backward)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(backward)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_memory(spec: dict, backward: bool, device: str) -> float:
    """Peak memory of one call in MiB (see the module docstring)."""
    if device.startswith('cuda'):
        run = build_case(spec, device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run(backward)
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    payload = json.dumps(dict(spec=spec, backward=backward,
                              threads=torch.get_num_threads()))
    # A fixed mmap threshold stops glibc from raising it after large frees,
    # so freed buffers go back to the system and the peak RSS follows the
    # live tensors instead of the heap's high-water mark.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072')
    result = subprocess.run([sys.executable, __file__, '--measure-one', payload],
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
    run = build_case(args['spec'], 'cpu')
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


# ----------------------------------------------------------------- the suites
def _sizes_and_variants(args, suite: str) -> List[tuple]:
    """``(size, stage-1 tokens, variant)`` of a suite; quadratic attentions
    only up to ``--max-quadratic-tokens``."""
    cases = []
    for size in args.sizes or DEFAULT_SIZES[suite]:
        for variant in args.variants or DEFAULT_VARIANTS[suite]:
            n = (size // 4)**2
            if variant not in QUADRATIC or n <= args.max_quadratic_tokens:
                cases.append((size, n, variant))
    return cases


def attention_specs(args) -> List[dict]:
    return [dict(kind='attention', variant=variant, size=size, tokens=n)
            for size, n, variant in _sizes_and_variants(args, 'attention')]


def backbone_specs(args) -> List[dict]:
    return [dict(kind='backbone', variant=f'{arch} {variant}', arch=arch,
                 attn=variant, batch=args.batch, size=size, tokens=n)
            for arch in args.archs
            for size, n, variant in _sizes_and_variants(args, 'backbone')]


DEFAULT_DETECTION = 'soft-tiny newton'


def detection_specs(args) -> List[dict]:
    variants = {'soft-tiny newton': dict(), 'soft-tiny newton_loop':
                dict(inverse=dict(use_eig=False)), 'soft-tiny capped-64':
                dict(max_landmarks=64),
                'soft-tiny solve': dict(inverse=dict(method='solve'))}
    specs = [dict(kind='detection', variant=k, attn=v, size=800)
             for k, v in variants.items()]
    return specs + [dict(kind='detection', variant='pvt-tiny', size=800)]


def run_suites(args) -> List[Dict]:
    specs = []
    if args.suite in ('attention', 'all'):
        specs += attention_specs(args)
    if args.suite in ('backbone', 'all'):
        specs += backbone_specs(args)
    if args.suite in ('detection', 'all'):
        specs += detection_specs(args)
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
            if group[0]['kind'] == 'detection' and backward:
                continue
            samples = [[] for _ in runs]
            warm = [run(backward) for run in runs]  # warm-up
            if group[0]['kind'] == 'detection':
                deviations = detection_deviations(group, warm)
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
            if spec['kind'] == 'detection' and deviations[i] is not None:
                row['deviation'] = deviations[i]
            if args.memory:
                row['forward_mib'] = peak_memory(spec, False, args.device)
                if 'fwd_bwd_s' in row:
                    row['fwd_bwd_mib'] = peak_memory(spec, True, args.device)
            rows.append(row)
            print(format_row(row), flush=True)
    return rows


def detection_deviations(group: List[dict], outputs: list) -> List:
    """Relative deviation of each SOFT variant's features from the default's."""
    names = [spec['variant'] for spec in group]
    if DEFAULT_DETECTION not in names:
        return [None] * len(group)
    ref = outputs[names.index(DEFAULT_DETECTION)]
    ref_norm = math.sqrt(sum(float(r.double().pow(2).sum()) for r in ref))
    deviations = []
    for name, out in zip(names, outputs):
        if not name.startswith('soft'):
            deviations.append(None)
            continue
        diff = sum(float((o.double() - r.double()).pow(2).sum())
                   for o, r in zip(out, ref))
        deviations.append(math.sqrt(diff) / ref_norm)
    return deviations


def format_row(row: Dict) -> str:
    cells = [f'{row["kind"]:<10}', f'{row["variant"]:<22}', f'{row["size"]:>5}']
    for key in ('forward_s', 'fwd_bwd_s', 'forward_img_s', 'fwd_bwd_img_s',
                'forward_mib', 'fwd_bwd_mib', 'deviation'):
        value = row.get(key)
        cells.append(f'{key}={value:.4g}' if isinstance(value, float) else '')
    return ' | '.join(c for c in cells if c)


def loglog_slope(xs: List[float], ys: List[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum(
        (a - mx)**2 for a in lx)


def summarise(rows: List[Dict], peak: float) -> List[str]:
    lines = [f'fp32 matmul peak: {peak:.1f} GFLOP/s']
    by = {(r['kind'], r['variant'], r['size']): r for r in rows}
    for (kind, variant, size), fast in by.items():
        ref = by.get((kind, f'{variant}-reference', size))
        if kind == 'backbone' and variant.endswith(' soft') and ref:
            arch = variant.split()[0]
            lines.append(
                f'SOFT-{arch} {size} batch: forward {fast["forward_img_s"]:.1f} img/s '
                f'({fast["forward_img_s"] / ref["forward_img_s"]:.2f}x reference), '
                f'fwd+bwd {fast["fwd_bwd_img_s"]:.1f} img/s '
                f'({fast["fwd_bwd_img_s"] / ref["fwd_bwd_img_s"]:.2f}x reference)')
    for kind in ('attention', 'backbone'):
        variants = dict.fromkeys(r['variant'] for r in rows if r['kind'] == kind)
        for variant in variants:
            pts = sorted((r for r in rows
                          if r['kind'] == kind and r['variant'] == variant),
                         key=lambda r: r['tokens'])
            if len(pts) < 2:
                continue
            xs = [p['tokens'] for p in pts]
            text = f'{kind} {variant}: log-log slope of fwd+bwd time vs N ' \
                   f'{loglog_slope(xs, [p["fwd_bwd_s"] for p in pts]):.2f}'
            if 'fwd_bwd_mib' in pts[0]:
                mem = [max(p['fwd_bwd_mib'], 1e-3) for p in pts]
                text += f', of memory {loglog_slope(xs, mem):.2f}'
            lines.append(text)
    biggest = max((r['size'] for r in rows if r['kind'] == 'attention'), default=None)
    chunked = by.get(('attention', 'soft-chunked', biggest))
    reference = by.get(('attention', 'soft-reference', biggest))
    if chunked and reference and 'fwd_bwd_mib' in chunked:
        lines.append(f'attention at {biggest} px: chunked fwd+bwd peak '
                     f'{chunked["fwd_bwd_mib"]:.0f} MiB vs reference '
                     f'{reference["fwd_bwd_mib"]:.0f} MiB')
    pvt = by.get(('detection', 'pvt-tiny', 800))
    for r in rows:
        if r['kind'] == 'detection' and pvt and r is not pvt:
            dev = (f', deviation {r["deviation"]:.1e}'
                   if r.get('deviation') is not None else '')
            lines.append(f'800x1344 {r["variant"]}: {r["forward_s"]:.2f} s = '
                         f'{r["forward_s"] / pvt["forward_s"]:.2f}x PVT-Tiny '
                         f'({pvt["forward_s"]:.2f} s){dev}')
    return lines


PLOT_TITLES = {'attention': 'Attention at stage-1 width (C=64, 2 heads, r=8)',
               'backbone': 'Whole backbones'}


def plot(rows: List[Dict], path: Path) -> None:
    """Forward+backward time (and memory) against tokens, one row of panels
    per suite with more than one size."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    keys = [k for k in ('fwd_bwd_s', 'fwd_bwd_mib') if any(k in r for r in rows)]
    keys = keys or ['fwd_bwd_s']
    kinds = [k for k in PLOT_TITLES
             if len({r['size'] for r in rows if r['kind'] == k}) > 1]
    kinds = kinds or ['attention']
    fig, axes = plt.subplots(len(kinds), len(keys), squeeze=False,
                             figsize=(6 * len(keys), 4.5 * len(kinds)))
    for kind, row_axes in zip(kinds, axes):
        points = [r for r in rows if r['kind'] == kind]
        for ax, key in zip(row_axes, keys):
            for variant in dict.fromkeys(r['variant'] for r in points):
                pts = sorted((r['tokens'], r.get(key)) for r in points
                             if r['variant'] == variant and r.get(key) is not None)
                if pts:
                    ax.plot(*zip(*pts), marker='o', label=variant)
            ax.set_xscale('log')
            ax.set_yscale('log')
            ax.set_xlabel('stage-1 tokens N')
            unit = 'seconds' if key.endswith('_s') else 'MiB'
            ax.set_ylabel(f'forward+backward {unit}')
            ax.set_title(PLOT_TITLES[kind], fontsize=10)
            ax.grid(True, which='both', alpha=0.3)
        if points:
            row_axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.measure_one:
        measure_one(args.measure_one)
        return
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f'--threads must be >= 1, got {args.threads}.')
        torch.set_num_threads(args.threads)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peak = matmul_peak(args.device)
    print(f'device {args.device}, {torch.get_num_threads()} threads, '
          f'fp32 matmul peak {peak:.1f} GFLOP/s', flush=True)
    rows = run_suites(args)
    columns = ['kind', 'variant', 'size', 'tokens', 'forward_s', 'fwd_bwd_s',
               'forward_img_s', 'fwd_bwd_img_s', 'forward_mib', 'fwd_bwd_mib',
               'deviation']
    with open(out_dir / 'benchmark.csv', 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out_dir / 'benchmark.png')
    summary = summarise(rows, peak)
    (out_dir / 'summary.txt').write_text('\n'.join(summary) + '\n')
    print('\n'.join(summary))
    print(f'Wrote {out_dir / "benchmark.csv"} and {out_dir / "benchmark.png"}.')


if __name__ == '__main__':
    os.environ.setdefault('PYTHONWARNINGS', 'ignore')
    main()
