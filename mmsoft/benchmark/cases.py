"""The cases of ``tools/analysis/benchmark.py``: which attentions and backbones
it times, and how one case is built into a callable.

A case is a dict (``spec``) with ``kind`` (``'attention'`` or
``'backbone'``), ``variant``, ``size`` and, per kind, ``tokens``, ``arch``,
``attn`` and ``batch``; :func:`build_case` turns it into ``run(backward)``,
one forward (and backward) call. Backbones at detection sizes against
PVT-Tiny are :mod:`.detection`'s.
"""
import contextlib
from typing import Any, Callable, List

import torch

from mmsoft.models import SOFT
from mmsoft.models.attention import build_token_mixer
from mmsoft.ops import use_newton_route

SOFT_VARIANTS = {
    'soft': dict(type='SOFTAttention'),
    'soft-reference': dict(type='SOFTAttention', impl='reference', chunk_size=None),
    'soft-chunked': dict(type='SOFTAttention', chunk_size=4096),
    'soft-capped': dict(type='SOFTAttention', max_landmarks=49),
    'soft-newton-loop': dict(type='SOFTAttention'),
}
NEWTON_ROUTES = {'soft-newton-loop': 'loop'}
"""Variants that force a Newton route (the rest take the route setting)."""
PEERS = {
    'softmax-sdpa': dict(type='SoftmaxAttention2d'),
    'softmax-plain': dict(type='SoftmaxAttention2d', use_sdpa=False),
    'spatial-reduction': dict(type='SpatialReductionAttention'),
    'performer': dict(type='PerformerAttention'),
    'nystromformer': dict(type='NystromAttention'),
    'focused-linear': dict(type='FocusedLinearAttention'),
    'agent': dict(type='AgentAttention'),
}
QUADRATIC = ('softmax-sdpa', 'softmax-plain')
DEFAULT_SIZES = {'attention': [224, 448, 640, 1024], 'backbone': [224]}
DEFAULT_VARIANTS = {'attention': list(SOFT_VARIANTS) + list(PEERS),
                    'backbone': ['soft', 'soft-reference']}


# ----------------------------------------------------------------- the cases
def attention_cfg(name: str) -> dict:
    """A fresh config of the SOFT variant or peer called ``name``."""
    return dict(PEERS.get(name) or SOFT_VARIANTS[name])


def step_runner(module: torch.nn.Module, forward: Callable[[], Any],
                loss: Callable[[Any], torch.Tensor]) -> Callable[[bool], None]:
    """``run(backward)``: ``forward()`` without autograd, or, with
    ``backward``, one training step: ``module`` in train mode,
    ``loss(forward())`` backpropagated, its gradients dropped, eval mode again.

    Args:
        module (nn.Module): What ``forward`` calls (its mode and gradients).
        forward (Callable): One call of ``module`` on fixed inputs.
        loss (Callable): A scalar from ``forward``'s output.
    """
    def run(backward: bool) -> None:
        if backward:
            module.train()
            loss(forward()).backward()
            module.zero_grad(set_to_none=True)
            module.eval()
        else:
            with torch.no_grad():
                forward()
    return run


def build_case(spec: dict, device: str) -> Callable[[bool], None]:
    """A closure running one forward (and backward when asked) of ``spec``."""
    torch.manual_seed(0)
    kind = spec['kind']
    route = NEWTON_ROUTES.get(spec['variant'] if kind == 'attention' else spec['attn'])
    if kind == 'attention':
        side = spec['size'] // 4
        module = build_token_mixer(attention_cfg(spec['variant']), 64, 2,
                                   sr_ratio=8, conv_size=9)
        inputs = (torch.randn(1, side * side, 64, device=device), (side, side))
    else:  # backbone
        module = SOFT(arch=spec['arch'], attn_cfg=attention_cfg(spec['attn']))
        size = spec['size']
        inputs = (torch.randn(spec['batch'], 3, size, size, device=device), )
    module = module.to(device)

    def call(backward: bool):
        if not backward:
            with torch.no_grad():
                return module(*inputs)
        loss = module(*inputs)
        loss = loss if isinstance(loss, torch.Tensor) else sum(o.sum() for o in loss)
        loss.sum().backward()
        return None

    def run(backward: bool):
        """One call; returns the forward's outputs (None with backward)."""
        with use_newton_route(route) if route else contextlib.nullcontext():
            out = call(backward)
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        return out
    return run



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
