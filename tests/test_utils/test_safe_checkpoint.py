"""mmengine checkpoints load weights-only; pickled code does not."""
import pickle

import pytest
import torch
import torch.nn as nn
from mmengine.logging import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import _load_checkpoint
from torch.utils.data import Dataset

import mmsoft  # noqa: F401  (registers the allow-list)
from mmsoft.utils.safe_checkpoint import history_buffer_method


class RegressionModel(BaseModel):
    """A small real model for a real Runner."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 1)

    def forward(self, inputs, targets=None, mode='tensor'):
        pred = self.linear(torch.stack(inputs)).squeeze(-1)
        if mode == 'loss':
            return dict(loss=((pred - torch.stack(targets)) ** 2).mean())
        return pred


class PointsDataset(Dataset):

    def __len__(self):
        return 8

    def __getitem__(self, index):
        x = torch.tensor([index / 8, 1 - index / 8])
        return dict(inputs=x, targets=x.sum())


def make_runner(work_dir, max_epochs, resume=False):
    torch.manual_seed(0)  # the same initial weights for every run
    return Runner(
        model=RegressionModel(),
        work_dir=str(work_dir),
        experiment_name=f'exp{max_epochs}{resume}',
        train_dataloader=dict(
            dataset=PointsDataset(),
            sampler=dict(type='DefaultSampler', shuffle=True),
            batch_size=2),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-2)),
        param_scheduler=dict(
            type='CosineAnnealingLR', T_max=4, by_epoch=True, begin=0, end=4),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
        randomness=dict(seed=0),
        resume=resume,
    )


def test_runner_resumes_from_its_own_checkpoint(tmp_path):
    first = make_runner(tmp_path, max_epochs=1)
    first.train()
    saved = torch.load(tmp_path / 'epoch_1.pth', weights_only=True)
    assert isinstance(saved['message_hub']['log_scalars']['train/loss'],
                      HistoryBuffer)

    resumed = make_runner(tmp_path, max_epochs=2, resume=True)
    resumed.train()
    straight = make_runner(tmp_path / 'straight', max_epochs=2)
    straight.train()
    assert resumed.train_loop.iter == straight.train_loop.iter == 8
    resumed_weights = resumed.model.linear.weight.detach()
    assert not torch.equal(resumed_weights, first.model.linear.weight.detach())
    torch.testing.assert_close(resumed_weights, straight.model.linear.weight.detach())
    assert torch.equal(
        torch.load(tmp_path / 'epoch_2.pth', weights_only=True)
        ['state_dict']['linear.weight'], resumed_weights)


class RunsCode:
    """Pickles into a call that creates a file when unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def test_pickled_code_is_refused_and_not_run(tmp_path):
    marker = tmp_path / 'marker'
    path = tmp_path / 'evil.pth'
    torch.save(dict(state_dict={}, payload=RunsCode(marker)), path)
    with pytest.raises(pickle.UnpicklingError,
                       match=r'Refused to load checkpoint .*evil\.pth.*can run code'):
        _load_checkpoint(str(path))
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path)  # torch's own default stays weights-only
    assert not marker.exists()


def test_getattr_stand_in_serves_only_statistics_methods(tmp_path):
    assert history_buffer_method(HistoryBuffer, 'mean') is HistoryBuffer.mean
    with pytest.raises(pickle.UnpicklingError, match='only HistoryBuffer'):
        history_buffer_method(HistoryBuffer, '__init__')
    with pytest.raises(pickle.UnpicklingError, match='only HistoryBuffer'):
        history_buffer_method(torch, 'load')

    class ReachesGlobals:

        def __reduce__(self):
            return (getattr, (HistoryBuffer, '__init__'))

    path = tmp_path / 'getattr.pth'
    torch.save(dict(x=ReachesGlobals()), path)
    with pytest.raises(pickle.UnpicklingError, match='getattr.pth'):
        _load_checkpoint(str(path))


def test_truncated_checkpoint_names_the_file(tmp_path):
    good = tmp_path / 'good.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(1000))), good)
    bad = tmp_path / 'truncated.pth'
    bad.write_bytes(good.read_bytes()[:500])
    with pytest.raises(RuntimeError, match=r'truncated\.pth is truncated or not'):
        _load_checkpoint(str(bad))
    with pytest.raises(FileNotFoundError, match='missing.pth can not be found'):
        _load_checkpoint(str(tmp_path / 'missing.pth'))


def test_random_bytes_are_not_a_checkpoint_and_get_no_unsafe_advice(tmp_path):
    path = tmp_path / 'noise.pth'
    path.write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8,
                                   generator=torch.Generator().manual_seed(0))
                     .numpy().tobytes())
    with pytest.raises(RuntimeError, match=r'noise\.pth is truncated or not a '
                       r'torch checkpoint') as info:
        _load_checkpoint(str(path))
    assert 'weights_only=False' not in str(info.value)
    assert 'can run code' not in str(info.value)
