"""Helpers for the training and test entry points."""
from .dataset_checks import check_annotation_files
from .launch import (
    finish_distributed,
    global_rank,
    init_cpu_distributed,
    load_config,
    prepare_config,
    stop_with_launcher,
)
from .work_dir_lock import WorkDirLock

__all__ = ['check_annotation_files', 'load_config', 'prepare_config',
           'init_cpu_distributed', 'finish_distributed', 'stop_with_launcher',
           'global_rank', 'WorkDirLock']
