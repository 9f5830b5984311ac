"""Key conversion from the released SOFT checkpoints to mmsoft's layout."""
import re
from collections import OrderedDict
from typing import Dict, Mapping, Tuple

from torch import Tensor

# Released key pattern -> mmsoft key template, for the backbone.
_BACKBONE_RULES: Tuple[Tuple[str, str], ...] = (
    (r'pos_embed(\d)$', 'pos_embeds.{0-}'),
    (r'cls_token$', 'cls_token'),
    (r'patch_embed(\d)\.proj\.(\d)\.(\w+)$', 'patch_embeds.{0-}.proj.{1}.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.W_q\.(\w+)$', 'stages.{0-}.{1}.attn.q.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.W_v\.(\w+)$', 'stages.{0-}.{1}.attn.v.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.Qlandmark_op\.weight$',
     'stages.{0-}.{1}.attn.landmark_conv.weight'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.Qnorm_act\.0\.(\w+)$',
     'stages.{0-}.{1}.attn.landmark_norm.{2}'),
    (r'block([123])\.(\d+)\.att\.mha\.attn\.conv\.weight$',
     'stages.{0-}.{1}.attn.v_conv.weight'),
    (r'block([123])\.(\d+)\.att\.mha\.ff\.(\w+)$', 'stages.{0-}.{1}.attn.proj.{2}'),
    (r'block([123])\.(\d+)\.att\.norm([12])\.(\w+)$', 'stages.{0-}.{1}.norm{2}.{3}'),
    (r'block([123])\.(\d+)\.att\.ff([12])\.(\w+)$', 'stages.{0-}.{1}.mlp.fc{2}.{3}'),
    (r'block4\.(\d+)\.((?:norm[12]|attn\.(?:q|kv|proj)|mlp\.fc[12])\.\w+)$',
     'stages.3.{0}.{1}'),
    (r'norm\.(\w+)$', 'norm.{0}'),
)
_HEAD_RULE = (r'head\.(\w+)$', 'head.fc.{0}')


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


def strip_prefix(state_dict: Mapping[str, Tensor], prefix: str) -> Dict[str, Tensor]:
    """Drop ``prefix`` from every key that has it (e.g. DDP's ``'module.'``)."""
    return OrderedDict((key[len(prefix):] if key.startswith(prefix) else key, value)
                       for key, value in state_dict.items())


def convert_soft_state_dict(state_dict: Mapping[str, Tensor],
                            with_head: bool = False
                            ) -> Tuple['OrderedDict[str, Tensor]', list]:
    """Map a released SOFT state dict onto :class:`mmsoft.models.SOFT` keys.

    Args:
        state_dict (Mapping[str, Tensor]): Released weights, without any
            ``module.`` prefix.
        with_head (bool): Also map ``head.*`` to mmpretrain's
            ``head.fc.*`` and prefix backbone keys with ``backbone.``, giving
            an ``ImageClassifier`` state dict. Defaults to False.

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
    return converted, leftovers
