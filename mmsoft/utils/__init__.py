"""Utilities: environment report and safe checkpoint loading."""
from .env import collect_env, cpu_model
from .safe_checkpoint import load_local_checkpoint, safe_globals

__all__ = ['collect_env', 'cpu_model', 'load_local_checkpoint', 'safe_globals']
