"""Process-group set-up and teardown of the entry points."""
import socket

import torch.distributed as dist

from mmsoft.apis import finish_distributed, init_cpu_distributed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def test_gloo_group_is_started_and_destroyed(monkeypatch):
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(free_port()))
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('WORLD_SIZE', '1')
    init_cpu_distributed('none')
    assert not dist.is_initialized()
    init_cpu_distributed('pytorch')
    try:
        assert dist.is_initialized() and dist.get_backend() == 'gloo'
    finally:
        finish_distributed()
    assert not dist.is_initialized()
    finish_distributed()  # nothing left to destroy: a no-op
