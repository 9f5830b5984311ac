"""Helpers for the training and test entry points."""
from .launch import (
    finish_distributed,
    global_rank,
    init_cpu_distributed,
    load_config,
    prepare_config,
    stop_with_launcher,
)
from .work_dir_lock import WorkDirLock

__all__ = ['load_config', 'prepare_config', 'init_cpu_distributed',
           'finish_distributed', 'stop_with_launcher', 'global_rank',
           'WorkDirLock']
