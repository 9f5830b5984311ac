"""Checks of the SOFT backbone's arguments and inputs, with messages naming the fix.

Kept apart from the backbone so that each check reads on its own:
:func:`check_arguments` runs in the constructor, :func:`check_batch` in
``check_input`` before the forward, :func:`check_stage_outputs` after it,
:func:`empty_outputs` answers a batch of no images. The stage geometry
(grids, strides) is read from the backbone, which publishes it
(``stage_grids``, ``stage_strides``), never computed here again.
"""
from numbers import Integral, Real
from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm


def _is_int(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _require_ints(name: str, values: Sequence, minimum: int) -> None:
    bad = [v for v in values if not _is_int(v) or v < minimum]
    if bad:
        raise ValueError(f'{name} must hold whole numbers >= {minimum}, got '
                         f'{list(values)}.')


def check_arguments(settings: dict, in_channels, img_size, drop_rate,
                    drop_path_rate) -> None:
    """Check the SOFT constructor's arguments before anything is built.

    Args:
        settings (dict): The resolved arch (``embed_dims``, ``num_heads``,
            ``depths``, ``sr_ratios``, ``conv_sizes``, ``mlp_ratios``,
            ``stem_channels``).
        in_channels: Input channels.
        img_size: Size the position embeddings are defined for.
        drop_rate: Dropout after the position embeddings.
        drop_path_rate: Largest residual-branch drop rate.

    Raises:
        ValueError: An argument is out of range; the message names it.
    """
    _require_ints("arch['embed_dims']", settings['embed_dims'], 1)
    _require_ints("arch['num_heads']", settings['num_heads'], 1)
    _require_ints("arch['depths']", settings['depths'], 0)
    _require_ints("arch['sr_ratios']", settings['sr_ratios'], 1)
    _require_ints("arch['stem_channels']", [settings['stem_channels']], 1)
    bad_conv = [c for c in settings['conv_sizes']
                if not _is_int(c) or c < 1 or c % 2 == 0]
    if bad_conv:
        raise ValueError(f"arch['conv_sizes'] must hold odd whole numbers >= 1 (the "
                         'value convolution keeps the map size), got '
                         f"{list(settings['conv_sizes'])}.")
    bad_mlp = [r for r in settings['mlp_ratios']
               if not isinstance(r, Real) or isinstance(r, bool) or r <= 0]
    if bad_mlp:
        raise ValueError("arch['mlp_ratios'] must hold numbers > 0, got "
                         f"{list(settings['mlp_ratios'])}.")
    for stage, (dims, heads) in enumerate(zip(settings['embed_dims'],
                                              settings['num_heads'])):
        if dims % heads:
            raise ValueError(
                f"Stage {stage + 1}: arch['embed_dims'][{stage}]={dims} is not "
                f"divisible by arch['num_heads'][{stage}]={heads}; every head "
                'needs the same width, so choose num_heads dividing embed_dims.')
    if not _is_int(in_channels) or in_channels < 1:
        raise ValueError(f'in_channels must be a whole number >= 1, got '
                         f'{in_channels!r}.')
    if not _is_int(img_size) or img_size < 1:
        raise ValueError(f'img_size must be a whole number >= 1 (the input size '
                         f'the position embeddings are defined for), got '
                         f'{img_size!r}.')
    for name, rate in (('drop_rate', drop_rate), ('drop_path_rate', drop_path_rate)):
        if not isinstance(rate, Real) or isinstance(rate, bool) or not 0 <= rate < 1:
            raise ValueError(f'{name} must be in [0, 1), got {rate!r}.')


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return (torch.is_autocast_cpu_enabled() if device_type == 'cpu'
                else torch.is_autocast_enabled())


def half_precision_autocast(device_type: str) -> bool:
    """Whether float16 autocast is on for ``device_type`` (where a gradient
    scaler, not an error, answers an overflowing step)."""
    if not _autocast_on(device_type):
        return False
    try:
        return torch.get_autocast_dtype(device_type) == torch.float16
    except AttributeError:  # torch < 2.4
        return device_type == 'cuda'


def check_batch(model: torch.nn.Module, x: Tensor) -> None:
    """Checks of an input batch beyond its shape: dtype, and batch-1 training.

    Args:
        model (nn.Module): The backbone (its parameters give the dtype, its
            ``stage_grids`` and ``stage_strides`` the geometry).
        x (Tensor): The input images, (B, C, H, W).

    Raises:
        TypeError: ``x`` is not floating point, or of another dtype than the
            model outside autocast.
        ValueError: In training, the last stage's BatchNorm would see one
            value per channel.
    """
    param: Optional[Tensor] = next(model.parameters(), None)
    if not x.is_floating_point():
        raise TypeError(f'SOFT expects floating-point images, got {x.dtype}; '
                        'convert them with x.float() (and normalise them, as a '
                        'data preprocessor does).')
    if (param is not None and x.dtype != param.dtype
            and not _autocast_on(x.device.type)):
        raise TypeError(f'Input of dtype {x.dtype} does not match the model\'s '
                        f'{param.dtype} weights; cast the input (x.to({param.dtype})) '
                        f'or the model (model.to({x.dtype})), or run under '
                        f"torch.autocast('{x.device.type}') for mixed precision.")
    if not model.training or x.shape[0] != 1:
        return
    h, w = model.stage_grids(x.shape[-2], x.shape[-1])[-1]
    batchnorm_trains = any(isinstance(m, _BatchNorm) and m.training
                           for m in model.modules())
    if h * w == 1 and batchnorm_trains:
        raise ValueError(
            f'In training, batch 1 at {x.shape[-2]} x {x.shape[-1]} px gives stage '
            f'{model.num_stages} a 1 x 1 map, and its BatchNorm needs more than one '
            f'value per channel. Train with batches of 2 or more, or inputs of more '
            f'than {model.stage_strides[-1]} px on one side, or norm_eval=True.')


def check_stage_outputs(finite: List[Tensor], x: Tensor) -> None:
    """Name the first stage whose output is not finite although its input was.

    Args:
        finite (list[Tensor]): One :func:`mmsoft.models.utils.finite_flag`
            per stage, in order (read here at once: one wait for the device).
        x (Tensor): The (finite) input images.

    Raises:
        ValueError: A stage output holds NaN or Inf; the message names the
            stage, the input's largest magnitude and what to check.
    """
    flags = torch.stack(finite).tolist()
    if all(flags):
        return
    stage = flags.index(False) + 1
    largest = float(x.detach().abs().amax())
    raise ValueError(
        f'Stage {stage} of SOFT gave NaN or Inf outputs from a finite input (largest '
        f'magnitude {largest:.3g}, {x.dtype}): the input overflows the arithmetic '
        'or the weights hold NaN or Inf. Normalise the images (as a data '
        'preprocessor does) and check the checkpoint, or pass check_finite=False '
        'to skip this check.')


def empty_outputs(model: torch.nn.Module, x: Tensor) -> Tuple[Tensor, ...]:
    """The outputs of a batch of no images, shaped as for any other batch."""
    if model.out_type == 'cls_token':
        return (x.new_zeros((0, model.embed_dims[3])), )
    grids = model.stage_grids(x.shape[-2], x.shape[-1])
    return tuple(x.new_zeros((0, model.embed_dims[i], *grids[i]))
                 for i in model.out_indices)
