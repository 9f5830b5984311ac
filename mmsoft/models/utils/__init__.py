"""Model utilities: position embeddings and checkpoint handling."""
from .checkpoint_loading import (
    extract_state_dict,
    load_fitting_weights,
    load_pretrained,
)
from .ckpt_convert import convert_soft_state_dict, is_official_soft, strip_prefix
from .finite import check_finite_weights, finite_flag, non_finite_weights
from .pos_embed import resize_pos_embed
from .token_maps import tokens_as_map

__all__ = [
    'extract_state_dict', 'load_fitting_weights', 'load_pretrained',
    'convert_soft_state_dict', 'is_official_soft', 'strip_prefix', 'resize_pos_embed',
    'check_finite_weights', 'finite_flag', 'non_finite_weights', 'tokens_as_map'
]
