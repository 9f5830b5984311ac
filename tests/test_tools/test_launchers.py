"""The launchers: tools/{dist,slurm}_{train,test}.sh.

Fast tests read the command each script assembles, with stand-ins for
``python`` and ``srun`` on PATH. The slow ones run end to end with 2 CPU
processes: each toolbox trains a few iterations from a config of configs/ on a tiny
dataset, evaluates the checkpoint with dist_test.sh and resumes. A training
run killed with SIGKILL resumes to the same weights as one never stopped, and
a rank that raises ends the whole job; a launcher killed while its workers
start (importing, starting the process group) ends them too.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.processes import children, ended, wait_for
from helpers.tiny_datasets import make_ade20k, make_coco
from helpers.tools import load_tool

import mmsoft.runtime  # noqa: F401  (weights-only loading of mmengine checkpoints)

REPO = Path(__file__).resolve().parents[2]


def run(*cmd, timeout=300, env=None):
    result = subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True,
                            text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    return result, result.stdout + result.stderr


def write_config(path: Path, base: str, body: str) -> Path:
    path.write_text(f"_base_ = ['{REPO / 'configs' / base}']\n{body}")
    return path


def dist_train(config, work_dir, *args, port):
    return run(REPO / 'tools/dist_train.sh', config, 2, '--work-dir', work_dir,
               *args, env=dict(PORT=str(port), OMP_NUM_THREADS='1'))


def dist_test(config, checkpoint, work_dir, port):
    return run(REPO / 'tools/dist_test.sh', config, checkpoint, 2, '--work-dir',
               work_dir, env=dict(PORT=str(port), OMP_NUM_THREADS='1'))


@pytest.fixture
def echo_bin(tmp_path):
    """A folder whose ``python`` and ``srun`` print their arguments, one a line."""
    folder = tmp_path / 'bin'
    folder.mkdir()
    for name in ('python', 'srun'):
        stub = folder / name
        stub.write_text('#!/usr/bin/env bash\n'
                        'echo "PYTHONPATH=$PYTHONPATH"\n'
                        'echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"\n'
                        'printf "%s\\n" "$@"\n')
        stub.chmod(0o755)
    return folder


def echoed(script, *args, bin_dir, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ('NNODES', 'NODE_RANK', 'MASTER_ADDR', 'PORT', 'GPUS',
                            'GPUS_PER_NODE', 'CPUS_PER_TASK', 'SRUN_ARGS',
                            'OMP_NUM_THREADS', 'PYTHONPATH')}
    environ.update(env, PATH=f'{bin_dir}:{os.environ["PATH"]}')
    result = subprocess.run([str(REPO / 'tools' / script), *map(str, args)], cwd=REPO,
                            capture_output=True, text=True, timeout=30, env=environ)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_dist_train_passes_the_cluster_environment_to_torchrun(echo_bin):
    lines = echoed('dist_train.sh', 'configs/soft_tiny_imagenet.py', 4, '--amp',
                   '--resume', bin_dir=echo_bin, NNODES='2', NODE_RANK='1',
                   MASTER_ADDR='10.0.0.7', PORT='29999')
    assert lines[0] == f'PYTHONPATH={REPO / "tools"}/..'
    assert lines[2:] == [
        '-m', 'torch.distributed.run', '--nnodes=2', '--node_rank=1',
        '--master_addr=10.0.0.7', '--nproc_per_node=4', '--master_port=29999',
        f'{REPO / "tools"}/train.py', 'configs/soft_tiny_imagenet.py',
        '--launcher', 'pytorch', '--amp', '--resume']


def test_dist_test_defaults_to_one_local_node(echo_bin):
    lines = echoed('dist_test.sh', 'c.py', 'w.pth', 2, '--work-dir', 'out',
                   bin_dir=echo_bin, PYTHONPATH='/extra')
    assert lines[0] == f'PYTHONPATH={REPO / "tools"}/..:/extra'
    # One intra-op thread pool per process, sharing the cores.
    assert lines[1] == f'OMP_NUM_THREADS={max(len(os.sched_getaffinity(0)) // 2, 1)}'
    assert lines[2:] == [
        '-m', 'torch.distributed.run', '--nnodes=1', '--node_rank=0',
        '--master_addr=127.0.0.1', '--nproc_per_node=2', '--master_port=29500',
        f'{REPO / "tools"}/test.py', 'c.py', 'w.pth', '--launcher', 'pytorch',
        '--work-dir', 'out']


def test_slurm_train_takes_an_optional_work_dir(echo_bin):
    lines = echoed('slurm_train.sh', 'gpu', 'soft', 'c.py', 'work', '--amp',
                   bin_dir=echo_bin, GPUS='16', CPUS_PER_TASK='4',
                   SRUN_ARGS='--quotatype=auto --time=10')
    assert lines[2:] == [
        '-p', 'gpu', '--job-name=soft', '--gres=gpu:8', '--ntasks=16',
        '--ntasks-per-node=8', '--cpus-per-task=4', '--kill-on-bad-exit=1',
        '--quotatype=auto', '--time=10', 'python', '-u',
        f'{REPO / "tools"}/train.py', 'c.py', '--work-dir', 'work',
        '--launcher', 'slurm', '--amp']
    lines = echoed('slurm_train.sh', 'gpu', 'soft', 'c.py', '--resume',
                   bin_dir=echo_bin)
    assert lines[-4:] == ['c.py', '--launcher', 'slurm', '--resume']


def test_slurm_test_runs_test_py_on_the_checkpoint(echo_bin):
    lines = echoed('slurm_test.sh', 'gpu', 'eval', 'c.py', 'w.pth', bin_dir=echo_bin,
                   GPUS='4', GPUS_PER_NODE='4')
    assert lines[2:] == [
        '-p', 'gpu', '--job-name=eval', '--gres=gpu:4', '--ntasks=4',
        '--ntasks-per-node=4', '--cpus-per-task=5', '--kill-on-bad-exit=1',
        'python', '-u', f'{REPO / "tools"}/test.py', 'c.py', 'w.pth',
        '--launcher', 'slurm']


@pytest.mark.parametrize('script,usage', [
    ('dist_train.sh', 'CONFIG GPUS'), ('dist_test.sh', 'CONFIG CHECKPOINT GPUS'),
    ('slurm_train.sh', 'PARTITION JOB_NAME CONFIG [WORK_DIR]'),
    ('slurm_test.sh', 'PARTITION JOB_NAME CONFIG CHECKPOINT')])
def test_missing_arguments_print_the_usage(script, usage):
    result = subprocess.run([str(REPO / 'tools' / script), 'only_one'], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f'usage: {REPO / "tools" / script} {usage}' in result.stderr


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp('digits')
    result, log = run(sys.executable, 'tools/dataset_converters/prepare_digits.py',
                      root)
    assert result.returncode == 0, log
    return root


def digits_config(path: Path, data_root: Path, epochs: int, random_crop=True,
                  train_images=128) -> Path:
    """The digits config on ``train_images`` training and 64 validation images.

    The images are spread evenly over the class-sorted splits, so every
    digit is among them.
    """
    train = [i * 1438 // train_images for i in range(train_images)]
    val = [i * 359 // 64 for i in range(64)]
    # One train_dataloader assignment: a second one in the same file would
    # replace the first instead of merging into it.
    pipeline = '' if random_crop else """pipeline=[
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(32, 32), interpolation='bilinear'),
    dict(type='PackInputs')],"""
    return write_config(path, 'soft_tiny_digits.py', f"""
