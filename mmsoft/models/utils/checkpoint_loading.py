"""Strict, auditable loading of pretrained weights into a SOFT backbone.

Also the one place that picks the weights out of a checkpoint file
(:func:`extract_state_dict`), for ``init_cfg`` loading and for
``tools/model_converters/soft2mmsoft.py`` alike.
"""
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.runner.checkpoint import CheckpointLoader, load_from_local
from torch import Tensor

from mmsoft.utils.safe_checkpoint import load_local_checkpoint

from .ckpt_convert import (
    RELEASED_NEWTON,
    convert_soft_state_dict,
    is_official_soft,
    strip_prefix,
    upgrade_state_dict,
)
from .finite import check_finite_weights
from .pos_embed import resize_pos_embed

# Where checkpoints keep their weights, in order of preference: mmengine and
# timm (``state_dict``), DeiT (``model``), then an EMA-only file.
STATE_DICT_KEYS = ('state_dict', 'model', 'state_dict_ema')
EMA_KEY = 'state_dict_ema'


def weights_key(checkpoint: Mapping, ema: bool = False) -> Optional[str]:
    """Where a loaded checkpoint keeps the weights that would be taken.

    Args:
        checkpoint (Mapping): What ``torch.load`` returned.
        ema (bool): Ask for the EMA weights. Defaults to False.

    Returns:
        str | None: ``'state_dict'``, ``'model'`` or ``'state_dict_ema'``
        (the first of :data:`STATE_DICT_KEYS` that holds a dict; only
        ``'state_dict_ema'`` with ``ema``, even if absent), or None for bare
        weights.
    """
    if ema:
        return EMA_KEY
    return next((key for key in STATE_DICT_KEYS
                 if isinstance(checkpoint.get(key), Mapping)), None)


def _as_tensors(weights: Mapping, source: str) -> Dict[str, Tensor]:
    """Plain numbers (an ``int`` ``num_batches_tracked``) as tensors; others refused."""
    others = {key: type(value).__name__ for key, value in weights.items()
              if not isinstance(value, (Tensor, bool, int, float))}
    if others:
        raise ValueError(f'{source} holds values that are not weights: '
                         f'{dict(list(others.items())[:10])}; a state dict maps '
                         'names to tensors. Remove them or save the weights again.')
    return OrderedDict((key, value if isinstance(value, Tensor)
                        else torch.tensor(value)) for key, value in weights.items())


def extract_state_dict(checkpoint: Any, ema: bool = False,
                       source: str = 'the checkpoint') -> Dict[str, Tensor]:
    """The weights inside a loaded checkpoint, without DDP's ``module.`` prefix.

    Looks under ``state_dict``, ``model`` and ``state_dict_ema``, in this
    order (:func:`weights_key`), and takes a dict without any of them as bare
    weights. Plain numbers among them (a ``num_batches_tracked`` saved as an
    ``int``) become tensors.

    Args:
        checkpoint: What ``torch.load`` returned.
        ema (bool): Take the EMA weights (``state_dict_ema``) and fail if the
            checkpoint has none. Defaults to False.
        source (str): How to name the checkpoint in errors, e.g. its path.
            Defaults to ``'the checkpoint'``.

    Returns:
        dict[str, Tensor]: The weights.

    Raises:
        TypeError: ``checkpoint`` is not a dict.
        KeyError: ``ema`` is set and there is no ``state_dict_ema``.
        ValueError: The weights hold no tensor, values that are neither
            tensors nor numbers, or a weight both with and without
            ``module.`` (see :func:`strip_prefix`).

    Examples:
        >>> import torch
        >>> ckpt = dict(state_dict={'module.w': torch.ones(1), 'n': 3}, epoch=3)
        >>> {k: v.tolist() for k, v in extract_state_dict(ckpt).items()}
        {'w': [1.0], 'n': 3}
    """
    if not isinstance(checkpoint, Mapping):
        raise TypeError(f'{source} holds a {type(checkpoint).__name__}, not a '
                        'dict of weights: it is not a model checkpoint.')
    if ema and not isinstance(checkpoint.get(EMA_KEY), Mapping):
        raise KeyError(f'EMA weights were asked for but {source} has no '
                       f'{EMA_KEY} (keys: {list(checkpoint)[:10]}); leave '
                       'out the EMA option to load its plain weights.')
    key = weights_key(checkpoint, ema)
    weights = checkpoint if key is None else checkpoint[key]
    if not any(isinstance(value, Tensor) for value in weights.values()):
        raise ValueError(f'{source} holds no tensors (keys: {list(weights)[:10]}); '
                         'it is not a model checkpoint.')
    return strip_prefix(_as_tensors(weights, source), 'module.', source)


