"""Helpers for the training and test entry points."""
from .launch import (
    finish_distributed,
    init_cpu_distributed,
    load_config,
    prepare_config,
)

__all__ = ['load_config', 'prepare_config', 'init_cpu_distributed',
           'finish_distributed']