data_root = '{data_root}'
train_dataloader = dict(dataset=dict(data_root=data_root, indices={train},
                                     {pipeline}))
val_dataloader = dict(dataset=dict(data_root=data_root, indices={val}))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs={epochs}, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=5))
param_scheduler = [dict(type='CosineAnnealingLR', by_epoch=True, begin=0,
                        end=4, T_max=4, eta_min=1e-5)]
randomness = dict(seed=0, deterministic=True)
""")


@pytest.mark.slow
def test_classification_train_test_resume(digits, tmp_path):
    work = tmp_path / 'work'
    config = digits_config(tmp_path / 'cls.py', digits, epochs=1)
    result, log = dist_train(config, work, port=29611)
    assert result.returncode == 0, log[-3000:]
    assert (work / 'epoch_1.pth').exists()

    result, log = dist_test(config, work / 'epoch_1.pth', tmp_path / 'test', 29612)
    assert result.returncode == 0, log[-3000:]
    assert 'accuracy/top1' in log

    longer = digits_config(tmp_path / 'cls2.py', digits, epochs=2)
    result, log = dist_train(longer, work, '--resume', port=29613)
    assert result.returncode == 0, log[-3000:]
    assert 'resumed epoch: 1' in log
    assert (work / 'epoch_2.pth').exists()


@pytest.mark.slow
def test_distributed_evaluation_keeps_its_result_parts_out_of_the_cwd(digits, tmp_path):
    """mmengine gathers the ranks' results through files, by default in
    ``./.dist_test``; a killed run left them there."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    config = digits_config(tmp_path / 'cls.py', digits, epochs=1)
    init_default_scope('mmpretrain')
    checkpoint = tmp_path / 'initial.pth'
    torch.save(dict(state_dict=MODELS.build(Config.fromfile(config).model).state_dict()),
               checkpoint)
    cwd, work = tmp_path / 'cwd', tmp_path / 'test'
    cwd.mkdir()
    result = subprocess.run(
        [str(REPO / 'tools/dist_test.sh'), str(config), str(checkpoint), '2',
         '--work-dir', str(work)], cwd=cwd, capture_output=True, text=True,
        timeout=300, env={**os.environ, 'PORT': '29615', 'OMP_NUM_THREADS': '1'})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert 'accuracy/top1' in result.stdout + result.stderr
    assert os.listdir(cwd) == []
    assert not [p.name for p in work.iterdir() if p.name.startswith('.')]


