"""A torchrun worker ends with its launcher, from its first statement on.

torchrun starts each worker in a session of its own, so ``kill -9`` of the
launcher (or of its process group) never reaches the workers, and a killed
launcher cannot end them. On Linux the kernel can: :func:`follow_launcher`,
run first by ``tools/train.py`` and ``tools/test.py`` (loaded by its path,
with the standard library only, before the seconds of imports), asks for
SIGTERM when the worker's parent ends (``prctl(PR_SET_PDEATHSIG)``), then
checks that its parent is still the launcher, which covers a launcher that
ended before the request. SIGTERM with its default action ends the worker at
once, whatever it runs: an import, a process group's start, a training step.

Which process is the launcher: ``MMSOFT_LAUNCHER_PID``, which
``tools/dist_train.sh`` and ``tools/dist_test.sh`` set to their own pid
(torchrun replaces the shell and keeps it), so a launcher killed while the
worker's interpreter starts is noticed too; without it, the worker's parent
when this runs. The pid is left in ``MMSOFT_LAUNCHER_PID`` for
:func:`mmsoft.apis.stop_with_launcher`, which watches it once the imports are
done (on every platform, and ends the worker's process group).
"""
import ctypes
import os
import signal
import sys
from typing import Optional

LAUNCHER_PID = 'MMSOFT_LAUNCHER_PID'
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    return True


def launcher_pid() -> Optional[int]:
    """The pid of the torchrun that started this process; None without torchrun.

    ``MMSOFT_LAUNCHER_PID`` names it when it is this process's parent, or
    when that process is gone (the launcher died before this ran). A live
    process that is not the parent means the value was inherited from an
    outer run: the parent is the launcher then.
    """
    if 'TORCHELASTIC_RUN_ID' not in os.environ:
        return None
    parent = os.getppid()
    given = os.environ.get(LAUNCHER_PID, '')
    if not given.isdigit() or int(given) == parent or _alive(int(given)):
        return parent
    return int(given)


def _end_with_parent(sig: int) -> bool:
    """Ask the kernel for ``sig`` when the parent ends (Linux); whether it took."""
    if not sys.platform.startswith('linux'):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig) == 0
    except (OSError, AttributeError):
        return False


def follow_launcher() -> Optional[int]:
    """End this torchrun worker when its launcher ends; a no-op without torchrun.

    Returns:
        int | None: The launcher's pid, or None when torchrun did not start
        this process.

    Raises:
        SystemExit: The launcher is already gone.
    """
    launcher = launcher_pid()
    if launcher is None:
        return None
    os.environ[LAUNCHER_PID] = str(launcher)
    _end_with_parent(signal.SIGTERM)
    if os.getppid() != launcher:
        sys.exit(f'mmsoft: the launcher (pid {launcher}) is gone; ending worker '
                 f'{os.getpid()} (rank {os.environ.get("RANK", "?")}).')
    return launcher
