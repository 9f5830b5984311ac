"""Utilities: environment report and safe checkpoint loading."""
from typing import Any

from .safe_checkpoint import allow_mmengine_checkpoints, load_local_checkpoint

__all__ = ['collect_env', 'allow_mmengine_checkpoints', 'load_local_checkpoint']


def __getattr__(name: str) -> Any:
    # Imported on first use so that ``python -m mmsoft.utils.collect_env``
    # does not find its own module already imported.
    if name == 'collect_env':
        from .collect_env import collect_env
        return collect_env
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