@pytest.mark.slow
def test_detection_train_test_resume(tmp_path):
    data = make_coco(tmp_path / 'coco', per_split=2)
    body = f"""
data_root = '{data}/'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(128, 96), keep_ratio=True),
    dict(type='PackDetInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 96), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape',
                                          'img_shape', 'scale_factor'))]
train_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
model = dict(backbone=dict(init_cfg=None))
train_cfg = dict(max_epochs={{epochs}}, val_interval=1)
"""
    work = tmp_path / 'work'
    config = write_config(tmp_path / 'det.py', 'retinanet_softnorm-tiny_fpn_1x_coco.py',
                          body.replace('{epochs}', '1'))
    result, log = dist_train(config, work, port=29621)
    assert result.returncode == 0, log[-3000:]
    result, log = dist_test(config, work / 'epoch_1.pth', tmp_path / 'test', 29622)
    assert result.returncode == 0, log[-3000:]
    # An untrained detector predicts nothing above the score threshold, so
    # CocoMetric reports an empty result; the evaluation itself must run.
    assert 'Evaluating bbox' in log and 'Epoch(test)' in log
    longer = write_config(tmp_path / 'det2.py', 'retinanet_softnorm-tiny_fpn_1x_coco.py',
                          body.replace('{epochs}', '2'))
    result, log = dist_train(longer, work, '--resume', port=29623)
    assert result.returncode == 0, log[-3000:]
    assert 'resumed epoch: 1' in log and (work / 'epoch_2.pth').exists()


