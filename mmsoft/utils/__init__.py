"""Utilities: environment report and safe checkpoint loading."""
from .env import collect_env
from .safe_checkpoint import load_local_checkpoint, safe_globals

__all__ = ['collect_env', 'load_local_checkpoint', 'safe_globals']
