"""One training run per work dir: a lock file naming the run that holds it."""
import json
import os
import os.path as osp
import socket
import sys
import time
from typing import Optional

from mmengine.logging import print_log

LOCK_NAME = 'train.lock'


def _stat_fields(pid: int) -> Optional[list]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may
    hold spaces), from the state (field 3) on; None where unknown."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()
    except OSError:
        return None


def _started(fields: Optional[list]) -> Optional[str]:
    """The start time (field 22) among :func:`_stat_fields`, if there."""
    return fields[19] if fields and len(fields) > 19 else None


def _start_time(pid: int) -> Optional[str]:
    """The kernel's start time of ``pid`` (tells a reused pid apart), if known."""
    return _started(_stat_fields(pid))


def _alive(pid: int, started: Optional[str]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    fields = _stat_fields(pid)
    if fields and fields[0] in ('Z', 'X'):
        return False  # ended; its parent has not reaped it (or was killed)
    now = _started(fields)
    return started is None or now is None or now == started


class WorkDirLock:
    """A lock file ``<work_dir>/train.lock`` held by one training run.

    It holds the pid, host and start time of the process that took it.
    :meth:`acquire` refuses while that process runs; a lock whose process
    is gone from this host (killed, even by SIGKILL) is stale and taken
    over. A lock from another host cannot be checked from here: it is
    refused, and the message says which file to delete if that run is gone.

    Args:
        work_dir (str): The run's work dir (created if missing).

    Examples:
        >>> import tempfile
        >>> from mmsoft.apis import WorkDirLock
        >>> work_dir = tempfile.mkdtemp()
        >>> with WorkDirLock(work_dir):
        ...     WorkDirLock(work_dir).acquire()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        RuntimeError: Another training run holds ...
    """

    def __init__(self, work_dir: str) -> None:
        self.path = osp.join(work_dir, LOCK_NAME)
        self._held = False

    def holder(self) -> Optional[dict]:
        """The lock's content, or None without a lock (``{}`` if unreadable)."""
        try:
            with open(self.path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}

    def is_stale(self, holder: dict) -> bool:
        """Whether the process named in ``holder`` is gone from this host."""
        if not isinstance(holder.get('pid'), int) or 'host' not in holder:
            return True  # written by a process killed before it finished
        return (holder['host'] == socket.gethostname()
                and not _alive(holder['pid'], holder.get('start_time')))

    def acquire(self) -> None:
        """Take the lock, replacing a stale one.

        Raises:
            RuntimeError: A running process holds it; the message names it.
        """
        os.makedirs(osp.dirname(self.path) or '.', exist_ok=True)
        content = json.dumps(dict(
            pid=os.getpid(), host=socket.gethostname(),
            start_time=_start_time(os.getpid()),
            started=time.strftime('%Y-%m-%d %H:%M:%S'), command=sys.argv))
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                holder = self.holder()
                if holder is None:
                    continue  # released meanwhile
                if not self.is_stale(holder):
                    raise RuntimeError(self._refusal(holder)) from None
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                print_log(f'Replaced the stale lock {self.path} of a run that is '
                          f'gone ({holder}).', logger='current')
                continue
            with os.fdopen(fd, 'w') as f:
                f.write(content)
            self._held = True
            return
        raise RuntimeError(f'Could not take {self.path}: other runs keep '
                           'replacing it.')

    def _refusal(self, holder: dict) -> str:
        where = (f'pid {holder["pid"]} on host {holder["host"]}, started '
                 f'{holder.get("started", "?")}')
        same_host = holder['host'] == socket.gethostname()
        return (f'Another training run holds {self.path} ({where}); two runs '
                'writing one work dir would overwrite each other\'s checkpoints. '
                + ('Stop that run first (kill ' + str(holder['pid']) + ')'
                   if same_host else 'Stop that run first; if it is gone, '
                   f'delete {self.path}')
                + ', or use another --work-dir.')

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if not self._held:
            return
        self._held = False
        holder = self.holder()
        if holder and holder.get('pid') == os.getpid():
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> 'WorkDirLock':
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
