"""tools/analysis/compare_mixers.py: real short trainings, a table, resumable."""
import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'compare_mixers.py'
_spec = importlib.util.spec_from_file_location('compare_mixers', SCRIPT)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


@pytest.fixture(scope='module')
def tiny_digits(tmp_path_factory):
    root = tmp_path_factory.mktemp('digits')
    subprocess.run([sys.executable, 'tools/dataset_converters/prepare_digits.py',
                    str(root)], cwd=REPO, check=True, capture_output=True)
    config = root / 'tiny_digits.py'
    train = [i * 1438 // 16 for i in range(16)]
    val = [i * 359 // 8 for i in range(8)]
    config.write_text(f"""
_base_ = ['{REPO / 'configs' / 'soft_tiny_digits.py'}']
train_dataloader = dict(batch_size=16, dataset=dict(data_root='{root}',
                                                    indices={train}))
val_dataloader = dict(dataset=dict(data_root='{root}', indices={val}))
test_dataloader = val_dataloader
""")
    return config


@pytest.mark.slow
def test_a_dry_run_writes_the_table_and_a_rerun_skips_finished_runs(
        tiny_digits, tmp_path):
    args = ['--tasks', 'digits', '--mixers', 'soft', 'agent', '--seeds', '0',
            '--length', '3', '--config', f'digits={tiny_digits}',
            '--out-dir', str(tmp_path)]
    rows = compare.main(args)
    assert [(r['task'], r['mixer'], r['seeds']) for r in rows] == [
        ('digits', 'soft', 1), ('digits', 'agent', 1)]
    for row in rows:
        assert 0 <= row['metric_mean'] <= 100
        assert row['images_per_s'] > 0 and row['peak_rss_mib'] > 100
        assert row['params_m'] > 1 and row['gflops'] > 0
    with open(tmp_path / 'runs.csv') as f:
        runs = list(csv.DictReader(f))
    assert [(r['mixer'], r['seed']) for r in runs] == [('soft', '0'), ('agent', '0')]
    summary = (tmp_path / 'summary.md').read_text()
    assert '| soft |' in summary and '| agent |' in summary
    assert 'CPU: ' in summary and (tmp_path / 'mixers.png').stat().st_size > 0
    # The agent run trained with agent attention, for the epochs asked.
    log = (tmp_path / 'digits' / 'agent' / 'seed0' / 'train.log').read_text()
    assert 'AgentAttention' in log and 'Epoch(train) [3]' in log

    logs = sorted(tmp_path.glob('digits/*/seed0/train.log'))
    before = {p: p.stat().st_mtime_ns for p in logs}
    assert compare.main(args) == rows
    assert {p: p.stat().st_mtime_ns for p in logs} == before


def test_bad_requests_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit):
        compare.parse_args(['--config', 'imagenet=x.py'])
    with pytest.raises(ValueError, match='at least 3 epochs'):
        compare.TASKS['digits']['schedule'](2)


@pytest.mark.parametrize('task', list(compare.TASKS))
def test_each_task_schedule_sets_keys_its_config_has(task):
    # A renamed config or a changed loop type must not leave the schedule
    # setting keys nobody reads (the run would silently train for the default).
    from mmengine.config import Config
    spec = compare.TASKS[task]
    config = Config.fromfile(str(REPO / spec['config']))
    for key in spec['schedule'](spec['quick']):
        node = config
        for part in key.split('.'):
            node = node[int(part)] if isinstance(node, list) else node[part]
