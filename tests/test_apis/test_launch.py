"""Process-group set-up and teardown of the entry points."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
from helpers.processes import ended, wait_for
from helpers.threads import gloo_threads
from mmengine.model import MMDistributedDataParallel

from mmsoft.apis import finish_distributed, init_cpu_distributed, load_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture
def one_rank(monkeypatch):
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(free_port()))
    monkeypatch.setenv('RANK', '0')
    monkeypatch.setenv('WORLD_SIZE', '1')


def test_gloo_group_is_started_and_destroyed(one_rank):
    init_cpu_distributed('none')
    assert not dist.is_initialized()
    init_cpu_distributed('pytorch')
    try:
        assert dist.is_initialized() and dist.get_backend() == 'gloo'
    finally:
        finish_distributed()
    assert not dist.is_initialized()
    finish_distributed()  # nothing left to destroy: a no-op


def test_teardown_joins_gloo_threads_after_ddp_training(one_rank):
    """The threads must be gone before interpreter shutdown, where a worker
    thread that still needs the GIL aborts the process."""
    init_cpu_distributed('pytorch')
    try:
        model = MMDistributedDataParallel(torch.nn.Linear(4, 2), device_ids=None)
        model(torch.randn(3, 4)).sum().backward()
        payload = [{'accuracy': 1.0}]
        dist.broadcast_object_list(payload, src=0)
        assert gloo_threads()
        # Like the Runner, which holds the DDP wrapper, it sits in a cycle.
        owner = {'model': model}
        owner['self'] = owner
        del model, owner
    finally:
        finish_distributed()
    assert gloo_threads() == []


def test_runs_in_one_process_get_their_own_experiment_names(tmp_path):
    """mmengine reuses a logger and message hub of the same name, and the
    default name only changes once a second."""
    config = tmp_path / 'cls.py'
    config.write_text("model = dict(type='ImageClassifier')\n")
    names = {load_config(str(config)).get('experiment_name') for _ in range(3)}
    assert len(names) == 3
    assert {name for name in names if name} <= {f'cls_run{k}' for k in range(1, 99)}
    named = tmp_path / 'named.py'
    named.write_text("experiment_name = 'mine'\n")
    assert load_config(str(named)).experiment_name == 'mine'


WORKER = '''
from mmsoft.apis import init_cpu_distributed, stop_with_launcher
stop_with_launcher()
print('joining', flush=True)
init_cpu_distributed('pytorch')  # rank 0 of 2: waits for rank 1
'''
LAUNCHER = '''
import subprocess, sys
worker = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True)
print(worker.pid, flush=True)
worker.wait()
'''


def test_a_worker_waiting_for_its_group_ends_when_the_launcher_is_killed():
    """A SIGKILLed launcher cannot end its workers; the launcher watch ends a
    worker still waiting in init_process_group for a rank that never comes
    (torch waits there without the GIL), not only one that trains."""
    env = {**os.environ, 'TORCHELASTIC_RUN_ID': 'test', 'RANK': '0', 'WORLD_SIZE': '2',
           'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(free_port())}
    launcher = subprocess.Popen([sys.executable, '-c', LAUNCHER, WORKER], env=env,
                                stdout=subprocess.PIPE, text=True)
    worker = int(launcher.stdout.readline())
    try:
        assert launcher.stdout.readline().strip() == 'joining'
        time.sleep(3)  # inside init_process_group
        assert launcher.poll() is None and not ended(worker)
        launcher.kill()
        launcher.wait()
        assert wait_for(lambda: ended(worker), 20)
    finally:
        if not ended(worker):
            os.kill(worker, signal.SIGKILL)
