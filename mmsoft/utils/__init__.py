"""Utilities: environment report and safe checkpoint loading."""
from .env import collect_env
from .safe_checkpoint import allow_mmengine_checkpoints, load_local_checkpoint

__all__ = ['collect_env', 'allow_mmengine_checkpoints', 'load_local_checkpoint']
