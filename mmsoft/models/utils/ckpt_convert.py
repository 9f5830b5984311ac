"""The key tables of SOFT checkpoints: released and earlier mmsoft layouts to today's.

Two tables, the one place that knows old layouts: :data:`_BACKBONE_RULES`
maps the released checkpoints' keys (``block1.0.att.mha.W_q.weight``), and
:data:`_V1_RULES` the keys mmsoft wrote before its stages became modules
(``patch_embeds.0``, ``pos_embeds.0``, ``stages.0.0``, ``cls_token``,
``norm``), onto the current layout (``stages.0.patch_embed``,
``stages.0.pos_embed``, ``stages.0.blocks.0``, ``stages.3.cls_token``,
``stages.3.norm``).
"""
import re
from collections import OrderedDict
from typing import Dict, Mapping, Optional, Tuple

import torch
from torch import Tensor

from mmsoft.ops import NEWTON_VARIANTS

# Released key pattern -> mmsoft key template, for the backbone.
_BACKBONE_RULES: Tuple[Tuple[str, str], ...] = (
    (r'pos_embed(\d)$', 'stages.{0-}.pos_embed'),
    (r'cls_token$', 'stages.3.cls_token'),
    (r'patch_embed(\d)\.proj\.(\d)\.(\w+)$', 'stages.{0-}.patch_embed.proj.{1}.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.W_q\.(\w+)$',
     'stages.{0-}.blocks.{1}.attn.q.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.W_v\.(\w+)$',
     'stages.{0-}.blocks.{1}.attn.v.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.Qlandmark_op\.weight$',
     'stages.{0-}.blocks.{1}.attn.landmark_conv.weight'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.Qnorm_act\.0\.(\w+)$',
     'stages.{0-}.blocks.{1}.attn.landmark_norm.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.conv\.weight$',
     'stages.{0-}.blocks.{1}.attn.v_conv.weight'),
    (r'block([123])\.(\d+)\.att\.mha\.ff\.(\w+)$',
     'stages.{0-}.blocks.{1}.attn.proj.{2}'),
    (r'block([123])\.(\d+)\.att\.norm([12])\.(\w+)$',
     'stages.{0-}.blocks.{1}.norm{2}.{3}'),
    (r'block([123])\.(\d+)\.att\.ff([12])\.(\w+)$',
     'stages.{0-}.blocks.{1}.mlp.fc{2}.{3}'),
    (r'block4\.(\d+)\.((?:norm[12]|attn\.(?:q|kv|proj)|mlp\.fc[12])\.\w+)$',
     'stages.3.blocks.{0}.{1}'),
    (r'norm\.(\w+)$', 'stages.3.norm.{0}'),
)
# mmsoft's keys before version 2 of SOFT -> today's keys.
_V1_RULES: Tuple[Tuple[str, str], ...] = (
    (r'patch_embeds\.(\d)\.(.+)$', 'stages.{0}.patch_embed.{1}'),
    (r'pos_embeds\.(\d)$', 'stages.{0}.pos_embed'),
    (r'stages\.(\d)\.(\d+)\.(.+)$', 'stages.{0}.blocks.{1}.{2}'),
    (r'cls_token$', 'stages.3.cls_token'),
    (r'norm\.(\w+)$', 'stages.3.norm.{0}'),
)
_HEAD_RULE = (r'head\.(\w+)$', 'head.fc.{0}')
NEWTON_CODES: Dict[str, int] = {name: code for code, name in enumerate(NEWTON_VARIANTS)}
"""How the ``newton_variant`` entry of a SOFT state dict encodes the Newton
inverse (-1: none of them)."""
RELEASED_NEWTON = 'backoff'
"""The Newton inverse every released SOFT checkpoint was trained with."""


def _apply(template: str, groups: Tuple[str, ...]) -> str:
    """Fill ``{i}`` with group i and ``{i-}`` with group i minus one."""
    def fill(match: re.Match) -> str:
        value = groups[int(match.group(1))]
        return str(int(value) - 1) if match.group(2) else value
    return re.sub(r'\{(\d)(-?)\}', fill, template)


def is_official_soft(state_dict: Mapping[str, Tensor]) -> bool:
    """Whether the keys follow the released SOFT layout (``block1.0.att...``)."""
    return any(re.match(r'(block[1-4]\.|patch_embed[1-4]\.)', key)
               for key in state_dict)


