"""Check SOFT on a CUDA GPU: numerics against the CPU, mixed precision, speed.

Three parts, each printed as a table with the GPU's name:

1. Numerics: forward and backward of the SOFT-Tiny and SOFT-Norm-Tiny
   backbones (ridge and back-off inverse, random weights, one --check-size
   image) in float32 on the device (TF32 off) against the same model in
   float64 on the CPU: the largest relative difference of the four feature
   maps, of the input's gradient and of the parameters' gradients. The GPU
   evaluates the Newton iterate as matrix products (its route there).
2. Mixed precision: --amp-iters training iterations of
   configs/soft_tiny_digits.py (scikit-learn's digits, written to a temporary
   folder) with mmengine's AmpOptimWrapper in float16 and in bfloat16; every
   logged loss must be finite.
3. Speed: forward of SOFT-Tiny against mmdet's PVT-Tiny at 224 x 224 with a
   batch of 64 and at 800 x 1344 with one image, fp32, with
   torch.cuda.synchronize() around each call (median of --repeats after a
   warm-up, round-robin).

Exits 1 when a check fails, 2 when there is no CUDA device. --device cpu
--quick runs the same code on the CPU with small sizes (a dry run of the
script itself; the speed table then means nothing).

Examples:
  python tools/analysis/gpu_check.py
  python tools/analysis/gpu_check.py --device cpu --quick
"""
import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import torch

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-4  # float32 on the device against float64 on the CPU


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--device', default='cuda')
    parser.add_argument('--check-size', type=int, nargs=2, default=[320, 480],
                        metavar=('H', 'W'), help='input of the numerics check')
    parser.add_argument('--amp-iters', type=int, default=20)
    parser.add_argument('--repeats', type=int, default=10)
    parser.add_argument('--quick', action='store_true',
                        help='small sizes and few iterations (a dry run)')
    return parser.parse_args(argv)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def numerics(device: str, size: Tuple[int, int]) -> List[dict]:
    """Device float32 against CPU float64, forward and backward."""
    from mmsoft.models import SOFT
    rows = []
    for arch in ('tiny', 'tiny-norm'):
        for newton in ('ridge', 'backoff'):
            torch.manual_seed(0)
            ref_model = SOFT(arch=arch, out_type='featmap', out_indices=(0, 1, 2, 3),
                             newton=newton).double().eval()
            model = SOFT(arch=arch, out_type='featmap', out_indices=(0, 1, 2, 3),
                         newton=newton).eval()
            model.load_state_dict(ref_model.state_dict())
            model.to(device)
            gen = torch.Generator().manual_seed(1)
            image = torch.randn(1, 3, *size, generator=gen, dtype=torch.float64)
            # A fixed random linear loss: gradients of order one everywhere.
            weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64)
                       for o in ref_model(image)]
            results = []
            for net, x in ((ref_model, image.clone()),
                           (model, image.float().to(device))):
                x.requires_grad_(True)
                outs = net(x)
                sum((o * w.to(o)).sum() for o, w in zip(outs, weights)).backward()
                grads = {n: p.grad for n, p in net.named_parameters()
                         if p.grad is not None}
                results.append((outs, x.grad, grads))
            (ref_outs, ref_x, ref_p), (outs, x_grad, p_grad) = results
            rows.append(dict(
                backbone=f"SOFT-{'Norm-' if arch == 'tiny-norm' else ''}Tiny {newton}",
                outputs=max(_relative(o, r) for o, r in zip(outs, ref_outs)),
                input_grad=_relative(x_grad, ref_x),
                param_grads=_relative(
                    torch.cat([p_grad[n].flatten().cpu() for n in ref_p]),
                    torch.cat([g.flatten() for g in ref_p.values()]))))
    return rows


