"""tools/analysis/benchmark_under_load.py: both backbones timed in each cell."""
import csv
from pathlib import Path

import pytest
from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'benchmark_under_load.py'
tool = load_tool(SCRIPT)


@pytest.mark.slow
def test_a_small_run_times_both_backbones_under_load(tmp_path, capsys):
    # One cell (a fresh timing process costs seconds of imports); the busy
    # processes themselves are tested in tests/test_utils.
    rows = tool.main(['--size', '64', '64', '--threads', '1', '--loads', '1',
                      '--repeats', '1', '--out-dir', str(tmp_path)])
    assert sorted((r['model'], r['load']) for r in rows) == [
        ('pvt-tiny', 1), ('soft-norm-tiny', 1), ('soft-tiny', 1)]
    for r in rows:
        assert r['wall_s'] > 0 and r['cpu_s'] > 0 and r['slowdown'] == 1.0
        assert 0 <= r['split_cpu_s'] <= r['cpu_s'] + 0.02  # clock-tick resolution
    assert next(r for r in rows if r['model'] == 'pvt-tiny')['split_cpu_s'] == 0
    with open(tmp_path / 'load.csv') as f:
        assert len(list(csv.DictReader(f))) == 3
    out = capsys.readouterr().out
    assert 'CPU: ' in out and '| soft-norm-tiny | 1 | default | 1 |' in out


@pytest.mark.parametrize('argv', [['--threads', '0'], ['--loads', '-1'],
                                  ['--repeats', '0']])
def test_bad_arguments_are_named(argv, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert argv[0] in capsys.readouterr().err
