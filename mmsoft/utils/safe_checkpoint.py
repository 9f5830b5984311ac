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
only) and names the file in every refusal. :mod:`mmsoft.runtime` also adds
the allow-list to torch process-wide and makes mmengine load local paths
through :func:`load_local_checkpoint`.
"""
import contextlib
import os.path as osp
import pickle
import pickletools
import re
import zipfile
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


# torch's wordings for a weights-only refusal of what a pickle would build or
# call, from torch 2.1 on: a global that is not allowed ("Unsupported class"
# up to 2.3, "Unsupported global: GLOBAL ..." from 2.4), a global of a blocked
# module ("Trying to load unsupported GLOBAL posix.system whose module posix
# is blocked", from 2.5), a call or construction of something not allowed, and
# mmsoft's own getattr stand-in.
_CODE_REFUSAL = re.compile(
    r'Unsupported (?:class|global)\b'
    r'|unsupported GLOBAL \S+ whose module \S+ is blocked'
    r'|Trying to (?:instantiate unsupported class|call reduce for unrecognized '
    r'function)'
    r'|Can only (?:create new object|build) '
    r'|Refusing getattr')
# A byte the weights-only unpickler does not read as an instruction: a pickle
# instruction it does not support (pickle protocol 3 or later, or a pickler
# other than torch.save's), or no pickle instruction at all (corruption).
_UNREAD_INSTRUCTION = re.compile(r'Unsupported operand (\d+)')
# torch's advice around a refusal: to load unsafely, or to allow the global.
_ADVICE = re.compile(r'weights.only|Please use `torch\.serialization|trusted source|'
                     r'file an issue|Check the documentation', re.I)


def _refusal(err: Exception) -> Optional[str]:
    """What a weights-only refusal refused, or None when it is not one.

    Args:
        err (Exception): What ``torch.load(..., weights_only=True)`` raised on
            a file in a torch checkpoint's format.

    Returns:
        str | None: A clause for the error message.
    """
    text = str(err)
    if _CODE_REFUSAL.search(text):
        return ('it holds objects that a weights-only load does not allow, '
                'which can run code')
    unread = _UNREAD_INSTRUCTION.search(text)
    if unread and _is_pickle_instruction(int(unread.group(1))):
        return ('its pickle uses instructions that a weights-only load does not '
                'read (pickle protocol 3 or later, or not written by '
                'torch.save), which can run code')
    return None  # a byte that is no instruction at all: the file is corrupt


def _is_pickle_instruction(code: int) -> bool:
    """Whether the byte ``code`` is an instruction of any pickle protocol."""
    return 0 <= code < 256 and chr(code) in pickletools.code2op


def _checkpoint_format(filename: str) -> Optional[str]:
    """``'zip'`` or ``'legacy'`` (torch's two formats), or what the file is instead.

    Returns:
        str | None: None for a file in a torch checkpoint's format, else a
        short description of the file (text, an incomplete zip archive,
        other bytes).
    """
    if zipfile.is_zipfile(filename):
        return None
    with open(filename, 'rb') as f:
        head = f.read(64)
    if head[:1] == b'\x80':  # a pickle: torch.save before torch 1.6
        return None
    if not head:
        return 'an empty file'
    if head.startswith(b'PK'):
        return 'an incomplete zip archive (truncated)'
    try:
        text = head.decode('utf-8')
    except UnicodeDecodeError:
        return f'other bytes ({head[:8].hex(" ")} ...)'
    if all(c.isprintable() or c in '\t\r\n' for c in text):
        return f'text ({text.splitlines()[0][:40]!r} ...)'
    return f'other bytes ({head[:8].hex(" ")} ...)'


def _name(filename: str) -> str:
    """The path as given, and where it leads when it is a link."""
    if osp.islink(filename):
        return f'{filename} (a link to {osp.realpath(filename)})'
    return filename


def load_local_checkpoint(filename: str,
                          map_location: Optional[Union[str, Callable]] = None,
                          extra_safe_globals: Sequence = (),
                          weights_only: bool = True) -> Any:
    """Load a local checkpoint with torch's weights-only loader and clear errors.

    Args:
        filename (str): Path of the checkpoint file.
        map_location (str | Callable, optional): As for :func:`torch.load`.
            Defaults to None.
        extra_safe_globals (Sequence): Plain classes to allow besides
            mmengine's (e.g. ``argparse.Namespace``), for this load only.
            Defaults to ``()``.
        weights_only (bool): False unpickles the file in full, which RUNS
            ANY CODE pickled in it: only for a file the user trusts and asked
            for so (the converter's ``--unsafe-load``). The file is still
            checked first and its failures are reported as below. Defaults
            to True.

    Returns:
        The loaded object (a dict for every checkpoint torch or mmengine
        writes).

    Raises:
        FileNotFoundError: The file does not exist.
        pickle.UnpicklingError: torch refuses what the file's pickle would
            build or call (for example pickled code, which never runs); the
            message names the file and never advises an unsafe load.
        RuntimeError: The file is truncated, corrupt or not a torch
            checkpoint (text, zeros, a link to another kind of file), or
            (``weights_only=False``) its pickle needs code that is not
            installed; the message names the file.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'Checkpoint {_name(filename)} can not be found.')
    found = _checkpoint_format(filename)
    if found is not None:
        raise RuntimeError(_not_a_checkpoint(filename, f'it is {found}'))
    if not weights_only:
        return _load_unsafely(filename, map_location)
    try:
        with _allow_list(extra_safe_globals):
            return torch.load(filename, map_location=map_location,
                              weights_only=True)
    except pickle.UnpicklingError as err:
        refused = _refusal(err)
        if refused is None:
            raise RuntimeError(_not_a_checkpoint(filename, _detail(err))) from err
        raise pickle.UnpicklingError(
            f'Refused to load checkpoint {_name(filename)}: {refused}; nothing '
            'in it was run. Use checkpoints of plain tensors. If you trust the '
            'file, save its weights again as plain tensors and load those (a '
            'released SOFT checkpoint: tools/model_converters/soft2mmsoft.py '
            f'with --unsafe-load converts it). torch refused: {_reason(err)}'
        ) from err
    except Exception as err:  # garbage makes the unpickler raise anything
        raise RuntimeError(_not_a_checkpoint(filename, _detail(err))) from err


def _load_unsafely(filename: str,
                   map_location: Optional[Union[str, Callable]]) -> Any:
    """A full unpickling of a checkpoint already checked, its failures named."""
    try:
        return torch.load(filename, map_location=map_location, weights_only=False)
    except (ImportError, AttributeError) as err:  # a class that is not here
        raise RuntimeError(
            f'Checkpoint {_name(filename)} holds objects of code that is not '
            f'installed here ({_detail(err)}); install it, or save the weights '
            'again as plain tensors where it is.') from err
    except Exception as err:  # garbage makes the unpickler raise anything
        raise RuntimeError(_not_a_checkpoint(filename, _detail(err))) from err


def _reason(err: Exception) -> str:
    """torch's reason in one sentence, without its advice to load unsafely."""
    text = str(err)
    if 'TorchScript' in text:
        return 'a TorchScript archive (a compiled program, not a checkpoint)'
    marker = 'WeightsUnpickler error:'
    if marker in text:
        text = text[text.rindex(marker) + len(marker):]
    sentences = re.split(r'(?<=[.!?])\s+|\n', text)
    kept = [s.strip() for s in sentences if s.strip() and not _ADVICE.search(s)]
    return kept[0] if kept else ''


def _detail(err: Exception) -> str:
    """The error's type and torch's reason, for a file that is not a checkpoint."""
    reason = _reason(err)
    return f'{type(err).__name__}: {reason}' if reason else type(err).__name__


def _not_a_checkpoint(filename: str, detail: str) -> str:
    return (f'Checkpoint {_name(filename)} is truncated, corrupt or not a torch '
            f'checkpoint ({detail}). Re-download or re-save it; when resuming, '
            'point --resume at an earlier checkpoint.')
