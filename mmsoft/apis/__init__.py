"""Helpers for the training and test entry points."""
from .launch import init_cpu_distributed, prepare_config

__all__ = ['prepare_config', 'init_cpu_distributed']
