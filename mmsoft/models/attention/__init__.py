"""Token mixers: SOFT attention, the peers it is compared with, and their contract."""
from .diagnostics import attention_row, inverse_residual
from .peers import (
                    NystromAttention,
                    PerformerAttention,
                    SoftmaxAttention2d,
                    SpatialReductionAttention,
)
from .soft_attention import SOFTAttention
from .token_mixer import TokenMixer, build_token_mixer, check_tokens

__all__ = [
    'SOFTAttention', 'SoftmaxAttention2d', 'SpatialReductionAttention',
    'PerformerAttention', 'NystromAttention', 'TokenMixer', 'build_token_mixer',
    'check_tokens', 'attention_row', 'inverse_residual'
]
