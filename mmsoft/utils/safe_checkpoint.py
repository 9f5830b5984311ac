"""Weights-only loading of OpenMMLab checkpoints under torch >= 2.6.

torch >= 2.6 loads with ``weights_only=True`` by default, and released
mmengine (0.10.x) calls ``torch.load`` without the argument, so resuming,
``load_from`` and ``init_cfg=dict(type='Pretrained')`` fail on mmengine's own
checkpoints. Rather than switching the safe loader off,
:func:`safe_globals` lists exactly the globals those checkpoints hold, for
torch's allow-list:

- ``mmengine.logging.HistoryBuffer`` (the message hub's logged scalars);
- numpy arrays, dtypes and scalars (inside those buffers);
- ``getattr``, replaced by a stand-in that only returns HistoryBuffer's
  registered statistics methods (a general ``getattr`` would let a pickle
  reach any attribute, and from there arbitrary code).

Anything else, such as a pickle that calls ``os.system``, is still refused.
:func:`load_local_checkpoint` loads with that allow-list (added for the call
only) and names the file in every refusal. Whether ``import mmsoft`` also adds
the allow-list to torch process-wide and makes mmengine load local paths
through :func:`load_local_checkpoint` is decided in
:mod:`mmsoft.process_patches`.
"""
import contextlib
import os.path as osp
import pickle
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from mmengine.logging import HistoryBuffer

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
    """The globals of mmengine checkpoints that weights-only loads allow."""
    return [
        HistoryBuffer,
        (history_buffer_method, 'builtins.getattr'),
        (history_buffer_method, '__builtin__.getattr'),
    ] + _numpy_globals()


def _allow_list(extra: Sequence = ()) -> contextlib.AbstractContextManager:
    """The allow-list (plus ``extra``) for one load, where torch supports it."""
    if not hasattr(torch.serialization, 'safe_globals'):
        return contextlib.nullcontext()  # torch < 2.5: the process-wide list only
    # Leaving the context removes what it added, even entries that were on
    # the process-wide list before: add only those that are not.
    present = torch.serialization.get_safe_globals()
    missing = [g for g in safe_globals() + list(extra) if g not in present]
    return torch.serialization.safe_globals(missing)


def _refused_for_code(err: Exception) -> bool:
    """Whether a weights-only refusal is about a disallowed object, not garbage."""
    text = str(err)
    return ('Unsupported global' in text or 'Unsupported class' in text
            or 'Refusing getattr' in text)


def load_local_checkpoint(filename: str,
                          map_location: Optional[Union[str, Callable]] = None,
                          extra_safe_globals: Sequence = ()) -> Any:
    """Load a local checkpoint with torch's weights-only loader and clear errors.

    Args:
        filename (str): Path of the checkpoint file.
        map_location (str | Callable, optional): As for :func:`torch.load`.
            Defaults to None.
        extra_safe_globals (Sequence): Plain classes to allow besides
            mmengine's (e.g. ``argparse.Namespace``), for this load only.
            Defaults to ``()``.

    Returns:
        The loaded object (a dict for every checkpoint torch or mmengine
        writes).

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
        with _allow_list(extra_safe_globals):
            return torch.load(filename, map_location=map_location,
                              weights_only=True)
    except pickle.UnpicklingError as err:
        if _refused_for_code(err):
            raise pickle.UnpicklingError(
                f'Refused to load checkpoint {filename}: it holds objects that '
                'a weights-only load does not allow, which can run code. Load '
                'only checkpoints of plain tensors; if you wrote this file '
                'yourself, save its tensors again with torch.save. Details: '
                f'{_reason(err)}') from err
        raise RuntimeError(_not_a_checkpoint(filename, err)) from err
    except (RuntimeError, EOFError, ValueError) as err:
        raise RuntimeError(_not_a_checkpoint(filename, err)) from err


def _reason(err: Exception) -> str:
    """torch's reason in one line, without its advice to load unsafely."""
    text = str(err)
    marker = 'WeightsUnpickler error:'
    if marker in text:
        text = text[text.index(marker) + len(marker):]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _not_a_checkpoint(filename: str, err: Exception) -> str:
    detail = _reason(err)
    return (f'Checkpoint {filename} is truncated or not a torch checkpoint '
            f'({type(err).__name__}: {detail}). Re-download or re-save it; when '
            'resuming, point --resume at an earlier checkpoint.')
