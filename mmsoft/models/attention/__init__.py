"""Token mixers: SOFT attention, the peers it is compared with, and their contract."""
from .agent import AgentAttention
from .diagnostics import attention_row, inverse_residual
from .focused_linear import FocusedLinearAttention
from .peers import (
                    NystromAttention,
                    PerformerAttention,
                    SoftmaxAttention2d,
                    SpatialReductionAttention,
)
from .soft_attention import SOFTAttention
from .token_mixer import TokenMixer, build_token_mixer, check_tokens, token_mixer_names

__all__ = [
    'SOFTAttention', 'SoftmaxAttention2d', 'SpatialReductionAttention',
    'PerformerAttention', 'NystromAttention', 'FocusedLinearAttention',
    'AgentAttention', 'TokenMixer', 'build_token_mixer', 'check_tokens',
    'token_mixer_names',
    'attention_row', 'inverse_residual'
]