def amp_training(device: str, iters: int) -> List[dict]:
    """``iters`` iterations of the digits classifier under each AMP dtype."""
    from mmengine.config import Config
    from mmengine.runner import Runner

    import mmsoft  # noqa: F401
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / 'digits'
        subprocess.run([sys.executable, str(REPO / 'tools/dataset_converters/'
                                            'prepare_digits.py'), str(data)],
                       check=True, capture_output=True)
        for dtype in ('float16', 'bfloat16'):
            cfg = Config.fromfile(str(REPO / 'configs/soft_tiny_digits.py'))
            for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
                cfg[loader].dataset.data_root = str(data)
            cfg.work_dir = str(Path(folder) / dtype)
            cfg.train_cfg = dict(by_epoch=False, max_iters=iters,
                                 val_interval=iters + 1)
            if device == 'cpu':  # the dry run: a small batch
                cfg.train_dataloader.batch_size = 4
            cfg.param_scheduler = None
            cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
            cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=-1,
                                                save_last=False)
            cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.dtype = dtype
            cfg.experiment_name = f'gpu_check_{dtype}'
            if device == 'cpu':  # the dry run: mmengine's AMP wrapper wants CUDA
                cfg.optim_wrapper.type = 'mmsoft.CPUAmpOptimWrapper'
                cfg.optim_wrapper.pop('dtype')
            runner = Runner.from_cfg(cfg)
            runner.train()
            losses = [float(v) for v in
                      runner.message_hub.get_scalar('train/loss').data[0]]
            rows.append(dict(dtype=dtype, iterations=len(losses), first=losses[0],
                             last=losses[-1],
                             finite=all(math.isfinite(v) for v in losses)))
    return rows


def speed(device: str, repeats: int, quick: bool) -> List[dict]:
    """SOFT-Tiny against PVT-Tiny, forward, with synchronisation."""
    from mmsoft.benchmark.detection import build_backbone
    from mmsoft.models import SOFT

    def sync() -> None:
        if device.startswith('cuda'):
            torch.cuda.synchronize()

    cases = [((2, 64, 64), 'cls'), ((1, 128, 192), 'featmap')] if quick else [
        ((64, 224, 224), 'cls'), ((1, 800, 1344), 'featmap')]
    rows = []
    for (batch, height, width), kind in cases:
        torch.manual_seed(0)
        soft = (SOFT(arch='tiny') if kind == 'cls' else build_backbone('soft-tiny'))
        models = {'SOFT-Tiny': soft.eval().to(device),
                  'PVT-Tiny': build_backbone('pvt-tiny').to(device)}
        x = torch.randn(batch, 3, height, width, device=device)
        times: Dict[str, List[float]] = {name: [] for name in models}
        with torch.no_grad():
            for model in models.values():
                model(x)
            sync()
            for _ in range(repeats):
                for name, model in models.items():
                    sync()
                    start = time.perf_counter()
                    model(x)
                    sync()
                    times[name].append(time.perf_counter() - start)
        pvt = statistics.median(times['PVT-Tiny'])
        for name, t in times.items():
            median = statistics.median(t)
            rows.append(dict(input=f'{height} x {width}, batch {batch}', backbone=name,
                             seconds=median, images_s=batch / median,
                             vs_pvt=median / pvt))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        print('No CUDA device: this script checks SOFT on a GPU (use --device cpu '
              '--quick for a dry run of the script itself).', file=sys.stderr)
        return 2
    if args.device.startswith('cuda'):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        name = torch.cuda.get_device_name(args.device)
    else:
        from mmsoft.utils.env import cpu_model
        name = f'CPU {cpu_model()} (dry run)'
    size = (64, 96) if args.quick else tuple(args.check_size)
    iters = 1 if args.quick else args.amp_iters
    repeats = 1 if args.quick else args.repeats
    print(f'Device: {name}; torch {torch.__version__}')
    failed = False

    rows = numerics(args.device, size)
    print(f'\nForward and backward, float32 on the device against float64 on the '
          f'CPU, {size[0]} x {size[1]}, largest relative difference (tolerance '
          f'{TOLERANCE}):')
    print('| backbone | feature maps | input gradient | parameter gradients |')
    print('|---|---|---|---|')
    for r in rows:
        print(f"| {r['backbone']} | {r['outputs']:.1e} | {r['input_grad']:.1e} "
              f"| {r['param_grads']:.1e} |")
        failed |= max(r['outputs'], r['input_grad'], r['param_grads']) > TOLERANCE

    rows = amp_training(args.device, iters)
    print(f'\nconfigs/soft_tiny_digits.py, {iters} iterations, AmpOptimWrapper:')
    print('| dtype | iterations | first loss | last loss | all finite |')
    print('|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['dtype']} | {r['iterations']} | {r['first']:.3f} "
              f"| {r['last']:.3f} | {'yes' if r['finite'] else 'NO'} |")
        failed |= not r['finite']

    rows = speed(args.device, repeats, args.quick)
    print(f'\nForward, fp32, median of {repeats} after a warm-up:')
    print('| input | backbone | s | images/s | time / PVT-Tiny time |')
    print('|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['input']} | {r['backbone']} | {r['seconds']:.4f} "
              f"| {r['images_s']:.1f} | {r['vs_pvt']:.2f} |")
    print('\n' + ('FAILED' if failed else 'All checks passed.'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
