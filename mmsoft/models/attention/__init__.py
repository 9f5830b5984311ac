"""Attention modules."""
from .soft_attention import SOFTAttention

__all__ = ['SOFTAttention']
