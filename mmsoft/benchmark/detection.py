"""SOFT backbones against mmdet's PVT-Tiny at detection and segmentation sizes.

The cases of ``tools/analysis/benchmark_detection.py`` and
``tools/analysis/benchmark_under_load.py``: SOFT-Tiny and SOFT-Norm-Tiny
(four feature maps, random weights from a fixed seed) with either Newton
inverse (``'ridge'``, mmsoft's training default, or ``'backoff'``, the
released checkpoints'), and optionally a forced Newton route, beside
mmdet's ``PyramidVisionTransformer`` with PVT-Tiny's depths. A forward runs
without autograd in eval mode; a training step runs forward and backward of
the summed feature maps in train mode.
"""
import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmsoft.models import SOFT
from mmsoft.ops import use_newton_route

from .cases import step_runner

BACKBONES = {'soft-tiny': 'tiny', 'soft-norm-tiny': 'tiny-norm', 'pvt-tiny': None}
INVERSES = ('ridge', 'backoff')


def build_backbone(name: str, newton: Optional[str] = None,
                   seed: int = 0) -> nn.Module:
    """One backbone of :data:`BACKBONES` with random weights.

    Args:
        name (str): ``'soft-tiny'``, ``'soft-norm-tiny'`` or ``'pvt-tiny'``.
        newton (str, optional): The SOFT backbones' Newton inverse,
            ``'ridge'`` or ``'backoff'``. Defaults to None (``'ridge'``).
        seed (int): Seed of the weights. Defaults to 0.

    Returns:
        nn.Module: The backbone in eval mode.
    """
    torch.manual_seed(seed)
    if name == 'pvt-tiny':
        # mmdet is needed for PVT-Tiny only (classification needs no mmdet).
        from mmdet.models.backbones import PyramidVisionTransformer
        return PyramidVisionTransformer(num_layers=[2, 2, 2, 2]).eval()
    if name not in BACKBONES:
        raise ValueError(f'Unknown backbone {name!r}; use one of {list(BACKBONES)}.')
    return SOFT(arch=BACKBONES[name], out_type='featmap', out_indices=(0, 1, 2, 3),
                newton=newton or 'ridge').eval()


def case_names(backbones: Sequence[str], inverses: Sequence[str],
               routes: Sequence[str]) -> List[Tuple[str, str, Optional[str], str]]:
    """``(label, backbone, inverse, route)`` of every case, PVT-Tiny once."""
    cases = []
    for backbone in backbones:
        if backbone == 'pvt-tiny':
            cases.append(('PVT-Tiny', backbone, None, 'auto'))
            continue
        title = 'SOFT-Norm-Tiny' if backbone == 'soft-norm-tiny' else 'SOFT-Tiny'
        for inverse in inverses:
            for route in routes:
                suffix = '' if route == 'auto' else f', {route} route'
                cases.append((f'{title} {inverse}{suffix}', backbone, inverse, route))
    return cases


def runner(module: nn.Module, route: str,
           shape: Sequence[int]) -> Callable[[bool], None]:
    """``run(backward)``: one forward (without autograd, eval mode) or, with
    ``backward``, one training step of ``module`` on a ``1 x 3 x H x W`` image
    under Newton route ``route``."""
    images = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(1))
    step = step_runner(module, lambda: module(images),
                       lambda outs: sum(o.sum() for o in outs))

    def run(backward: bool) -> None:
        forced = route != 'auto'
        with use_newton_route(route) if forced else contextlib.nullcontext():
            step(backward)
    return run


def build_runs(cases, shape: Sequence[int]) -> Dict[str, Callable[[bool], None]]:
    """Label to :func:`runner` for every case (each backbone built once)."""
    modules: Dict[tuple, nn.Module] = {}
    runs = {}
    for label, backbone, inverse, route in cases:
        key = (backbone, inverse)
        if key not in modules:
            modules[key] = build_backbone(backbone, inverse)
        runs[label] = runner(modules[key], route, shape)
    return runs
