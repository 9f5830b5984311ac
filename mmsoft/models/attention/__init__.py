"""Attention modules: SOFT and the peers it is compared with."""
from .agent import AgentAttention
from .focused_linear import FocusedLinearAttention
from .peers import (
                    NystromAttention,
                    PerformerAttention,
                    SoftmaxAttention2d,
                    SpatialReductionAttention,
)
from .soft_attention import SOFTAttention

__all__ = [
    'SOFTAttention', 'SoftmaxAttention2d', 'SpatialReductionAttention',
    'PerformerAttention', 'NystromAttention', 'FocusedLinearAttention',
    'AgentAttention'
]