@pytest.mark.slow
def test_segmentation_train_test_resume(tmp_path):
    data = make_ade20k(tmp_path / 'ade', per_split=2)
    body = f"""
data_root = '{data}'
crop_size = (64, 64)
model = dict(data_preprocessor=dict(size=crop_size), backbone=dict(init_cfg=None))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(128, 64), ratio_range=(0.5, 2.0),
         keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='PackSegInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(128, 64), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')]
# Two images per process: the pyramid pooling's 1 x 1 BatchNorm needs them.
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={{iters}}, val_interval=2)
default_hooks = dict(checkpoint=dict(interval=2))
"""
    work = tmp_path / 'work'
    base = 'upernet_softnorm-small_512x512_160k_ade20k.py'
    config = write_config(tmp_path / 'seg.py', base, body.replace('{iters}', '2'))
    result, log = dist_train(config, work, port=29631)
    assert result.returncode == 0, log[-3000:]
    result, log = dist_test(config, work / 'iter_2.pth', tmp_path / 'test', 29632)
    assert result.returncode == 0, log[-3000:]
    assert 'mIoU' in log
    longer = write_config(tmp_path / 'seg2.py', base, body.replace('{iters}', '4'))
    result, log = dist_train(longer, work, '--resume', port=29633)
    assert result.returncode == 0, log[-3000:]
    assert 'resumed epoch: 0, iter: 2' in log and (work / 'iter_4.pth').exists()


