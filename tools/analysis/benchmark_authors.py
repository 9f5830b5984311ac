"""mmsoft's SOFT against the authors' own code, on the same weights, on CPU.

Builds the authors' SOFT-Tiny (models/softmax_free_vision_transformer.py of
their repository, github.com/fudan-zvg/SOFT, which this project does not
ship: pass a checkout with --authors-repo), converts its random weights with
mmsoft's converter into an mmpretrain classifier with the same Newton
inverse (ridge: their code's ``newton_inv``), checks that both give the
same logits, and times a forward and a training step (forward, loss,
backward) of each at --size, batch --batch, round-robin (one warm-up, then
--repeats calls each; medians). Prints the CPU and a Markdown table.

The authors' code runs on CUDA only. To run it on a CPU this tool makes, in
its own process and on their modules only, these edits (their maths
unchanged):

1. an empty module stands in for their compiled CUDA extension
   ``SOFT._C`` (imported by ``SOFT/kernel/subtraction.py``, used only by
   their ``kernel_method='cuda'``); their models are built with
   ``kernel_method='torch'``, the plain PyTorch kernel;
2. ``subtraction_gaussian_kernel_torch`` makes its two matrices of ones on
   the input's device instead of with ``.cuda()``;
3. ``newton_inverse_kernel`` is their ``_NewtonInverseKernel`` (forward:
   their ``newton_inv``; backward: their formula) without the CUDA asserts
   and ``torch.cuda.device_of``.

Their vision transformer imports timm (``pip install timm``) and einops.

Example:
  python tools/analysis/benchmark_authors.py --authors-repo /path/to/SOFT
"""
import argparse
import os
import sys
import types
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch
import torch.nn.functional as F

from mmsoft.benchmark.cases import step_runner
from mmsoft.benchmark.timing import medians, sample_round_robin
from mmsoft.utils.env import cpu_model

ARCHS = {'tiny': 'soft_tiny', 'small': 'soft_small', 'medium': 'soft_medium',
         'large': 'soft_large', 'huge': 'soft_huge'}
"""mmsoft preset to the authors' model function of the same network (the
authors' ``soft_small`` is deeper than the paper's; see the README)."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--authors-repo', required=True,
                        help='a checkout of github.com/fudan-zvg/SOFT')
    parser.add_argument('--arch', default='tiny', choices=['tiny'])
    parser.add_argument('--size', type=int, default=224)
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args(argv)
    model_file = Path(args.authors_repo) / 'models' / 'softmax_free_transformer.py'
    if not model_file.is_file():
        parser.error(f'--authors-repo {args.authors_repo}: no {model_file.name} '
                     'in its models/ folder; pass a checkout of '
                     'github.com/fudan-zvg/SOFT.')
    if args.repeats < 1 or args.batch < 1:
        parser.error('--repeats and --batch must be positive.')
    return args


def authors_model(repo: str, arch: str) -> torch.nn.Module:
    """The authors' model ``ARCHS[arch]``, with the CPU edits of the module
    docstring, random weights from a fixed seed, in eval mode."""
    sys.modules.setdefault('SOFT._C', types.ModuleType('SOFT._C'))  # edit 1
    sys.path.insert(0, os.path.abspath(repo))
    try:
        import models.softmax_free_transformer as blocks
        import models.softmax_free_vision_transformer as vit
    finally:
        sys.path.pop(0)
    newton_inv = sys.modules['SOFT.kernel.inverse'].newton_inv

    def ones_kernel(q, k):  # edit 2: their function, on q's device
        a_square = q ** 2. @ torch.ones(k.shape[-2:], device=q.device)
        b_square = torch.ones(q.shape[-2:], device=q.device) @ k ** 2.
        return a_square + b_square - 2. * (q @ k)

    class NewtonInverse(torch.autograd.Function):  # edit 3
        @staticmethod
        def forward(ctx, mat, iters=20):
            with torch.no_grad():
                out = newton_inv(mat.contiguous(), iters)
            ctx.save_for_backward(mat, out)
            return out

        @staticmethod
        def backward(ctx, grad):
            _, inverse = ctx.saved_tensors
            inv_t = inverse.transpose(-1, -2)
            return -(inv_t @ grad.contiguous() @ inv_t), None

    blocks.subtraction_gaussian_kernel_torch = ones_kernel
    blocks.newton_inverse_kernel = lambda mat, iters=20: NewtonInverse.apply(mat,
                                                                             iters)
    torch.manual_seed(0)
    return getattr(vit, ARCHS[arch])(kernel_method='torch').eval()


def mmsoft_model(authors: torch.nn.Module, arch: str) -> torch.nn.Module:
    """mmsoft's classifier with the authors' weights, converted, and their
    Newton inverse (ridge)."""
    from mmpretrain.models import ImageClassifier

    import mmsoft  # noqa: F401  (registers SOFT)
    from mmsoft.models.utils.ckpt_convert import convert_soft_state_dict
    model = ImageClassifier(
        backbone=dict(type='SOFT', arch=arch, newton='ridge'),
        head=dict(type='LinearClsHead', num_classes=1000, in_channels=512))
    state, leftovers = convert_soft_state_dict(authors.state_dict(), with_head=True,
                                               newton='ridge')
    if leftovers:
        raise RuntimeError(f'The converter left {leftovers[:5]} unmatched.')
    model.load_state_dict(state, strict=True)
    return model.eval()


def runners(models: Dict[str, Tuple[Callable, torch.nn.Module]], images: torch.Tensor,
            labels: torch.Tensor) -> Dict[str, Callable[[bool], None]]:
    """``run(backward)`` per ``(forward, module)``: a forward without
    autograd, or a training step (train mode, cross-entropy, backward)."""
    return {name: step_runner(module, lambda forward=forward: forward(images),
                              lambda logits: F.cross_entropy(logits, labels))
            for name, (forward, module) in models.items()}


def main(argv=None) -> Dict[str, Dict[str, float]]:
    args = parse_args(argv)
    authors = authors_model(args.authors_repo, args.arch)
    ours = mmsoft_model(authors, args.arch)
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(args.batch, 3, args.size, args.size, generator=gen)
    labels = torch.randint(0, 1000, (args.batch, ), generator=gen)
    with torch.no_grad():
        theirs_out = authors(images)
        ours_out = ours(images, mode='tensor')
    difference = float((ours_out - theirs_out).abs().max() / theirs_out.abs().max())
    header = (f'CPU: {cpu_model()}, {os.cpu_count()} logical cores, '
              f'{torch.get_num_threads()} torch threads; torch {torch.__version__}; '
              f'SOFT-{args.arch}, {args.size} x {args.size}, batch {args.batch}; '
              f'medians of {args.repeats}, round-robin')
    print(header)
    print(f'largest relative difference of the logits: {difference:.2e}')
    runs = runners({'authors': (authors, authors),
                    'mmsoft': (lambda x: ours(x, mode='tensor'), ours)},
                   images, labels)
    result = {}
    for backward, mode in ((False, 'forward'), (True, 'training step')):
        times = medians(sample_round_robin(runs, args.repeats, backward))
        result[mode] = {name: t['wall_s'] for name, t in times.items()}
    print('| mode | authors s | mmsoft s | mmsoft speed / authors speed |')
    print('|---|---|---|---|')
    for mode, t in result.items():
        print(f"| {mode} | {t['authors']:.3f} | {t['mmsoft']:.3f} | "
              f"{t['authors'] / t['mmsoft']:.2f}x |")
    result['difference'] = difference
    return result


if __name__ == '__main__':
    main()
