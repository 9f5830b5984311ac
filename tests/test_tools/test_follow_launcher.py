"""tools/lib/follow_launcher.py: a torchrun worker ends with its launcher from
its first statement on, before any import of mmsoft or torch."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import ended, wait_for
from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]
MODULE = REPO / 'tools' / 'lib' / 'follow_launcher.py'
WORKER = '''
import runpy, sys, time
print('follows', runpy.run_path(sys.argv[1])['follow_launcher'](), flush=True)
time.sleep(120)
'''
LAUNCHER = '''
import subprocess, sys
worker = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]],
                          start_new_session=True)
print(worker.pid, flush=True)
worker.wait()
'''


def torchrun_env(**extra):
    return {**os.environ, 'TORCHELASTIC_RUN_ID': 'test', 'RANK': '0', **extra}


@pytest.mark.skipif(not sys.platform.startswith('linux'),
                    reason='the parent-death signal is Linux only')
def test_the_kernel_ends_a_worker_when_its_launcher_is_killed():
    """No thread of the worker watches here: the kernel's signal ends it.
    A ``MMSOFT_LAUNCHER_PID`` inherited from another live process (this
    one) is not taken for the launcher."""
    launcher = subprocess.Popen(
        [sys.executable, '-c', LAUNCHER, WORKER, str(MODULE)], stdout=subprocess.PIPE,
        text=True, env=torchrun_env(MMSOFT_LAUNCHER_PID=str(os.getpid())))
    worker = int(launcher.stdout.readline())
    try:
        assert launcher.stdout.readline().split() == ['follows', str(launcher.pid)]
        launcher.kill()
        launcher.wait()
        assert wait_for(lambda: ended(worker), 10)
    finally:
        if not ended(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_whose_launcher_is_already_gone_stops_at_once():
    gone = subprocess.Popen(['true'])
    gone.wait()
    result = subprocess.run([sys.executable, '-c', WORKER, str(MODULE)],
                            capture_output=True, text=True, timeout=60,
                            env=torchrun_env(MMSOFT_LAUNCHER_PID=str(gone.pid)))
    assert result.returncode == 1
    assert (f'the launcher (pid {gone.pid}) is gone; ending worker'
            in result.stderr), result.stderr
    assert 'follows' not in result.stdout


def test_outside_torchrun_it_does_nothing(monkeypatch):
    monkeypatch.delenv('TORCHELASTIC_RUN_ID', raising=False)
    monkeypatch.delenv('MMSOFT_LAUNCHER_PID', raising=False)
    assert load_tool(MODULE).follow_launcher() is None
    assert 'MMSOFT_LAUNCHER_PID' not in os.environ