@pytest.mark.slow
def test_sigkill_then_resume_ends_with_the_same_weights(digits, tmp_path):
    config = digits_config(tmp_path / 'cls.py', digits, epochs=3, random_crop=False,
                           train_images=96)
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    straight = subprocess.run(
        [sys.executable, 'tools/train.py', config, '--work-dir', tmp_path / 'straight'],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]

    work = tmp_path / 'killed'
    proc = subprocess.Popen(
        [sys.executable, 'tools/train.py', config, '--work-dir', work], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 300
    while not (work / 'last_checkpoint').exists() and time.time() < deadline:
        assert proc.poll() is None, 'training ended before its first checkpoint'
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (work / 'epoch_3.pth').exists()

    resumed = subprocess.run(
        [sys.executable, 'tools/train.py', config, '--work-dir', work, '--resume'],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'resumed epoch' in resumed.stdout + resumed.stderr
    expected = torch.load(tmp_path / 'straight' / 'epoch_3.pth',
                          weights_only=True)['state_dict']
    actual = torch.load(work / 'epoch_3.pth', weights_only=True)['state_dict']
    for key, value in expected.items():
        torch.testing.assert_close(actual[key], value, rtol=1e-4, atol=1e-5,
                                   msg=key)


@pytest.mark.slow
def test_a_failing_rank_ends_the_whole_job(digits, tmp_path):
    (tmp_path / 'failing_rank.py').write_text('''
import os
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class FailOnRankOne(Hook):
    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if os.environ.get('RANK') == '1' and runner.iter == 1:
            raise RuntimeError('rank 1 failed on purpose')
''')
    config = digits_config(tmp_path / 'cls.py', digits, epochs=1)
    with open(config, 'a') as f:
        f.write("custom_imports = dict(imports=['mmsoft', 'failing_rank'])\n"
                "custom_hooks = [dict(type='FailOnRankOne')]\n")
    start = time.time()
    result, log = run(REPO / 'tools/dist_train.sh', config, 2, '--work-dir',
                      tmp_path / 'work', timeout=240,
                      env=dict(PORT='29641', OMP_NUM_THREADS='1',
                               PYTHONPATH=f'{tmp_path}:{REPO}'))
    assert result.returncode != 0
    assert 'rank 1 failed on purpose' in log
    assert time.time() - start < 240


ENTRY_POINT_THEN_THREADS = '''
import runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
sys.path.insert(0, 'tests')
from helpers.threads import gloo_threads
print('gloo threads left:', gloo_threads())
'''


@pytest.mark.slow
def test_entry_points_join_gloo_threads_before_exit(digits, tmp_path):
    """A gloo thread still alive at interpreter shutdown can abort a run
    that succeeded, so train.py and test.py end with none left."""
    config = digits_config(tmp_path / 'cls.py', digits, epochs=1, train_images=64)
    env = dict(MASTER_ADDR='127.0.0.1', MASTER_PORT='29651', RANK='0',
               WORLD_SIZE='1', LOCAL_RANK='0', OMP_NUM_THREADS='1')
    work = tmp_path / 'work'
    result, log = run(sys.executable, '-c', ENTRY_POINT_THEN_THREADS,
                      'tools/train.py', config, '--work-dir', work,
                      '--launcher', 'pytorch', env=env)
    assert result.returncode == 0, log[-3000:]
    assert 'gloo threads left: []' in log, log[-3000:]
    result, log = run(sys.executable, '-c', ENTRY_POINT_THEN_THREADS,
                      'tools/test.py', config, work / 'epoch_1.pth', '--work-dir',
                      tmp_path / 'test', '--launcher', 'pytorch', env=env)
    assert result.returncode == 0, log[-3000:]
    assert 'accuracy/top1' in log
    assert 'gloo threads left: []' in log, log[-3000:]


@pytest.mark.parametrize('script,args', [
    ('dist_train.sh', ['c.py', '{n}']), ('dist_test.sh', ['c.py', 'w.pth', '{n}']),
])
@pytest.mark.parametrize('count', ['abc', '0', '-1', '2x', '08'])
def test_dist_scripts_check_the_process_count(script, args, count):
    result = subprocess.run(
        [str(REPO / 'tools' / script), *(a.format(n=count) for a in args)],
        cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"GPUS must be a whole number >= 1, got '{count}'" in result.stderr
    assert f'usage: {REPO / "tools" / script}' in result.stderr


@pytest.mark.parametrize('script,args', [
    ('slurm_train.sh', ['p', 'j', 'c.py']), ('slurm_test.sh', ['p', 'j', 'c.py', 'w']),
])
@pytest.mark.parametrize('variable', ['GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK'])
def test_slurm_scripts_check_their_counts(script, args, variable):
    result = subprocess.run([str(REPO / 'tools' / script), *args], cwd=REPO,
                            capture_output=True, text=True, timeout=30,
                            env={**os.environ, variable: 'x'})
    assert result.returncode == 2
    assert f"{variable} must be a whole number >= 1, got 'x'" in result.stderr
    assert f'usage: {REPO / "tools" / script}' in result.stderr


def start_dist_train(config, work, port, log):
    """dist_train.sh with 2 workers, in its own process group, once training
    has begun (past the process group's start, where a worker inside gloo's
    connect holds the GIL); the worker pids."""
    proc = subprocess.Popen(
        [str(REPO / 'tools/dist_train.sh'), str(config), '2', '--work-dir', str(work)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, 'PORT': str(port), 'OMP_NUM_THREADS': '1'})
    started = wait_for(lambda: (work / 'train.lock').exists()
                       and len(children(proc.pid)) == 2
                       and 'Checkpoints will be saved to' in Path(log.name).read_text(),
                       300)
    assert started and proc.poll() is None, 'training did not start'
    return proc, children(proc.pid)


@pytest.mark.slow
def test_sigkill_to_the_launcher_group_ends_the_workers_and_the_lock_refuses_a_resume(
        digits, tmp_path):
    from mmsoft.apis import WorkDirLock
    train_tool = load_tool(REPO / 'tools/train.py', 'train_tool')
    config = digits_config(tmp_path / 'cls.py', digits, epochs=50)
    work = tmp_path / 'work'
    with open(tmp_path / 'launcher.log', 'w') as log:
        proc, workers = start_dist_train(config, work, 29661, log)
        try:
            holder = WorkDirLock(str(work)).holder()
            assert holder['pid'] in workers
            with pytest.raises(RuntimeError, match=rf"Another training run holds "
                               rf".*train\.lock \(pid {holder['pid']} on host"):
                train_tool.main([str(config), '--work-dir', str(work), '--resume'])
            os.killpg(proc.pid, signal.SIGKILL)  # as a scheduler or `kill -9 -PGID`
            proc.wait()
            all_ended = wait_for(lambda: all(ended(p) for p in workers),
                             120)
        finally:
            for pid in workers:
                if not ended(pid):
                    os.kill(pid, signal.SIGKILL)
    assert all_ended, (tmp_path / 'launcher.log').read_text()[-3000:]


@pytest.mark.slow
def test_sigterm_to_the_launcher_ends_every_worker(digits, tmp_path):
    from mmsoft.apis import WorkDirLock
    config = digits_config(tmp_path / 'cls.py', digits, epochs=50)
    work = tmp_path / 'work'
    with open(tmp_path / 'launcher.log', 'w') as log:
        proc, workers = start_dist_train(config, work, 29671, log)
        try:
            proc.send_signal(signal.SIGTERM)  # the launcher alone, as `kill PID`
            proc.wait(timeout=120)
            all_ended = wait_for(lambda: all(ended(p) for p in workers),
                             60)
        finally:
            for pid in workers:
                if not ended(pid):
                    os.kill(pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert all_ended, (tmp_path / 'launcher.log').read_text()[-3000:]
    # The killed run's lock is stale: the next run takes it over.
    lock = WorkDirLock(str(work))
    lock.acquire()
    lock.release()
    assert not (work / 'train.lock').exists()


STALL_HOOK = '''
import time
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class StallBeforeRun(Hook):
    def before_run(self, runner):
        time.sleep(600)
'''


@pytest.mark.slow
@pytest.mark.parametrize('tool,delay,port', [
    ('train', 0.5, 29681), ('train', 2, 29682), ('train', 4, 29683),
    ('test', 2, 29684)])
def test_workers_end_with_a_launcher_killed_while_they_start(digits, tmp_path, tool,
                                                              delay, port):
    """``kill -9`` of the launcher 0.5, 2 or 4 s after it started its workers
    (importing, reading the config, starting the process group): the workers
    end and leave no lock behind. Once started, a run here stalls before its
    first iteration, so only the launcher's end can end it."""
    from mmsoft.apis import WorkDirLock
    (tmp_path / 'stall_hook.py').write_text(STALL_HOOK)
    config = digits_config(tmp_path / 'cls.py', digits, epochs=1)
    with open(config, 'a') as f:
        f.write("custom_imports = dict(imports=['mmsoft', 'stall_hook'])\n"
                "custom_hooks = [dict(type='StallBeforeRun')]\n")
    work = tmp_path / 'work'
    args = ([config, 2] if tool == 'train' else [config, tmp_path / 'none.pth', 2])
    with open(tmp_path / 'launcher.log', 'w') as log:
        proc = subprocess.Popen(
            [str(REPO / f'tools/dist_{tool}.sh'), *map(str, args), '--work-dir',
             str(work)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, 'PORT': str(port), 'OMP_NUM_THREADS': '1',
                 'PYTHONPATH': f'{tmp_path}:{REPO}'})
        workers = []
        try:
            assert wait_for(lambda: len(children(proc.pid)) == 2, 120)
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGSTOP)  # starts no worker between the two
            workers = children(proc.pid)
            proc.kill()
            proc.wait()
            all_ended = wait_for(lambda: all(ended(p) for p in workers), 20)
        finally:
            for pid in workers:
                if not ended(pid):
                    os.kill(pid, signal.SIGKILL)
    assert len(workers) == 2
    assert all_ended, (tmp_path / 'launcher.log').read_text()[-3000:]
    lock = WorkDirLock(str(work))  # a lock of a killed worker is taken over
    lock.acquire()
    lock.release()
