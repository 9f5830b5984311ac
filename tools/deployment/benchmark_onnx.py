"""Forward time of SOFT on CPU: ONNX Runtime against torch eager and torch.compile.

Cases: SOFT-<arch> backbones at 224 x 224 with a batch of --batch (class-token
output) and one 800 x 1344 image (the four feature maps, as detection uses
them). Each case is exported to ONNX twice at that fixed size
(tools/deployment/pytorch2onnx.py's export): with standard operators only,
and with --newton-node (each Newton inverse one SOFTNewtonApply node, run by
mmsoft.deployment.ort_session), and compiled once with torch.compile
(inductor); the four runners are timed round-robin (one warm-up, median of
--repeats), so that the ratios come from the same run and the same machine
load. Eager, torch.compile and the node take the default CPU route of the
Newton iterate (one spectral decomposition per head from 64 landmarks, the
route measured per machine); the standard graph evaluates the 20 Newton steps
as 40 matrix products per head. Each runner's largest relative output
difference from eager is printed too.

Examples:
  python tools/deployment/benchmark_onnx.py
  python tools/deployment/benchmark_onnx.py --cases 224 --repeats 5 --threads 2
"""
import argparse
import os.path as osp
import statistics
import tempfile
import time
from typing import Callable, Dict, List

import torch
import torch.nn as nn

from mmsoft.utils.env import cpu_model, format_route_report

CASES = {'224': ((224, 224), 'cls_token'), '800x1344': ((800, 1344), 'featmap')}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--arch', default='tiny', help='SOFT arch (default tiny)')
    parser.add_argument('--cases', nargs='+', default=list(CASES), choices=list(CASES))
    parser.add_argument('--batch', type=int, default=16,
                        help='batch of the 224 case (default 16)')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--threads', type=int,
                        help="threads of torch and ONNX Runtime (default: torch's)")
    return parser.parse_args(argv)


class _Outputs(nn.Module):
    """The backbone's outputs as a flat tuple."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, images: torch.Tensor):
        return tuple(self.backbone(images))


def runners(arch: str, shape, out_type: str, batch: int, threads: int,
            folder: str) -> Dict[str, Callable]:
    """Eager, compiled and ONNX Runtime forwards of one case, built once."""
    from mmsoft.deployment import export_module, ort_session
    from mmsoft.models import SOFT
    torch.manual_seed(0)
    backbone = SOFT(arch=arch, out_type=out_type,
                    out_indices=(0, 1, 2, 3) if out_type == 'featmap' else -1)
    backbone.init_weights()
    model = _Outputs(backbone).eval()
    images = torch.randn(batch, 3, *shape)
    sessions = {
        name: ort_session(export_module(model, images,
                                        osp.join(folder, f'{out_type}_{node}.onnx'),
                                        newton_node=node), threads)
        for name, node in (('ONNX Runtime', False),
                           ('ONNX Runtime, Newton node', True))}
    compiled = torch.compile(model)

    def ort_runner(session):
        feed = {session.get_inputs()[0].name: images.numpy()}
        return lambda: tuple(torch.from_numpy(o) for o in session.run(None, feed))

    return {'torch eager': lambda: model(images),
            'torch.compile': lambda: compiled(images),
            **{name: ort_runner(session) for name, session in sessions.items()}}


def measure(cases: Dict[str, Callable], repeats: int) -> Dict[str, List[float]]:
    """Round-robin timings in seconds after one warm-up call each."""
    times: Dict[str, List[float]] = {name: [] for name in cases}
    with torch.no_grad():
        for run in cases.values():
            run()
        for _ in range(repeats):
            for name, run in cases.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    print(f'CPU: {cpu_model()}, {threads} threads; torch {torch.__version__}, '
          f'arch {args.arch}, fp32, median of {args.repeats} after a warm-up')
    print(format_route_report())
    print('| input | runner | forward (s) | images/s | time / eager time '
          '| rel. diff. from eager |')
    print('|---|---|---|---|---|---|', flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for key in args.cases:
            shape, out_type = CASES[key]
            batch = args.batch if key == '224' else 1
            cases = runners(args.arch, shape, out_type, batch, threads, folder)
            with torch.no_grad():
                reference = cases['torch eager']()
                diffs = {name: max(float((a - e).abs().max() / e.abs().max())
                                   for a, e in zip(run(), reference))
                         for name, run in cases.items()}
            times = measure(cases, args.repeats)
            medians = {name: statistics.median(t) for name, t in times.items()}
            for name, median in medians.items():  # each case as soon as it is done
                print(f'| {shape[0]} x {shape[1]}, batch {batch} | {name} '
                      f'| {median:.3f} | {batch / median:.1f} '
                      f'| {median / medians["torch eager"]:.2f} | {diffs[name]:.1e} |',
                      flush=True)


if __name__ == '__main__':
    main()
