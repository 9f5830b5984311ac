"""Checkpoints are written to a temporary file and renamed into place."""
import os

import pytest
import torch
from mmengine.fileio import get_file_backend
from mmengine.runner.checkpoint import save_checkpoint

import mmsoft.runtime  # noqa: F401  (the local backend writes atomically)
from mmsoft.engine import AtomicLocalBackend


def test_local_paths_use_the_atomic_backend(tmp_path):
    assert isinstance(get_file_backend(str(tmp_path / 'x.pth')), AtomicLocalBackend)


def test_saving_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / 'epoch_1.pth'
    save_checkpoint(dict(state_dict=dict(w=torch.ones(3))), str(path))
    save_checkpoint(dict(state_dict=dict(w=torch.zeros(3))), str(path))
    loaded = torch.load(path, weights_only=True)
    assert torch.equal(loaded['state_dict']['w'], torch.zeros(3))
    assert os.listdir(tmp_path) == ['epoch_1.pth']


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    backend = AtomicLocalBackend()
    path = tmp_path / 'latest.pth'
    backend.put(b'complete checkpoint', path)

    def killed(fd):
        raise KeyboardInterrupt('killed after writing part of the file')

    monkeypatch.setattr(os, 'fsync', killed)
    with pytest.raises(KeyboardInterrupt):
        backend.put(b'new checkpoint that never finishes', path)
    assert path.read_bytes() == b'complete checkpoint'
    assert os.listdir(tmp_path) == ['latest.pth']


@pytest.mark.parametrize('umask', [0o022, 0o027, 0o077])
def test_saved_files_get_the_mode_open_would_give(tmp_path, umask):
    old = os.umask(umask)
    try:
        save_checkpoint(dict(state_dict=dict(w=torch.ones(1))),
                        str(tmp_path / 'epoch_1.pth'))
        with open(tmp_path / 'plain', 'wb'):
            pass
    finally:
        os.umask(old)
    mode = (tmp_path / 'epoch_1.pth').stat().st_mode & 0o777
    assert mode == (tmp_path / 'plain').stat().st_mode & 0o777 == 0o666 & ~umask


def dead_pid():
    """The pid of a process that has exited."""
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return child.pid


def test_stale_temporaries_go_on_the_next_save_and_live_ones_stay(tmp_path):
    import socket
    import time

    from mmsoft.engine.atomic_local_backend import is_temporary
    host = socket.gethostname()
    stale = tmp_path / f'.epoch_2.pth.tmp-{host}-{dead_pid()}-0123abcd'
    running = tmp_path / f'.epoch_2.pth.tmp-{host}-{os.getpid()}-89abcdef'
    elsewhere = tmp_path / f'.epoch_2.pth.tmp-{host}x-{dead_pid()}-0123abcd'
    legacy_old = tmp_path / '.epoch_1.pth.k2j_x9ab'
    legacy_new = tmp_path / '.epoch_3.pth.q1w2e3r4'
    user_file = tmp_path / '.epoch_1.pth.notes'
    for path in (stale, running, elsewhere, legacy_old, legacy_new, user_file):
        path.write_bytes(b'partial')
    hour_ago = time.time() - 3700
    os.utime(legacy_old, (hour_ago, hour_ago))
    assert all(map(is_temporary, (stale, running, elsewhere, legacy_old)))
    assert not is_temporary(user_file) and not is_temporary(tmp_path / 'epoch_1.pth')

    save_checkpoint(dict(state_dict=dict(w=torch.ones(1))), str(tmp_path / 'epoch_1.pth'))
    assert sorted(os.listdir(tmp_path)) == sorted(
        p.name for p in (running, elsewhere, legacy_new, user_file,
                         tmp_path / 'epoch_1.pth'))


def test_a_stale_temporary_folder_goes_too(tmp_path):
    import socket

    from mmsoft.engine.atomic_local_backend import remove_stale_temporaries
    stale = tmp_path / f'.dist_results.tmp-{socket.gethostname()}-{dead_pid()}-0123abcd'
    (stale / 'parts').mkdir(parents=True)
    (stale / 'parts' / 'part_0.pkl').write_bytes(b'results')
    assert remove_stale_temporaries(tmp_path) == [str(stale)]
    assert os.listdir(tmp_path) == []
