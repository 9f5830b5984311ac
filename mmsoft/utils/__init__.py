"""Utilities: environment report, safe checkpoint loading, output path checks."""
from .env import collect_env, cpu_model
from .output_paths import check_output_file, check_output_folder, check_outputs_in
from .safe_checkpoint import load_local_checkpoint, safe_globals

__all__ = ['collect_env', 'cpu_model', 'load_local_checkpoint', 'safe_globals',
           'check_output_file', 'check_output_folder', 'check_outputs_in']
