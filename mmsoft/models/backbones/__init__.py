"""Backbones."""
from .soft import SOFT

__all__ = ['SOFT']