def shape_mismatches(own: Mapping[str, Tensor],
                     state: Mapping[str, Any]) -> Dict[str, str]:
    """Keys in both whose checkpoint value does not fit the model's tensor.

    Args:
        own (Mapping[str, Tensor]): The model's state dict.
        state (Mapping[str, Any]): The checkpoint's weights.

    Returns:
        dict[str, str]: Key to ``'<key>: checkpoint (shape) vs model (shape)'``.
    """
    found = {}
    for key in own:
        if key not in state:
            continue
        value = state[key]
        if not isinstance(value, Tensor):
            found[key] = (f'{key}: checkpoint {type(value).__name__} vs model '
                          f'{tuple(own[key].shape)}')
        elif value.shape != own[key].shape:
            found[key] = (f'{key}: checkpoint {tuple(value.shape)} vs model '
                          f'{tuple(own[key].shape)}')
    return found


def load_fitting_weights(model: nn.Module, state_dict: Mapping[str, Any]
                         ) -> Tuple[List[str], List[str], List[str]]:
    """Load the weights that fit ``model``, and say which did not.

    Unlike :func:`load_pretrained`, this serves any model and takes the
    weights as mmengine's loaders do: the model's own key migrations
    (``_load_from_state_dict``, by the version in the state dict's
    ``_metadata``) run, and ``num_batches_tracked`` counters may be absent.

    Args:
        model (nn.Module): The model (not wrapped in DDP).
        state_dict (Mapping[str, Any]): Its weights, keys without prefix.

    Returns:
        tuple[list[str], list[str], list[str]]: Keys of the model the
        weights lack, keys the model has no place for, and
        ``'<key>: checkpoint (shape) vs model (shape)'`` for the weights of
        another shape (not loaded).

    Examples:
        >>> import torch.nn as nn
        >>> weights = dict(weight=torch.zeros(2, 3), extra=torch.ones(1))
        >>> load_fitting_weights(nn.Linear(3, 2), weights)
        (['bias'], ['extra'], [])
    """
    mismatched = shape_mismatches(model.state_dict(), state_dict)
    fitting = OrderedDict((k, v) for k, v in state_dict.items() if k not in mismatched)
    metadata = getattr(state_dict, '_metadata', None)
    if metadata is not None:
        fitting._metadata = metadata
    result = model.load_state_dict(fitting, strict=False)
    missing = [k for k in result.missing_keys
               if k not in mismatched and not k.endswith('num_batches_tracked')]
    return missing, list(result.unexpected_keys), list(mismatched.values())


def _extra_weights(own: Mapping[str, Tensor], unexpected: List[str]) -> List[str]:
    """Leftover keys inside a part the model has: blocks of a deeper arch.

    Keys of parts the model does not build (stages after the last of
    ``out_indices``, a classifier head) are not among them.
    """
    def part(key: str) -> str:
        return '.'.join(key.split('.')[:2])

    built = {part(key) for key in own}
    return [key for key in unexpected if part(key) in built]


def _resize_pos_embeds(model: nn.Module, state: Dict[str, Tensor],
                       logger: MMLogger) -> None:
    own = model.state_dict()
    for key in [k for k in state if k.endswith('pos_embed') and k in own]:
        if state[key].shape == own[key].shape:
            continue
        stage = model.get_submodule(key.rpartition('.')[0])
        old_shape = tuple(state[key].shape)
        state[key] = resize_pos_embed(state[key], stage.pos_grid,
                                      stage.num_extra_tokens)
        logger.info(f'Resized {key} from {old_shape} to {tuple(state[key].shape)}.')


def read_checkpoint(filename: str, map_location: str = 'cpu') -> Any:
    """Read a checkpoint for ``init_cfg`` loading, safely without any runtime.

    A plain path is read by :func:`mmsoft.utils.load_local_checkpoint`
    (weights-only, mmengine's allow-list for this call only, errors naming
    the file and never advising an unsafe load), with or without
    :mod:`mmsoft.runtime` and changing nothing process-wide. A path another
    loader of mmengine's ``CheckpointLoader`` serves (URLs, ``s3://``, a
    local loader someone else registered) goes to that loader.

    Args:
        filename (str): Checkpoint path or URL mmengine can read.
        map_location (str): Device to load to. Defaults to ``'cpu'``.

    Returns:
        The loaded checkpoint.
    """
    loader = CheckpointLoader._get_checkpoint_loader(filename)
    if loader in (load_from_local, load_local_checkpoint):  # a plain path
        return load_local_checkpoint(filename, map_location=map_location)
    return CheckpointLoader.load_checkpoint(filename, map_location=map_location)


