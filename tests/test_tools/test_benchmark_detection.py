"""tools/analysis/benchmark_detection.py: every case timed, ratios to PVT-Tiny."""
import csv
from pathlib import Path

import pytest
from helpers.tools import load_tool

from mmsoft.benchmark.breakdown import KINDS
from mmsoft.benchmark.timing import paired_ratios

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'benchmark_detection.py'
tool = load_tool(SCRIPT)


def test_a_small_run_times_every_case_against_pvt(tmp_path, capsys):
    rows = tool.main(['--shape', '64', '96', '--train-shape', '64', '64',
                      '--backbones', 'soft-norm-tiny', 'pvt-tiny',
                      '--routes', 'auto', 'loop', '--repeats', '1',
                      '--out-dir', str(tmp_path)])
    labels = {(r['mode'], r['backbone']) for r in rows}
    soft = [f'SOFT-Norm-Tiny {i}{r}' for i in ('ridge', 'backoff')
            for r in ('', ', loop route')]
    assert labels == {(m, b) for m in ('forward', 'training step')
                      for b in soft + ['PVT-Tiny']}
    for r in rows:
        assert r['wall_s'] > 0 and r['vs_pvt'] > 0
        assert r['vs_pvt_low'] <= r['vs_pvt'] <= r['vs_pvt_high']
    assert [r['vs_pvt'] for r in rows if r['backbone'] == 'PVT-Tiny'] == [1.0, 1.0]
    with open(tmp_path / 'detection.csv') as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    out = capsys.readouterr().out
    assert 'fp32 matmul peak' in out and 'Newton route: auto (default)' in out
    assert '| 64 x 96 | forward | SOFT-Norm-Tiny backoff | ' in out
    # The time by kind of work adds up to the profiled call, and every SOFT
    # case spends some of it in the inverse and the attention products.
    assert 'Time by kind of work' in out
    for r in rows:
        kinds = [r[f's_{kind}'] for kind in KINDS]
        assert min(kinds) >= 0 and sum(kinds) == pytest.approx(r['profiled_s'])
        assert r['gmacs'] > 0 and 0 < r['peak_share'] < 1
        if r['backbone'] != 'PVT-Tiny':
            assert r['s_inverse'] > 0 and r['s_attention products'] > 0
            assert r['s_convolutions'] > 0 and r['s_linear layers'] > 0


def test_the_training_step_peak_memory_comes_from_a_fresh_process(tmp_path, capsys):
    rows = tool.main(['--shape', '64', '64', '--train-shape', '64', '64',
                      '--backbones', 'soft-tiny', 'pvt-tiny', '--inverses', 'ridge',
                      '--repeats', '1', '--no-breakdown', '--memory',
                      '--out-dir', str(tmp_path)])
    train = [r for r in rows if r['mode'] == 'training step']
    assert len(train) == 2 and all(r['peak_mib'] > 0 for r in train)
    assert all('peak_mib' not in r for r in rows if r['mode'] == 'forward')
    assert '| 64 x 64 | training step | PVT-Tiny |' in capsys.readouterr().out


def test_ratios_are_taken_within_each_round():
    # The machine slows down from round to round (PVT-Tiny: 1, 2, 4 s).
    # 'SOFT' takes 1.2x in every round; 'mixed' has a ratio of medians of
    # 3.0 / 2.0 = 1.5, but per-round ratios of 0.5, 1.5 and 1.0.
    samples = {'PVT-Tiny': {'wall_s': [1.0, 2.0, 4.0]},
               'SOFT': {'wall_s': [1.2, 2.4, 4.8]},
               'mixed': {'wall_s': [0.5, 3.0, 4.0]}}
    ratios = paired_ratios(samples, 'PVT-Tiny')
    assert ratios['PVT-Tiny'] == (1.0, 1.0, 1.0)
    assert ratios['SOFT'] == pytest.approx((1.2, 1.2, 1.2))
    assert ratios['mixed'] == pytest.approx((1.0, 0.5, 1.5))


@pytest.mark.parametrize('argv', [['--repeats', '0'], ['--threads', '0'],
                                  ['--routes', 'fast']])
def test_bad_arguments_are_named(argv, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert argv[0] in capsys.readouterr().err
