"""Weights-only loading of OpenMMLab checkpoints under torch >= 2.6.

torch >= 2.6 loads with ``weights_only=True`` by default, and released
mmengine (0.10.x) calls ``torch.load`` without the argument, so resuming,
``load_from`` and ``init_cfg=dict(type='Pretrained')`` fail on mmengine's own
checkpoints. Rather than switching the safe loader off,
:func:`allow_mmengine_checkpoints` adds exactly the globals those checkpoints
hold to torch's allow-list:

- ``mmengine.logging.HistoryBuffer`` (the message hub's logged scalars);
- numpy arrays, dtypes and scalars (inside those buffers);
- ``getattr``, replaced by a stand-in that only returns HistoryBuffer's
  registered statistics methods (a general ``getattr`` would let a pickle
  reach any attribute, and from there arbitrary code).

Anything else, such as a pickle that calls ``os.system``, is still refused.
:func:`load_local_checkpoint` replaces mmengine's loader for local paths so
that every refusal or corrupt file names the file.
"""
import os.path as osp
import pickle
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader

_STATISTICS_METHODS = ('min', 'max', 'current', 'mean')


def history_buffer_method(owner: Any, name: str) -> Callable:
    """Restricted ``getattr`` for unpickling mmengine message hubs.

    A ``HistoryBuffer`` pickles its statistics table, whose values are its own
    methods, as ``getattr(HistoryBuffer, 'mean')``. Only that form is served.

    Args:
        owner: Must be ``HistoryBuffer``.
        name (str): One of HistoryBuffer's statistics methods
            (``'min'``, ``'max'``, ``'current'``, ``'mean'`` or one registered
            with ``HistoryBuffer.register_statistics``).

    Returns:
        Callable: The requested method.

    Raises:
        pickle.UnpicklingError: For any other object or attribute.
    """
    allowed = set(_STATISTICS_METHODS) | set(HistoryBuffer._statistics_methods)
    if owner is HistoryBuffer and isinstance(name, str) and name in allowed:
        return getattr(owner, name)
    raise pickle.UnpicklingError(
        f'Refusing getattr({owner!r}, {name!r}) while loading a checkpoint: '
        'only HistoryBuffer statistics methods may be looked up.')


def _numpy_globals() -> List[Union[Callable, Tuple[Callable, str]]]:
    """numpy's pickle entry points under their numpy 1.x and 2.x paths."""
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]
    scalar = np.float64(0).__reduce__()[0]
    entries: List[Union[Callable, Tuple[Callable, str]]] = [np.ndarray, np.dtype]
    for module in ('numpy.core.multiarray', 'numpy._core.multiarray'):
        entries.append((reconstruct, f'{module}._reconstruct'))
        entries.append((scalar, f'{module}.scalar'))
    # numpy >= 1.25 pickles dtypes of some kinds through their DType classes.
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        entries += [cls for cls in vars(dtypes).values()
                    if isinstance(cls, type) and issubclass(cls, np.dtype)]
    return entries


def safe_globals() -> List[Union[Callable, Tuple[Callable, str]]]:
    """Everything :func:`allow_mmengine_checkpoints` adds to torch's allow-list."""
    return [
        HistoryBuffer,
        (history_buffer_method, 'builtins.getattr'),
        (history_buffer_method, '__builtin__.getattr'),
    ] + _numpy_globals()


def allow_mmengine_checkpoints() -> None:
    """Let ``torch.load(weights_only=True)`` read mmengine checkpoints.

    Idempotent. Also makes local checkpoint paths load through
    :func:`load_local_checkpoint`. Called once when ``mmsoft`` is imported.
    """
    if hasattr(torch.serialization, 'add_safe_globals'):
        torch.serialization.add_safe_globals(safe_globals())
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_local_checkpoint, force=True)


def load_local_checkpoint(filename: str,
                          map_location: Optional[Union[str, Callable]] = None
                          ) -> Dict[str, Any]:
    """Load a local checkpoint with torch's weights-only loader and clear errors.

    Args:
        filename (str): Path of the checkpoint file.
        map_location (str | Callable, optional): As for :func:`torch.load`.
            Defaults to None.

    Returns:
        dict: The loaded checkpoint.

    Raises:
        FileNotFoundError: The file does not exist.
        pickle.UnpicklingError: The file holds objects outside the allow-list
            (for example pickled code); the message names the file.
        RuntimeError: The file is truncated or not a torch checkpoint; the
            message names the file.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'Checkpoint {filename} can not be found.')
    try:
        return torch.load(filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise pickle.UnpicklingError(
            f'Refused to load checkpoint {filename}: it holds objects that a '
            'weights-only load does not allow, which can run code. If you trust '
            'its source, convert it once with torch.load(..., weights_only=False) '
            f'and save its tensors again. Details: {err}') from err
    except (RuntimeError, EOFError, ValueError) as err:
        raise RuntimeError(
            f'Checkpoint {filename} is truncated or not a torch checkpoint '
            f'({type(err).__name__}: {err}). Re-download or re-save it; when '
            'resuming, point --resume at an earlier checkpoint.') from err