def load_pretrained(model: nn.Module, filename: str, prefix: Optional[str] = None,
                    map_location: str = 'cpu',
                    allow_extra_weights: bool = False,
                    allow_non_finite: bool = False) -> None:
    """Load weights into ``model`` and fail loudly when they do not fit.

    Takes mmsoft/mmpretrain checkpoints (use ``prefix='backbone.'`` for a
    classifier's) and released SOFT checkpoints (converted on the fly).
    Position embeddings of another size are resized. Keys of parts the model
    does not have (a classifier head, stages it does not build) are logged;
    weights that do not fit a part it has (the extra blocks of a deeper
    arch) are an error unless ``allow_extra_weights``; weights with NaN or
    Inf, unless ``allow_non_finite``.

    Args:
        model (nn.Module): The backbone.
        filename (str): Checkpoint path or URL mmengine can read.
        prefix (str, optional): Keep only keys with this prefix, removing it.
            Defaults to None.
        map_location (str): Device to load to. Defaults to ``'cpu'``.
        allow_extra_weights (bool): Load a deeper checkpoint into a shallower
            model on purpose, dropping the blocks it has no place for
            (``init_cfg=dict(..., allow_extra_weights=True)``). Defaults to
            False.
        allow_non_finite (bool): Load weights that hold NaN or Inf, with a
            warning naming them (``init_cfg=dict(..., allow_non_finite=True)``).
            Defaults to False.

    Raises:
        KeyError: No key carries ``prefix``, no key matches the model, some
            of the model's weights are missing, or the checkpoint has weights
            for blocks the model lacks; the message names them.
        ValueError: Shapes differ (the message lists the keys and both
            shapes), or weights the model takes hold NaN or Inf (the message
            names them).
    """
    logger = MMLogger.get_current_instance()
    checkpoint = read_checkpoint(filename, map_location=map_location)
    state = extract_state_dict(checkpoint, source=filename)
    if prefix:
        selected = {
            k[len(prefix):]: v
            for k, v in state.items() if k.startswith(prefix)
        }
        if not selected:
            raise KeyError(
                f'No key of {filename} starts with prefix {prefix!r} (first keys: '
                f'{list(state)[:5]}); set init_cfg.prefix to match the checkpoint, '
                'e.g. prefix=None for a bare backbone.')
        state = selected
    if is_official_soft(state):
        state, leftovers = convert_soft_state_dict(state, newton=RELEASED_NEWTON)
        if leftovers:
            logger.info(f'Not loaded from the released checkpoint: {leftovers}')
    upgrade_state_dict(state, source=filename)
    own = model.state_dict()
    check_finite_weights({k: v for k, v in state.items() if k in own}, filename,
                         'set init_cfg.allow_non_finite=True',
                         allow=allow_non_finite)
    _resize_pos_embeds(model, state, logger)

    matched = [k for k in own if k in state]
    if not matched:
        raise KeyError(
            f'No weight of {filename} matches {type(model).__name__} (checkpoint '
            f'keys start {list(state)[:5]}, model keys {list(own)[:5]}); check '
            "init_cfg.prefix (a classifier checkpoint needs prefix='backbone.') "
            'and that the file holds SOFT weights.')
    optional = getattr(model, 'optional_state_keys', ())
    missing = [k for k in own if k not in state and k not in optional]
    if missing:
        raise KeyError(f'{filename} lacks {len(missing)} weights of '
                       f'{type(model).__name__}: {missing}.')
    mismatched = list(shape_mismatches(own, state).values())
    if mismatched:
        raise ValueError(f'Shapes of {filename} do not fit the model (is the arch '
                         f'the same?): ' + '; '.join(mismatched))
    unexpected = [k for k in state if k not in own]
    extra = _extra_weights(own, unexpected)
    if extra and not allow_extra_weights:
        raise KeyError(
            f'{filename} has {len(extra)} weights that {type(model).__name__} has '
            f'no place for: {extra[:8]}{" ..." if len(extra) > 8 else ""}. The '
            'checkpoint is most likely of a deeper arch (another size): choose '
            'the matching arch, or set init_cfg.allow_extra_weights=True to drop '
            'them on purpose.')
    model.load_state_dict({k: state[k] for k in matched}, strict=True)
    logger.info(f'Loaded {len(matched)} weights from {filename}' +
                (f'; ignored {unexpected}' if unexpected else ''))
