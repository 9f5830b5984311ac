"""Checkpoints are written to a temporary file and renamed into place."""
import os

import pytest
import torch
from mmengine.fileio import get_file_backend
from mmengine.runner.checkpoint import save_checkpoint

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
