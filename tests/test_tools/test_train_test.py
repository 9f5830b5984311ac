"""tools/train.py and tools/test.py: options, and real single-process runs.

The runs train SOFT-Tiny for one short epoch on a slice of the digits set
(the config of configs/soft_tiny_digits.py with a smaller sampler), then
evaluate and resume from what they wrote.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.tools import load_tool
from mmengine.config import Config
from mmengine.optim import AmpOptimWrapper

from mmsoft.engine import CPUAmpOptimWrapper

REPO = Path(__file__).resolve().parents[2]


train_tool = load_tool(REPO / 'tools' / 'train.py', 'tool_train')
test_tool = load_tool(REPO / 'tools' / 'test.py', 'tool_test')
prepare_tool = load_tool(REPO / 'tools' / 'dataset_converters' / 'prepare_digits.py')


def log_text(work_dir: Path) -> str:
    """Everything the runs in ``work_dir`` logged."""
    return ''.join(p.read_text() for p in sorted(work_dir.glob('*/*.log')))


@pytest.fixture(scope='module')
def config(tmp_path_factory) -> Path:
    """The digits config on 48 training and 32 validation images, 1 epoch."""
    root = tmp_path_factory.mktemp('tools')
    prepare_tool.prepare_digits(str(root / 'digits'))
    path = root / 'digits_small.py'
    path.write_text(f"""_base_ = ['{REPO / 'configs' / 'soft_tiny_digits.py'}']
data_root = '{root / 'digits'}'
train_dataloader = dict(batch_size=16, dataset=dict(data_root=data_root, indices=48))
val_dataloader = dict(batch_size=32, dataset=dict(data_root=data_root, indices=32))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1))
""")
    return path


@pytest.mark.parametrize('tool', ['train', 'test'])
def test_help_shows_an_example_and_every_option(tool):
    result = subprocess.run([sys.executable, f'tools/{tool}.py', '--help'], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'Examples:' in result.stdout
    assert f'tools/dist_{tool}.sh configs/' in result.stdout
    for option in ('--work-dir', '--amp', '--cfg-options', '--local-rank',
                   '{none,pytorch,slurm,mpi}'):
        assert option in result.stdout
    assert ('--resume' in result.stdout) == (tool == 'train')


def test_train_options_parse():
    args = train_tool.parse_args(['a.py', '--resume'])
    assert args.resume == 'auto' and args.launcher == 'none'
    args = train_tool.parse_args(['a.py', '--resume', 'w/epoch_3.pth', '--amp'])
    assert args.resume == 'w/epoch_3.pth' and args.amp
    # Older launchers pass --local_rank, torchrun's era --local-rank.
    assert train_tool.parse_args(['a.py', '--local_rank', '3']).local_rank == 3
    assert test_tool.parse_args(['a.py', 'c.pth', '--local-rank', '1']).local_rank == 1
    args = train_tool.parse_args(['a.py', '--cfg-options', 'a.b=1', 'c=[1,2]'])
    assert args.cfg_options == {'a.b': 1, 'c': [1, 2]}


def test_train_rejects_an_unknown_launcher(capsys):
    with pytest.raises(SystemExit):
        train_tool.parse_args(['a.py', '--launcher', 'ssh'])
    assert "invalid choice: 'ssh'" in capsys.readouterr().err


def test_train_then_test_then_resume(config, tmp_path):
    work = tmp_path / 'work'
    runner = train_tool.main([str(config), '--work-dir', str(work),
                              '--cfg-options', 'optim_wrapper.optimizer.lr=5e-4'])
    assert runner.epoch == 1 and (work / 'epoch_1.pth').exists()
    assert runner.optim_wrapper.optimizer.defaults['lr'] == 5e-4
    dumped = Config.fromfile(work / config.name)
    assert dumped.optim_wrapper.optimizer.lr == 5e-4
    if not torch.cuda.is_available():
        assert dumped.env_cfg.dist_cfg.backend == 'gloo'

    metrics = test_tool.main([str(config), str(work / 'epoch_1.pth'),
                              '--work-dir', str(tmp_path / 'test')])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0

    # A longer schedule resumed from an explicit checkpoint, into another
    # work dir, runs only the second epoch.
    resumed = tmp_path / 'resumed'
    runner = train_tool.main([str(config), '--work-dir', str(resumed),
                              '--resume', str(work / 'epoch_1.pth'),
                              '--cfg-options', 'train_cfg.max_epochs=2'])
    assert 'resumed epoch: 1, iter: 3' in log_text(resumed)
    assert runner.epoch == 2 and runner.iter == 6  # 3 iterations per epoch
    assert (resumed / 'epoch_2.pth').exists()
    assert not (resumed / 'epoch_1.pth').exists()


def test_resume_auto_picks_the_latest_checkpoint(config, tmp_path):
    work = tmp_path / 'work'
    train_tool.main([str(config), '--work-dir', str(work)])
    first = log_text(work)
    runner = train_tool.main([str(config), '--work-dir', str(work), '--resume',
                              '--cfg-options', 'train_cfg.max_epochs=2'])
    assert 'resumed epoch' not in first
    assert 'resumed epoch: 1, iter: 3' in log_text(work)
    assert runner.epoch == 2 and runner.iter == 6


def test_default_work_dir_is_named_after_the_config(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    train_tool.main([str(config), '--cfg-options', 'train_cfg.max_epochs=0'])
    assert (tmp_path / 'work_dirs' / config.stem / config.name).exists()


def test_amp_trains_and_evaluates_in_reduced_precision(config, tmp_path):
    runner = train_tool.main([str(config), '--work-dir', str(tmp_path), '--amp'])
    wrapper = runner.optim_wrapper
    if torch.cuda.is_available():
        assert isinstance(wrapper, AmpOptimWrapper)
        assert wrapper.cast_dtype == torch.float16
    else:
        assert isinstance(wrapper, CPUAmpOptimWrapper)
        assert wrapper.cast_dtype == torch.bfloat16
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert torch.isfinite(torch.tensor(loss))

    metrics = test_tool.main([str(config), str(tmp_path / 'epoch_1.pth'), '--amp',
                              '--work-dir', str(tmp_path / 'test')])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0
    assert Config.fromfile(tmp_path / 'test' / config.name).test_cfg.fp16 is True


def other_model_checkpoint(config, path: Path) -> Path:
    """The config's weights with one missing, one extra and a wider head."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    state = MODELS.build(Config.fromfile(config).model).state_dict()
    del state['backbone.stages.0.pos_embed']
    state['neck.fc.weight'] = torch.zeros(3)
    state['head.fc.weight'] = torch.zeros(1000, state['head.fc.weight'].shape[1])
    torch.save(dict(state_dict=state, optimizer=dict(state={}, param_groups=[])), path)
    return path


