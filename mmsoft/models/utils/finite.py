"""NaN and Inf in tensors: found cheaply, and named in weights.

:func:`finite_flag` answers for one tensor without waiting for the device
(the backbone's stage-output check); :func:`check_finite_weights` names the
weights of a checkpoint that hold NaN or Inf (``init_cfg`` loading and the
converter of released checkpoints).
"""
import logging
from typing import List, Mapping

import torch
from mmengine.logging import print_log
from torch import Tensor


def finite_flag(x: Tensor) -> Tensor:
    """Whether ``x`` holds no NaN or Inf, as a 0-d bool tensor (no wait for
    the device).

    One min/max pass and no copy: a NaN makes both NaN, an Inf is the min or
    the max. About 9 times cheaper than ``torch.isfinite(x).all()`` on CPU,
    which first writes a mask of ``x``'s size.

    Args:
        x (Tensor): A floating-point tensor.

    Returns:
        Tensor: True when every value is finite (also for no values).

    Examples:
        >>> import torch
        >>> finite_flag(torch.tensor([1., float('inf')])).item()
        False
    """
    if x.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=x.device)
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        x = x.permute(0, 2, 3, 1)  # the same values, contiguous: no copy
    low, high = torch.aminmax(x.detach())
    return torch.isfinite(low) & torch.isfinite(high)


def non_finite_weights(weights: Mapping[str, Tensor]) -> List[str]:
    """``'<key> (<n> NaN, <m> Inf of <size>)'`` for each floating-point weight
    that holds NaN or Inf, in the weights' order.

    Examples:
        >>> import torch
        >>> weights = {'a': torch.ones(2), 'b': torch.tensor([0., float('nan')])}
        >>> non_finite_weights(weights)
        ['b (1 NaN, 0 Inf of 2)']
    """
    found = []
    for key, value in weights.items():
        if not isinstance(value, Tensor) or not value.is_floating_point():
            continue   # integers and flags are always finite
        if not bool(finite_flag(value)):
            found.append(f'{key} ({int(value.isnan().sum())} NaN, '
                         f'{int(value.isinf().sum())} Inf of {value.numel()})')
    return found


def check_finite_weights(weights: Mapping[str, Tensor], source: str, how: str,
                         allow: bool = False) -> None:
    """Refuse weights that hold NaN or Inf, naming them; or, with ``allow``,
    take them with a warning that names them.

    Args:
        weights (Mapping[str, Tensor]): The weights to be used.
        source (str): How to name them, e.g. the checkpoint's path.
        how (str): How to allow them, for the error (e.g.
            ``'pass --allow-non-finite'``).
        allow (bool): Take them, with a warning. Defaults to False.

    Raises:
        ValueError: Some weights hold NaN or Inf and ``allow`` is False; the
            message names them (8 at most) and the switch.
    """
    found = non_finite_weights(weights)
    if not found:
        return
    named = f'{", ".join(found[:8])}{" ..." if len(found) > 8 else ""}'
    if allow:
        print_log(f'{source} holds weights with NaN or Inf ({len(found)} of '
                  f'{len(weights)}), taken as they are, as asked: {named}',
                  logger='current', level=logging.WARNING)
        return
    raise ValueError(
        f'{source} holds weights with NaN or Inf ({len(found)} of {len(weights)}): '
        f'{named}. A model with them gives NaN outputs. Take another checkpoint '
        '(an earlier one, from before training diverged), or '
        f'{how} to load them as they are.')
