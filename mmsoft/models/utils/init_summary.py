"""One honest log line for a backbone's own ``init_weights``.

mmengine's ``BaseModule.init_weights`` logs every parameter of the top-level
module, as "the same before and after" unless an ``init_cfg`` changed it.
A backbone that initialises its weights itself after ``super().init_weights()``
gets one such (wrong) line per parameter. :func:`begin_init_log` and
:func:`end_init_log` bracket the whole initialisation instead: inside a
larger model (a classifier, a detector) they leave the bookkeeping to the
top-level module, which then records the change; called on the backbone
alone they log one summary of what changed.
"""
from collections import defaultdict

import torch.nn as nn
from mmengine.logging import print_log

_OWNER = '_init_log_owner'


def begin_init_log(model: nn.Module) -> None:
    """Start recording which parameters ``model``'s initialisation changes."""
    if hasattr(model, '_params_init_info'):
        return  # part of a larger model: its top-level module reports
    info = defaultdict(dict)
    for param in model.parameters():
        info[param]['tmp_mean_value'] = param.data.mean().cpu()
        info[param]['init_info'] = 'unchanged'
    for module in model.modules():
        module._params_init_info = info  # mmengine then skips its own dump
    setattr(model, _OWNER, True)


def end_init_log(model: nn.Module) -> None:
    """Log one line: how many parameter tensors changed, how many kept their values."""
    if not getattr(model, _OWNER, False):
        return
    info = model._params_init_info
    params = list(model.parameters())
    changed = sum(1 for p in params
                  if not p.data.mean().cpu().equal(info[p]['tmp_mean_value']))
    for module in model.modules():
        if hasattr(module, '_params_init_info'):
            del module._params_init_info
    delattr(model, _OWNER)
    print_log(f'{type(model).__name__}.init_weights: {changed} of {len(params)} '
              f'parameter tensors initialised, {len(params) - changed} keep the '
              "values they were built with (PyTorch's defaults).", logger='current')
