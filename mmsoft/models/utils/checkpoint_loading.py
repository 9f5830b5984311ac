"""Strict, auditable loading of pretrained weights into a SOFT backbone."""
from typing import Dict, Optional

import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.runner.checkpoint import CheckpointLoader
from torch import Tensor

from .ckpt_convert import (
    RELEASED_NEWTON,
    convert_soft_state_dict,
    is_official_soft,
    strip_prefix,
    upgrade_state_dict,
)
from .pos_embed import resize_pos_embed

STATE_DICT_KEYS = ('state_dict', 'model', 'state_dict_ema')


def extract_state_dict(checkpoint: dict) -> Dict[str, Tensor]:
    """The weights inside a checkpoint: under ``state_dict``/``model`` or bare."""
    for key in STATE_DICT_KEYS:
        if isinstance(checkpoint.get(key), dict):
            return strip_prefix(checkpoint[key], 'module.')
    return strip_prefix(checkpoint, 'module.')


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


def load_pretrained(model: nn.Module, filename: str, prefix: Optional[str] = None,
                    map_location: str = 'cpu') -> None:
    """Load weights into ``model`` and fail loudly when they do not fit.

    Takes mmsoft/mmpretrain checkpoints (use ``prefix='backbone.'`` for a
    classifier's) and released SOFT checkpoints (converted on the fly).
    Position embeddings of another size are resized; keys of the checkpoint
    that the model lacks (a classifier head, say) are logged.

    Args:
        model (nn.Module): The backbone.
        filename (str): Checkpoint path or URL mmengine can read.
        prefix (str, optional): Keep only keys with this prefix, removing it.
            Defaults to None.
        map_location (str): Device to load to. Defaults to ``'cpu'``.

    Raises:
        KeyError: No key carries ``prefix``, no key matches the model, or
            some of the model's weights are missing; the message names them.
        ValueError: Shapes differ; the message lists the keys and both shapes.
    """
    logger = MMLogger.get_current_instance()
    checkpoint = CheckpointLoader.load_checkpoint(filename, map_location=map_location)
    state = extract_state_dict(checkpoint)
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
    upgrade_state_dict(state)
    _resize_pos_embeds(model, state, logger)

    own = model.state_dict()
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
    mismatched = [f'{k}: checkpoint {tuple(state[k].shape)} vs model '
                  f'{tuple(own[k].shape)}' for k in matched
                  if state[k].shape != own[k].shape]
    if mismatched:
        raise ValueError(f'Shapes of {filename} do not fit the model (is the arch '
                         f'the same?): ' + '; '.join(mismatched))
    unexpected = [k for k in state if k not in own]
    model.load_state_dict({k: state[k] for k in matched}, strict=True)
    logger.info(f'Loaded {len(matched)} weights from {filename}' +
                (f'; ignored {unexpected}' if unexpected else ''))
