"""The 'auto' Newton route: measured in memory per process, kept on disk only
by the command, and a kept table is used only where it is sound."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
from helpers.tools import load_tool

from mmsoft.ops.fast import route_choice
from mmsoft.utils.env import collect_env

TOOL = Path(__file__).resolve().parents[2] / 'tools' / 'analysis' / 'newton_routes.py'


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """An empty cache folder and a process that has measured nothing; the
    measurement itself is replaced by a record of the sizes measured."""
    monkeypatch.setenv('MMSOFT_CACHE_DIR', str(tmp_path))
    measured = []

    def measure(m, rounds=route_choice.ROUNDS):
        measured.append(m)
        ms = {name: float(i + 1) for i, name in enumerate(route_choice.candidates(m))}
        return dict(route=min(ms, key=ms.get), m=m, ms=ms, busy=0.0, when='now')

    monkeypatch.setattr(route_choice, 'measure', measure)
    route_choice.forget_measurements()
    yield tmp_path, measured
    route_choice.forget_measurements()


def kept_file(folder, table):
    path = folder / route_choice.CACHE_FILE
    path.write_text(json.dumps({route_choice.machine_key(): table}))
    return path


def test_a_forward_measures_in_memory_and_writes_nothing(tmp_path):
    code = textwrap.dedent("""
        import torch
        from mmsoft.models import SOFTAttention
        from mmsoft.utils.env import route_report
        attn = SOFTAttention(64, 2, sr_ratio=1).eval()
        with torch.no_grad():
            attn(torch.randn(1, 100, 64), (10, 10))      # 100 landmarks
        print(route_report()['Newton route m 64-127'])
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ('MMSOFT_CACHE_DIR', 'XDG_CACHE_HOME')}
    env['HOME'] = str(tmp_path)

    def run(source):
        out = subprocess.run([sys.executable, '-c', source], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    run('import mmsoft')  # the libraries it imports keep caches of their own
    before = sorted(tmp_path.rglob('*'))
    assert 'at m = 100; measured in this process' in run(code)
    assert sorted(tmp_path.rglob('*')) == before


def test_each_size_class_is_measured_once_per_process(cache):
    _, measured = cache
    assert route_choice.choose('cpu', 63) == 'loop'        # too small
    assert route_choice.choose('cuda', 500) == 'loop'      # off the CPU
    route = route_choice.choose('cpu', 70)
    assert route_choice.choose('cpu', 100) == route        # class 64-127
    route_choice.choose('cpu', 1050)
    assert measured == [70, 1050]


def test_the_command_measures_keeps_remeasures_resets_and_prints(cache, capsys):
    folder, measured = cache
    tool = load_tool(TOOL)
    tool.main(['--measure', '--sizes', '70', '100', '300'])
    assert measured == [70, 300]                           # one per class
    path = folder / route_choice.CACHE_FILE
    table = json.loads(path.read_text())[route_choice.machine_key()]
    assert set(table) == {'6', '8'} and table['6']['m'] == 70
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'
    printed = capsys.readouterr().out
    assert 'at m = 70; kept; other processes used 0% of the CPUs)' in printed
    tool.main(['--measure', '--sizes', '70', '1050'])      # 70 is kept already
    assert measured == [70, 300, 1050]
    tool.main(['--remeasure', '--sizes', '70'])
    assert measured == [70, 300, 1050, 70]
    # A new process takes the kept choice instead of measuring.
    route_choice.forget_measurements()
    assert route_choice.choose('cpu', 100) == table['6']['route']
    assert measured == [70, 300, 1050, 70]
    tool.main(['--reset'])
    assert json.loads(path.read_text())[route_choice.machine_key()] == {}
    assert sorted(p.name for p in folder.iterdir()) == [route_choice.CACHE_FILE]
    with pytest.raises(SystemExit):
        tool.main(['--measure', '--sizes', '40'])
    assert 'sizes below 64 take the loop' in capsys.readouterr().err


@pytest.mark.parametrize('table,problem', [
    ({'6': 'eigh'}, 'the entry is a str'),
    ({'6': ['eigh']}, 'the entry is a list'),
    ({'six': {}}, "size class 'six' is not a power of two exponent"),
    ({'6': dict(route='loop', m=300, ms={})}, 'm=300 is not a size of class 6'),
    ({'6': dict(route='loop', m=70, ms={'loop': 'fast'})}, 'not positive numbers'),
    ({'6': dict(route='loop', m=70, ms={'loop': 1.0})}, 'it timed'),
])
def test_a_malformed_entry_is_ignored_with_one_warning_and_measured(cache, table,
                                                                     problem):
    folder, measured = cache
    path = kept_file(folder, table)
    with pytest.warns(RuntimeWarning, match=rf'ignoring Newton route entries in '
                                            rf'{path}.*{problem}') as caught:
        route = route_choice.choose('cpu', 70)
        route_choice.choose('cpu', 1050)
    assert len(caught) == 1
    assert measured == [70, 1050]
    assert route == route_choice.candidates(70)[0]  # the fastest of the measurement
    assert problem in collect_env()[f'Newton route table problem ({next(iter(table))})']


def test_an_implausible_entry_is_not_obeyed(cache):
    folder, measured = cache
    ms = {name: 1.0 for name in route_choice.candidates(1050)}
    forged = {'10': dict(route='loop', m=1050, ms={**ms, 'loop': 0.1})}
    kept_file(folder, forged)
    with pytest.warns(RuntimeWarning, match='it timed'):
        assert route_choice.choose('cpu', 1050) != 'loop'  # no loop from 512 on
    ms = {name: float(i + 1) for i, name in enumerate(route_choice.candidates(70))}
    slower = max(ms, key=ms.get)
    kept_file(folder, {'6': dict(route=slower, m=70, ms=ms)})
    route_choice.forget_measurements()
    with pytest.warns(RuntimeWarning, match=f"route '{slower}' is not the fastest"):
        route_choice.choose('cpu', 70)
    assert measured == [1050, 70]


def test_a_sound_entry_is_used_and_the_report_says_so(cache):
    folder, measured = cache
    ms = {name: float(i + 1) for i, name in enumerate(route_choice.candidates(300))}
    kept_file(folder, {'8': dict(route=min(ms, key=ms.get), m=300, ms=ms, busy=0.5)})
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert route_choice.choose('cpu', 400) == min(ms, key=ms.get)
    assert measured == []
    report = collect_env()['Newton route m 256-511']
    assert 'at m = 300; kept; other processes used 50% of the CPUs (loaded' in report


def test_a_damaged_file_is_reported_not_raised(cache):
    folder, measured = cache
    (folder / route_choice.CACHE_FILE).write_text('{not json')
    with pytest.warns(RuntimeWarning, match='file: it is not JSON'):
        route_choice.choose('cpu', 70)
    assert 'it is not JSON' in collect_env()['Newton route table problem (file)']


def test_only_a_regular_file_is_ever_opened(cache):
    folder, measured = cache
    fifo = folder / route_choice.CACHE_FILE
    os.mkfifo(fifo)
    result = []
    reader = threading.Thread(target=lambda: result.append(route_choice.read_kept()),
                              daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert result, 'reading the kept table blocked on a FIFO'
    assert result[0] == ({}, {'file': 'it is not a regular file'})
    fifo.unlink()
    fifo.mkdir()
    with pytest.raises(ValueError, match=f'{fifo} exists and is not a regular file'):
        route_choice.keep({})
    assert sorted(p.name for p in folder.iterdir()) == [route_choice.CACHE_FILE]


def test_concurrent_writers_merge_by_size_class(cache):
    folder, _ = cache
    entries = {str(c): route_choice.measure(1 << c) for c in range(6, 12)}
    start = threading.Barrier(len(entries))

    def write(key):
        start.wait()
        route_choice.keep({key: entries[key]})

    writers = [threading.Thread(target=write, args=(k,)) for k in entries]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    usable, problems = route_choice.read_kept()
    assert problems == {} and usable == entries
    assert sorted(p.name for p in folder.iterdir()) == [route_choice.CACHE_FILE]


def test_the_cache_folder_expands_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.setenv('MMSOFT_CACHE_DIR', '~/routes')
    assert route_choice.cache_file() == str(tmp_path / 'routes' / 'newton_routes.json')
    monkeypatch.delenv('MMSOFT_CACHE_DIR')
    monkeypatch.setenv('XDG_CACHE_HOME', '~/xdg')
    assert route_choice.cache_dir() == str(tmp_path / 'xdg' / 'mmsoft')


def test_a_measurement_times_every_candidate_on_a_worker():
    entry = route_choice.measure(70, rounds=1)
    assert set(entry['ms']) == set(route_choice.candidates(70))
    assert entry['route'] == min(entry['ms'], key=entry['ms'].get)
    assert route_choice.entry_problem('6', entry) == ''
    assert entry['busy'] is None or 0 <= entry['busy'] <= 1


def test_the_command_compares_every_route_and_keeps_nothing(cache, capsys):
    folder, _ = cache
    load_tool(TOOL).main(['--compare', '--sizes', '64', '--rounds', '1'])
    out = capsys.readouterr().out
    header = [line for line in out.splitlines() if line.startswith('| m |')][0]
    for name in route_choice.candidates(64):
        assert f'{name} ms' in header
    assert out.count('| 64 |') == 4  # two starts, forward and training
    assert list(folder.iterdir()) == []
