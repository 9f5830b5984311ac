"""Busy background processes: started, bounded in time, always ended."""
import os
import time

import pytest

from mmsoft.benchmark.background_load import busy_processes


def test_processes_run_inside_the_block_and_are_gone_after():
    with busy_processes(2) as procs:
        assert len(procs) == 2 and all(p.is_alive() for p in procs)
    assert not any(p.is_alive() for p in procs)


def test_processes_end_by_themselves_at_the_deadline():
    with busy_processes(1, max_seconds=0.5) as (proc, ):
        proc.join(timeout=30)
        assert not proc.is_alive()


def test_no_processes_and_bad_arguments():
    with busy_processes(0) as procs:
        assert procs == []
    with pytest.raises(ValueError, match='>= 0'):
        with busy_processes(-1):
            pass
    with pytest.raises(ValueError, match='positive'):
        with busy_processes(1, max_seconds=0):
            pass


def test_a_busy_process_takes_cpu_time():
    with busy_processes(1) as (proc, ):
        time.sleep(1.0)
        with open(f'/proc/{proc.pid}/stat') as f:
            user_ticks = int(f.read().rsplit(')', 1)[1].split()[11])
    assert user_ticks / os.sysconf('SC_CLK_TCK') > 0.2
