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
This file is the command line; the cases, the timing and memory measurement
and the report are mmsoft/benchmark/{cases,timing,report}.py. Backbones at
detection and segmentation sizes against PVT-Tiny:
tools/analysis/benchmark_detection.py.

Examples:
  python tools/analysis/benchmark.py --suite attention --sizes 224 512 1024 --memory
  python tools/analysis/benchmark.py --suite backbone --batch 16
  python tools/analysis/benchmark.py --suite backbone --archs tiny small medium
  python tools/analysis/benchmark.py --suite backbone --batch 1 --memory \
      --sizes 224 384 512 --variants soft spatial-reduction performer softmax-sdpa
  python tools/analysis/benchmark.py --suite all --out-dir work_dirs/benchmark
"""
import argparse
import os
from pathlib import Path

import torch

from mmsoft.benchmark.cases import (  # noqa: F401  (the cases, for tests)
    DEFAULT_SIZES,
    DEFAULT_VARIANTS,
    PEERS,
    QUADRATIC,
    SOFT_VARIANTS,
    attention_specs,
    backbone_specs,
)
from mmsoft.benchmark.report import (  # noqa: F401
    plot,
    summarise,
    write_csv,
)
from mmsoft.benchmark.timing import matmul_peak, run_suites
from mmsoft.utils import check_outputs_in
from mmsoft.utils.env import cpu_model

OUTPUTS = ('benchmark.csv', 'benchmark.png', 'summary.txt')
"""What the tool writes to --out-dir."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--suite', default='attention',
                        choices=['attention', 'backbone', 'all'])
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
    parser.add_argument('--force', action='store_true',
                        help='replace the CSV, plot and summary in --out-dir '
                        'when they exist')
    args = parser.parse_args(argv)
    return args



def main(argv=None) -> None:
    args = parse_args(argv)
    try:
        check_outputs_in(args.out_dir, OUTPUTS, args.force)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f'--threads must be >= 1, got {args.threads}.')
        torch.set_num_threads(args.threads)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peak = matmul_peak(args.device)
    header = (f'device {args.device} ({cpu_model()}), {torch.get_num_threads()} '
              f'threads, fp32 matmul peak {peak:.1f} GFLOP/s')
    print(header, flush=True)
    rows = run_suites(args)
    columns = ['kind', 'variant', 'size', 'tokens', 'forward_s', 'fwd_bwd_s',
               'forward_img_s', 'fwd_bwd_img_s', 'forward_mib', 'fwd_bwd_mib']
    csv_file, png_file, summary_file = (out_dir / name for name in OUTPUTS)
    write_csv(csv_file, rows, columns)
    plot(rows, png_file)
    summary = [header] + summarise(rows, peak)
    summary_file.write_text('\n'.join(summary) + '\n')
    print('\n'.join(summary))
    print(f'Wrote {csv_file} and {png_file}.')


if __name__ == '__main__':
    os.environ.setdefault('PYTHONWARNINGS', 'ignore')
    main()

