"""One training run per work dir: the lock file and what train.py does with it."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tools import load_tool

from mmsoft.apis import WorkDirLock

REPO = Path(__file__).resolve().parents[2]


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return child.pid


def write_lock(work_dir: Path, **holder) -> None:
    work_dir.mkdir(exist_ok=True)
    (work_dir / 'train.lock').write_text(json.dumps(holder))


def test_a_running_holder_is_refused_and_named(tmp_path):
    with WorkDirLock(str(tmp_path)) as lock:
        holder = json.loads((tmp_path / 'train.lock').read_text())
        assert holder['pid'] == os.getpid() and holder['host'] == socket.gethostname()
        with pytest.raises(RuntimeError, match=rf'holds .*train\.lock \(pid '
                           rf'{os.getpid()} on host .*kill {os.getpid()}'):
            WorkDirLock(str(tmp_path)).acquire()
        assert lock.holder()['pid'] == os.getpid()
    assert not (tmp_path / 'train.lock').exists()


@pytest.mark.parametrize('holder', [
    dict(pid='dead', host=socket.gethostname()),  # filled in below
    dict(pid=os.getpid(), host=socket.gethostname(), start_time='1'),  # pid reused
    dict(),  # killed before it wrote the lock
])
def test_stale_locks_are_taken_over(tmp_path, holder):
    if holder.get('pid') == 'dead':
        holder['pid'] = dead_pid()
    write_lock(tmp_path, **holder)
    lock = WorkDirLock(str(tmp_path))
    lock.acquire()
    assert lock.holder()['pid'] == os.getpid()
    lock.release()


def test_a_holder_that_ended_unreaped_is_stale(tmp_path):
    # A worker killed with its launcher may stay a zombie: its parent is
    # gone and the machine's first process need not reap it.
    from helpers.processes import process_state, wait_for
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    try:
        assert wait_for(lambda: process_state(child.pid) == 'Z', 30)
        write_lock(tmp_path, pid=child.pid, host=socket.gethostname())
        lock = WorkDirLock(str(tmp_path))
        lock.acquire()
        assert lock.holder()['pid'] == os.getpid()
        lock.release()
    finally:
        child.wait()


def test_a_lock_of_another_host_says_which_file_to_delete(tmp_path):
    write_lock(tmp_path, pid=dead_pid(), host='another-node', started='today')
    with pytest.raises(RuntimeError, match=r'pid \d+ on host another-node.*if it is '
                       r'gone, delete .*train\.lock'):
        WorkDirLock(str(tmp_path)).acquire()


def test_release_leaves_a_lock_of_another_process(tmp_path):
    lock = WorkDirLock(str(tmp_path))
    lock.acquire()
    write_lock(tmp_path, pid=1, host='another-node')
    lock.release()
    assert (tmp_path / 'train.lock').exists()


def test_train_refuses_a_held_work_dir_and_a_temporary_as_checkpoint(tmp_path):
    train = load_tool(REPO / 'tools/train.py', 'train_tool')
    config = str(REPO / 'configs' / 'soft_tiny_digits.py')
    with WorkDirLock(str(tmp_path)):
        with pytest.raises(RuntimeError, match='Another training run holds'):
            train.main([config, '--work-dir', str(tmp_path), '--resume'])
    partial = tmp_path / f'.epoch_2.pth.tmp-{socket.gethostname()}-{dead_pid()}-0a1b2c3d'
    with pytest.raises(ValueError, match=r'temporary file of a checkpoint write that '
                       'never finished'):
        train.main([config, '--work-dir', str(tmp_path), '--resume', str(partial)])
    assert not (tmp_path / 'train.lock').exists()
