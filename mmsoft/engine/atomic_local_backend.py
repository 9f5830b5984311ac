"""Local file writes that never leave a half-written checkpoint behind.

A file is written to a hidden temporary next to it, named
``.<name>.tmp-<host>-<pid>-<8 random characters>``, and renamed into place.
A process killed while writing leaves that temporary behind;
:func:`remove_stale_temporaries` deletes the ones whose writer is gone, and
runs after every save (and when a run resumes), so they never pile up.
mmengine writes local files this way once :mod:`mmsoft.runtime` is imported.
"""
import contextlib
import os
import os.path as osp
import re
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import Iterator, List, Union

import mmengine
from mmengine.fileio.backends import LocalBackend

_TEMP_NAME = re.compile(
    r'^\.(?P<target>.+)\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$')
# Written by mmsoft <= 0.1 (``tempfile.mkstemp``): no writer recorded, so such
# a file is only removed once it has not changed for an hour.
_LEGACY_TEMP_NAME = re.compile(r'^\.(?P<target>.+\.(?:pth|json|py|log))\.'
                               r'[a-z0-9_]{8}$')
LEGACY_TEMP_MIN_AGE_S = 3600


def _host() -> str:
    return socket.gethostname().replace('/', '_') or 'localhost'


def temporary_name(filepath: Union[str, Path]) -> str:
    """The hidden temporary path a write of ``filepath`` goes through."""
    folder, name = osp.split(osp.abspath(filepath))
    return osp.join(folder, f'.{name}.tmp-{_host()}-{os.getpid()}-'
                    f'{secrets.token_hex(4)}')


def is_temporary(filepath: Union[str, Path]) -> bool:
    """Whether ``filepath`` is named like a temporary of an atomic write.

    Such a file may be partial: it is never a checkpoint to load.
    """
    name = osp.basename(str(filepath))
    return bool(_TEMP_NAME.match(name) or _LEGACY_TEMP_NAME.match(name))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user
    return True


def _is_stale(folder: str, name: str) -> bool:
    match = _TEMP_NAME.match(name)
    if match:
        # A writer on another host cannot be checked from here: leave it.
        return (match.group('host') == _host()
                and not _pid_alive(int(match.group('pid'))))
    if _LEGACY_TEMP_NAME.match(name):
        try:
            age = time.time() - os.stat(osp.join(folder, name)).st_mtime
        except FileNotFoundError:
            return False
        return age >= LEGACY_TEMP_MIN_AGE_S
    return False


def remove_stale_temporaries(folder: Union[str, Path]) -> List[str]:
    """Delete temporaries of atomic writes in ``folder`` whose writer is gone.

    A temporary (a file, or a folder such as the result parts of a
    distributed evaluation) is stale when the process that wrote it (same host, pid in
    its name) no longer runs, or, for the unnamed temporaries of older
    versions, when it has not changed for an hour. Files of any other name,
    and temporaries of running writers or of other hosts, are left alone.

    Args:
        folder (str | Path): The folder to clean, e.g. a work dir.

    Returns:
        list[str]: The paths removed.
    """
    folder = str(folder)
    if not osp.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        if _is_stale(folder, name):
            path = osp.join(folder, name)
            try:
                if osp.isdir(path) and not osp.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_output(filepath: Union[str, Path]) -> Iterator[str]:
    """A temporary path to write ``filepath`` through; renamed into place at the end.

    The block writes a new file at the path it is given (its mode is then a
    plain ``open()``'s, ``0o666`` less the umask). When the block ends
    without an error the file replaces ``filepath``; otherwise it is removed
    and ``filepath`` is left as it was. Stale temporaries of earlier killed
    writes in the folder are removed afterwards.

    Args:
        filepath (str | Path): The file to write.

    Yields:
        str: The temporary path (hidden, in the same folder).

    Examples:
        >>> import os.path as osp
        >>> import tempfile
        >>> from mmsoft.engine.atomic_local_backend import atomic_output
        >>> path = osp.join(tempfile.mkdtemp(), 'model.onnx')
        >>> with atomic_output(path) as partial:
        ...     _ = open(partial, 'w').write('graph')
        >>> open(path).read()
        'graph'
    """
    folder = osp.dirname(osp.abspath(filepath))
    mmengine.mkdir_or_exist(folder)
    tmp = temporary_name(filepath)
    try:
        yield tmp
        os.replace(tmp, filepath)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise
    remove_stale_temporaries(folder)


class AtomicLocalBackend(LocalBackend):
    """mmengine's local backend, writing to a temporary file and renaming it.

    A run killed while saving leaves the previous file (or none) in place,
    never a truncated checkpoint under the final name. The file gets the
    mode a plain ``open()`` would give it (``0o666`` less the umask), and
    stale temporaries of earlier killed writes in the same folder are
    removed after each write.

    Examples:
        >>> import os.path as osp
        >>> import tempfile
        >>> from mmsoft.engine import AtomicLocalBackend
        >>> path = osp.join(tempfile.mkdtemp(), 'epoch_1.pth')
        >>> AtomicLocalBackend().put(b'weights', path)
        >>> open(path, 'rb').read()
        b'weights'
    """

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        """Write ``obj`` to ``filepath`` atomically."""
        self._atomic_write(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path],
                 encoding: str = 'utf-8') -> None:
        """Write text ``obj`` to ``filepath`` atomically."""
        self._atomic_write(obj.encode(encoding), filepath)

    @staticmethod
    def _atomic_write(data: bytes, filepath: Union[str, Path]) -> None:
        with atomic_output(filepath) as tmp:
            # 0o666 through os.open: the kernel applies the umask, as for open().
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            with os.fdopen(fd, 'wb') as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
