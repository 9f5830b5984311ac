"""Count the multiply-accumulates a model really executes.

Generic counters trace modules or a JIT graph and miss work inside custom
autograd functions and ``no_grad`` loops, such as SOFT's Newton iterations.
:class:`FlopCounter` sits at torch's dispatcher instead, so it sees every
matrix product, convolution and attention kernel that runs, wherever it is
called from, plus every ``exp`` and ``exp2`` (one operation per element, the
Gaussian kernel's cost). Following vision papers, "FLOPs" here are multiply-accumulates
(MACs): one multiply-add counts once.

:func:`count_flops` counts the model's graph-friendly path
(:func:`mmsoft.ops.export_path`), the one exports and JIT traces take: the
Newton iteration as its ``2 T`` matrix products (the loop route, also where
the caller forced another for eager forwards) and the kernel in one piece.
An eager forward may do less (on CPU, the spectral route for the Newton
iterate where this machine's measurement chose it, whose LAPACK work no
dispatcher sees) or a little more (a kernel larger than one cache-sized tile
is computed twice), depending on the machine; the count does not.
"""
from collections import Counter
from math import prod
from typing import Any, Callable, Dict, List, Tuple

import torch
from mmengine.registry import MODELS, init_default_scope
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from mmsoft.ops import export_path, use_newton_route
from mmsoft.ops.regions import current_region

aten = torch.ops.aten


def _mm(args, out) -> int:
    return prod(args[0].shape) * args[1].shape[-1]


def _addmm(args, out) -> int:
    return prod(args[1].shape) * args[2].shape[-1]


def _bmm(args, out) -> int:
    return prod(args[0].shape) * args[1].shape[-1]


def _baddbmm(args, out) -> int:
    return prod(args[1].shape) * args[2].shape[-1]


def _conv(args, out) -> int:
    weight = args[1]
    return out.numel() * prod(weight.shape[1:])


def _sdpa(args, out) -> int:
    q, k, v = args[:3]
    # Q K^T and the weighted sum of V.
    return prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])


def _elementwise(args, out) -> int:
    return out.numel()


# In-place variants take the same arguments as their out-of-place ops.
HANDLERS: Dict[Any, Callable] = {
    aten.mm: _mm,
    aten.addmm: _addmm,
    aten.addmm_: _addmm,
    aten.bmm: _bmm,
    aten.baddbmm: _baddbmm,
    aten.baddbmm_: _baddbmm,
    aten.convolution: _conv,
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa,
    aten._scaled_dot_product_efficient_attention: _sdpa,
    aten._scaled_dot_product_flash_attention: _sdpa,
    aten._scaled_dot_product_cudnn_attention: _sdpa,
    aten.exp: _elementwise,
    aten.exp_: _elementwise,
    aten.exp2: _elementwise,
    aten.exp2_: _elementwise,
}


class FlopCounter(TorchDispatchMode):
    """Context manager that adds up the MACs of everything run inside it.

    Work inside a named region of :mod:`mmsoft.ops.regions` (the Newton
    iterations are ``'newton'``) is also added up per region.

    Attributes:
        counts (Counter): MACs per aten operator name.
        region_counts (Counter): MACs per region name.

    Examples:
        >>> import torch
        >>> from mmsoft.utils.flops import FlopCounter
        >>> with FlopCounter() as counter:
        ...     _ = torch.ones(2, 3) @ torch.ones(3, 4)
        >>> counter.total
        24
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()
        self.region_counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        handler = HANDLERS.get(func._overloadpacket)
        if handler is not None:
            macs = int(handler(args, out))
            self.counts[func._overloadpacket.__name__] += macs
            region = current_region()
            if region is not None:
                self.region_counts[region] += macs
        return out

    @property
    def total(self) -> int:
        """All MACs counted so far."""
        return sum(self.counts.values())


def count_flops(model: nn.Module, *inputs: Any, **kwargs: Any) -> FlopCounter:
    """Count one forward of ``model`` (in eval mode, without gradients), on
    the graph-friendly path (:func:`mmsoft.ops.export_path`), so that the
    count is the same on every machine.

    Args:
        model (nn.Module): The model; its training mode is restored after.
        *inputs: Positional inputs of the forward.
        **kwargs: Keyword inputs of the forward.

    Returns:
        FlopCounter: ``total`` MACs (each ``exp`` counted as one), per
        operator ``counts`` and per region ``region_counts``; the Newton
        iterations are ``region_counts['newton']``, which the published
        FLOPs of SOFT leave out.
    """
    was_training = model.training
    model.eval()
    try:
        # The graph-friendly path's route is the loop, whatever route the
        # caller forced for eager forwards.
        with torch.no_grad(), export_path(), use_newton_route('loop'), \
                FlopCounter() as counter:
            model(*inputs, **kwargs)
    finally:
        model.train(was_training)
    return counter


def count_parameters(model: nn.Module) -> int:
    """Number of parameters of ``model``."""
    return sum(p.numel() for p in model.parameters())


def measure_config(config: Any, height: int, width: int) -> List[Tuple]:
    """Parameters and MACs of a config's model on one ``height x width`` image.

    The model is built from ``config.model`` under the config's default
    scope, without loading a pretrained backbone (``init_cfg`` is dropped).

    Args:
        config (mmengine.Config): A classifier, detector or segmentor config.
        height (int): Image height.
        width (int): Image width.

    Returns:
        list[tuple]: ``(part, params, MACs, MACs without the Newton
        iterations)`` for ``'backbone'`` and ``'whole model'`` (its tensor
        forward: heads without post-processing).
    """
    init_default_scope(config.get('default_scope', 'mmsoft'))
    model_cfg = config.model.copy()
    model_cfg.get('backbone', {}).pop('init_cfg', None)  # no pretrained file needed
    model = MODELS.build(model_cfg).eval()
    image = torch.rand(1, 3, height, width)
    rows = []
    for name, module, kwargs in (('backbone', model.backbone, {}),
                                 ('whole model', model, dict(mode='tensor'))):
        counter = count_flops(module, image, **kwargs)
        rows.append((name, count_parameters(module), counter.total,
                     counter.total - counter.region_counts['newton']))
    return rows
