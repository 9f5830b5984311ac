"""Processes of the machine, read from /proc (Linux)."""
import os
import time


def process_state(pid: int) -> str:
    """'R', 'S', ... for a live process, 'Z' for a zombie, '' once it is gone."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return ''


def ended(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie awaiting its reaper."""
    return process_state(pid) in ('', 'Z')


def children(pid: int) -> list:
    """The pids whose parent is ``pid``."""
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open(f'/proc/{entry}/stat') as f:
                    ppid = int(f.read().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry))
    return found


def wait_for(condition, timeout: float) -> bool:
    """Poll ``condition()`` every 0.2 s until it holds or ``timeout`` passes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()