def strip_prefix(state_dict: Mapping[str, Tensor], prefix: str,
                 source: str = 'the state dict') -> Dict[str, Tensor]:
    """Drop ``prefix`` from every key that has it (e.g. DDP's ``'module.'``).

    Args:
        state_dict (Mapping[str, Tensor]): Weights.
        prefix (str): The prefix to drop.
        source (str): How to name the weights in errors, e.g. the
            checkpoint's path. Defaults to ``'the state dict'``.

    Returns:
        dict[str, Tensor]: The weights under the shorter keys.

    Raises:
        ValueError: Two keys become one (``module.k`` and ``k``): which copy
            is meant is not known, so none is taken; the message names them.

    Examples:
        >>> import torch
        >>> list(strip_prefix({'module.w': torch.ones(1), 'b': torch.ones(1)},
        ...                   'module.'))
        ['w', 'b']
    """
    stripped: Dict[str, Tensor] = OrderedDict()
    sources: Dict[str, str] = {}
    collisions = []
    for key, value in state_dict.items():
        new_key = key[len(prefix):] if key.startswith(prefix) else key
        if new_key in stripped:
            collisions.append(f'{sources[new_key]!r} and {key!r} -> {new_key!r}')
        stripped[new_key], sources[new_key] = value, key
    if collisions:
        raise ValueError(
            f'{source} holds weights twice, with and without the prefix '
            f'{prefix!r} ({len(collisions)} of them): {"; ".join(collisions[:8])}'
            f'{" ..." if len(collisions) > 8 else ""}. Which copy is meant is '
            'not known; save the checkpoint again with one copy of each weight.')
    return stripped


def upgrade_state_dict(state_dict: Dict[str, Tensor], prefix: str = '',
                       source: str = 'the state dict') -> list:
    """Rename, in place, keys of mmsoft's SOFT layout before version 2.

    Keys of today's layout match no rule and stay as they are, so this is
    safe on any SOFT state dict.

    Args:
        state_dict (dict): Weights; only keys starting with ``prefix`` are
            looked at.
        prefix (str): Prefix of the backbone's keys, such as ``'backbone.'``.
            Defaults to ``''``.
        source (str): How to name the weights in errors, e.g. the
            checkpoint's path. Defaults to ``'the state dict'``.

    Returns:
        list: The old keys that were renamed.

    Raises:
        ValueError: An old key's new name is taken (the weights of both
            layouts): the message names both keys, and nothing is renamed.
    """
    renames = {}
    for key in [k for k in state_dict if k.startswith(prefix)]:
        for pattern, template in _V1_RULES:
            match = re.match(pattern, key[len(prefix):])
            if match:
                renames[key] = prefix + _apply(template, match.groups())
                break
    taken = [f'{old!r} and {new!r}' for old, new in renames.items()
             if new in state_dict]
    if taken:
        raise ValueError(
            f'{source} holds keys of both SOFT layouts for the same weight: '
            f'{"; ".join(taken[:8])}{" ..." if len(taken) > 8 else ""}. Which copy '
            'is meant is not known; save the checkpoint again with one layout.')
    for key, new_key in renames.items():
        state_dict[new_key] = state_dict.pop(key)
    return list(renames)


def convert_soft_state_dict(state_dict: Mapping[str, Tensor],
                            with_head: bool = False,
                            newton: Optional[str] = None
                            ) -> Tuple['OrderedDict[str, Tensor]', list]:
    """Map a released SOFT state dict onto :class:`mmsoft.models.SOFT` keys.

    Args:
        state_dict (Mapping[str, Tensor]): Released weights, without any
            ``module.`` prefix.
        with_head (bool): Also map ``head.*`` to mmpretrain's
            ``head.fc.*`` and prefix backbone keys with ``backbone.``, giving
            an ``ImageClassifier`` state dict. Defaults to False.
        newton (str, optional): Record this Newton inverse (``'backoff'``,
            as every release was trained, or ``'ridge'``) in the result's
            ``newton_variant`` entry, which the backbone takes on load.
            Defaults to None (record nothing).

    Returns:
        tuple[OrderedDict, list]: The converted weights and the keys no rule
        matched.
    """
    converted: 'OrderedDict[str, Tensor]' = OrderedDict()
    leftovers = []
    for key, value in state_dict.items():
        for pattern, template in _BACKBONE_RULES:
            match = re.match(pattern, key)
            if match:
                new_key = _apply(template, match.groups())
                converted[f'backbone.{new_key}' if with_head else new_key] = value
                break
        else:
            match = re.match(_HEAD_RULE[0], key)
            if with_head and match:
                converted[_apply(_HEAD_RULE[1], match.groups())] = value
            else:
                leftovers.append(key)
    if newton is not None:
        if newton not in NEWTON_CODES:
            raise ValueError(f'Unknown Newton variant {newton!r}; use one of '
                             f'{tuple(NEWTON_CODES)}.')
        key = 'backbone.newton_variant' if with_head else 'newton_variant'
        converted[key] = torch.tensor(NEWTON_CODES[newton])
    return converted, leftovers