def test_test_refuses_weights_that_do_not_fit_unless_told(config, tmp_path):
    other = other_model_checkpoint(config, tmp_path / 'retinanet.pth')
    with pytest.raises(ValueError, match=(
            rf'Checkpoint {other} does not fit the model ImageClassifier of '
            rf'{config}: weights 1 missing \(backbone.stages.0.pos_embed\), 1 '
            r'unexpected \(neck.fc.weight\), 1 of other shapes \(head.fc.weight: '
            r'checkpoint \(1000, 512\) vs model \(10, 512\)\).*--allow-partial-load')):
        test_tool.main([str(config), str(other), '--work-dir', str(tmp_path / 'test')])
    metrics = test_tool.main([str(config), str(other), '--allow-partial-load',
                              '--work-dir', str(tmp_path / 'partial')])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0
    assert '--allow-partial-load: evaluating ImageClassifier' in log_text(
        tmp_path / 'partial')


def test_resume_from_another_models_checkpoint_says_what_to_do(config, tmp_path):
    other = other_model_checkpoint(config, tmp_path / 'retinanet.pth')
    with pytest.raises(ValueError, match=(
            rf'Cannot resume from {other}: it is a checkpoint of another model than '
            rf'ImageClassifier of {config} .*--cfg-options load_from={other} '
            r'without --resume')):
        train_tool.main([str(config), '--work-dir', str(tmp_path / 'work'),
                         '--resume', str(other)])


def test_a_truncated_coco_file_is_named_before_the_run(tmp_path):
    from helpers.tiny_datasets import make_coco
    root = make_coco(tmp_path / 'coco')
    path = root / 'annotations' / 'instances_train2017.json'
    path.write_text(path.read_text()[:500])
    config = tmp_path / 'retinanet.py'
    config.write_text(f"""_base_ = ['{REPO / 'configs' / 'retinanet_softnorm-tiny_fpn_1x_coco.py'}']
train_dataloader = dict(dataset=dict(data_root='{root}/'))
""")
    with pytest.raises(ValueError, match=rf'Annotation file {path} is not valid JSON'):
        train_tool.main([str(config), '--work-dir', str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()


def test_a_label_outside_the_classes_names_the_file_and_values(tmp_path):
    import numpy as np
    from PIL import Image
    root = tmp_path / 'scenes'
    for split in ('train', 'val'):
        for i in range(2):
            (root / 'img_dir' / split).mkdir(parents=True, exist_ok=True)
            (root / 'ann_dir' / split).mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((96, 96, 3), 40 * i, np.uint8)).save(
                root / 'img_dir' / split / f'{i}.png')
            labels = np.zeros((96, 96), np.uint8)
            labels[10:30, 10:30] = 3
            labels[50:60, 50:60] = 200 if i == 1 else 255   # 11 classes, ignore 255
            Image.fromarray(labels).save(root / 'ann_dir' / split / f'{i}.png')
    config = tmp_path / 'upernet.py'
    config.write_text(f"""_base_ = ['{REPO / 'configs' / 'upernet_softnorm-tiny_96x96_10e_digit-scenes.py'}']
data_root = '{root}'
model = dict(backbone=dict(init_cfg=None))
train_dataloader = dict(batch_size=2, sampler=dict(shuffle=False),
                        dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=1)
""")
    with pytest.raises(ValueError, match=(
            rf'Label map {root}/ann_dir/train/1.png holds values \[200\] that are '
            r'neither one of the 11 classes 0 to 10 nor the ignore index 255')):
        train_tool.main([str(config), '--work-dir', str(tmp_path / 'work')])
