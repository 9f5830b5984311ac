"""tools/analysis/compare_mixers.py: real short trainings, a table, resumable."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'analysis' / 'compare_mixers.py'
compare = load_tool(SCRIPT)


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
def test_a_dry_run_writes_the_table_and_a_forced_rerun_skips_finished_runs(
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
    with pytest.raises(SystemExit, match='runs.csv exists; pass --force'):
        compare.main(args)
    assert compare.main(args + ['--force']) == rows
    assert {p: p.stat().st_mtime_ns for p in logs} == before


def test_bad_requests_are_clear_errors(tmp_path):
    from mmengine.config import Config
    with pytest.raises(SystemExit):
        compare.parse_args(['--config', 'imagenet=x.py'])
    config = Config.fromfile(str(REPO / compare.TASKS['digits']['config']))
    with pytest.raises(ValueError, match='more than 2 epochs'):
        compare.schedule(config, 2)


@pytest.mark.parametrize('task', list(compare.TASKS))
def test_each_task_schedule_stretches_the_schedulers_to_the_run(task, tmp_path):
    # A run of 3 epochs ends every scheduler that ended with the config's
    # training at epoch 3 (whatever their order), and its config file, read
    # back as tools/train.py reads it, says so.
    from mmengine.config import Config
    spec = compare.TASKS[task]
    config = Config.fromfile(str(REPO / spec['config']))
    settings = compare.schedule(config, 3, spec['scratch'])
    run = tmp_path / 'run_config.py'
    run.write_text(compare.run_config(str(REPO / spec['config']), 'agent', 5, settings))
    resolved = Config.fromfile(str(run))
    assert resolved.train_cfg.max_epochs == 3
    ended = [s for s in config.param_scheduler
             if s.get('end') == config.train_cfg.max_epochs]
    assert ended and [s['end'] for s in resolved.param_scheduler
                      if s['type'] in {e['type'] for e in ended}] == [3] * len(ended)
    assert resolved.model.backbone.attn_cfg == dict(type='AgentAttention')
    assert resolved.randomness.seed == 5
    if spec['scratch']:  # the scenes start from scratch, not the classifier
        assert resolved.model.backbone.init_cfg is None
        assert Config.fromfile(str(REPO / spec['config'])).model.backbone.init_cfg
