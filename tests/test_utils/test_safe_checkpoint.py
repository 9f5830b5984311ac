"""mmengine checkpoints load weights-only; pickled code does not."""
import os
import pickle
import subprocess
import sys
import types

import pytest
import torch
import torch.nn as nn
from mmengine.logging import HistoryBuffer
from mmengine.model import BaseModel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import _load_checkpoint
from torch.utils.data import Dataset

import mmsoft.runtime  # noqa: F401  (registers the allow-list)
from mmsoft.utils import load_local_checkpoint
from mmsoft.utils.safe_checkpoint import _reason, _refusal, history_buffer_method


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
    with pytest.raises(RuntimeError, match=r'truncated\.pth is truncated, corrupt or not'):
        _load_checkpoint(str(bad))
    with pytest.raises(FileNotFoundError, match='missing.pth can not be found'):
        _load_checkpoint(str(tmp_path / 'missing.pth'))


def test_random_bytes_are_not_a_checkpoint_and_get_no_unsafe_advice(tmp_path):
    path = tmp_path / 'noise.pth'
    path.write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8,
                                   generator=torch.Generator().manual_seed(0))
                     .numpy().tobytes())
    with pytest.raises(RuntimeError, match=r'noise\.pth is truncated, corrupt or not a '
                       r'torch checkpoint') as info:
        _load_checkpoint(str(path))
    assert 'weights_only=False' not in str(info.value)
    assert 'can run code' not in str(info.value)


class Calls:
    """Pickles into ``func(*args)``, run when unpickled by a full pickle load."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def code_payloads(marker):
    """Reduce calls that would each create ``marker`` if they ever ran."""
    return {
        'os.system': Calls(os.system, f'touch {marker}'),
        'subprocess.call': Calls(subprocess.call, ['touch', str(marker)]),
        'eval': Calls(eval, f"open({str(marker)!r}, 'w')"),
    }


@pytest.mark.filterwarnings('ignore:Detected pickle protocol')
@pytest.mark.parametrize('call', ['os.system', 'subprocess.call', 'eval'])
@pytest.mark.parametrize('protocol', [2, 4])
def test_pickled_calls_are_refused_with_the_safe_way_out(tmp_path, call, protocol):
    marker = tmp_path / 'marker'
    path = tmp_path / 'evil.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(1)),
                    payload=code_payloads(marker)[call]), path,
               pickle_protocol=protocol)
    with pytest.raises(pickle.UnpicklingError,
                       match=r'Refused to load checkpoint .*evil\.pth: .*can run '
                       r'code; nothing in it was run\..*--unsafe-load') as info:
        _load_checkpoint(str(path))
    message = str(info.value)
    for advice in ('weights_only', 'Please use', 'truncated'):
        assert advice not in message
    assert not marker.exists()


TORCH_2_1_PREFIX = (  # torch 2.1 to 2.3 put the reason after this
    'Weights only load failed. Re-running `torch.load` with `weights_only` set to '
    '`False` will likely succeed, but it can result in arbitrary code execution.'
    'Do it only if you get the file from a trusted source. WeightsUnpickler error: ')
TORCH_2_4_PREFIX = (
    'Weights only load failed. This file can still be loaded, to do so you have '
    'two options, \x1b[1mdo those steps only if you trust the source of the '
    'checkpoint\x1b[0m. \n\t(1) In PyTorch 2.6, we changed the default value of '
    'the `weights_only` argument in `torch.load` from `False` to `True`. '
    'Re-running `torch.load` with `weights_only` set to `False` will likely '
    'succeed, but it can result in arbitrary code execution. Do it only if you '
    'got the file from a trusted source.\n\t(2) Alternatively, to load with '
    '`weights_only=True` please check the recommended steps in the following '
    'error message.\n\tWeightsUnpickler error: ')
TORCH_2_6_BLOCKED = (
    'Weights only load failed. In PyTorch 2.6, we changed the default value of the '
    '`weights_only` argument in `torch.load` from `False` to `True`. Re-running '
    '`torch.load` with `weights_only` set to `False` will likely succeed, but it '
    'can result in arbitrary code execution. Do it only if you got the file from '
    'a trusted source.\n\n\nTrying to load unsupported GLOBAL posix.system whose '
    'module posix is blocked.\n\nCheck the documentation of torch.load to learn '
    'more about types accepted by default with weights_only '
    'https://pytorch.org/docs/stable/generated/torch.load.html.')


@pytest.mark.parametrize('message,reason', [
    (TORCH_2_1_PREFIX + 'Unsupported class posix.system',
     'Unsupported class posix.system'),
    (TORCH_2_1_PREFIX + 'Trying to call reduce for unrecognized function '
     '<built-in function system>', 'Trying to call reduce for unrecognized function'),
    (TORCH_2_1_PREFIX + "Trying to instantiate unsupported class <class 'x.Y'>",
     'Trying to instantiate unsupported class'),
    (TORCH_2_1_PREFIX + "Can only build Tensor, parameter or dict objects, but got "
     "<class 'x.Y'>", 'Can only build Tensor'),
    (TORCH_2_4_PREFIX + 'Unsupported global: GLOBAL eval was not an allowed global '
     'by default. Please use `torch.serialization.add_safe_globals([eval])` or the '
     '`torch.serialization.safe_globals([eval])` context manager to allowlist this '
     'global if you trust this class/function.',
     'Unsupported global: GLOBAL eval was not an allowed global by default.'),
    (TORCH_2_4_PREFIX + 'Can only create new object for nn.Parameter or classes '
     "allowlisted via `add_safe_globals` but got <class 'x.Y'>",
     'Can only create new object for nn.Parameter'),
    (TORCH_2_6_BLOCKED, 'Trying to load unsupported GLOBAL posix.system whose '
     'module posix is blocked.'),
    (TORCH_2_1_PREFIX + 'Unsupported operand 149', 'Unsupported operand 149'),
])
def test_every_wording_of_a_refusal_is_recognised_without_torchs_advice(message,
                                                                       reason):
    err = pickle.UnpicklingError(message)
    assert _refusal(err) is not None
    assert _reason(err).startswith(reason)
    for advice in ('weights_only', 'Please use', 'trusted', 'Re-running'):
        assert advice not in _reason(err)


@pytest.mark.parametrize('message', [
    'persistent_load id must be tuple or int, but got <class \'str\'>',
    TORCH_2_1_PREFIX + 'Can only append to lists, but got <class \'dict\'>',
    'String is too long',
    TORCH_2_1_PREFIX + 'Unsupported operand 0',   # no pickle instruction at all
])
def test_malformed_pickles_are_not_taken_for_refused_code(message):
    assert _refusal(pickle.UnpicklingError(message)) is None


@pytest.mark.parametrize('make', ['text', 'link to /etc/passwd'])
def test_text_files_and_links_to_them_are_not_checkpoints(tmp_path, make):
    from mmsoft.models import SOFT
    path = tmp_path / 'weights.pth'
    if make == 'text':
        path.write_text('epoch: 3\nlr: 0.1\n')
        named = r'weights\.pth'
    else:
        path.symlink_to('/etc/passwd')
        named = r'weights\.pth \(a link to /etc/passwd\)'
    expected = named + r' is truncated, corrupt or not a torch checkpoint \(it is text'
    with pytest.raises(RuntimeError, match=expected):
        _load_checkpoint(str(path))   # load_from, --resume, tools/test.py
    backbone = SOFT(arch=dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                              depths=[1, 1, 1, 1]),
                    init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(RuntimeError, match=expected):
        backbone.init_weights()


def legacy_header_then_zeros(path, kept):
    """A checkpoint of torch's legacy format whose bytes after ``kept`` became
    zeros (a file lost past its first blocks)."""
    good = path.with_name('legacy_good.pth')
    torch.save(dict(state_dict=dict(w=torch.ones(1000))), good,
               _use_new_zipfile_serialization=False)
    data = good.read_bytes()
    path.write_bytes(data[:kept] + bytes(len(data) - kept))


@pytest.mark.parametrize('weights_only', [True, False])
@pytest.mark.parametrize('make', ['legacy header (2 bytes), then zeros',
                                  'legacy magic number (15 bytes), then zeros',
                                  'zeros'])
def test_corrupt_files_are_called_corrupt(tmp_path, make, weights_only):
    path = tmp_path / 'damaged.pth'
    if make == 'zeros':
        path.write_bytes(bytes(4096))   # also a valid empty tar archive
    else:
        legacy_header_then_zeros(path, 2 if '2 bytes' in make else 15)
    with pytest.raises(RuntimeError, match=r'damaged\.pth is truncated, corrupt or '
                       r'not a torch checkpoint') as info:
        load_local_checkpoint(str(path), weights_only=weights_only)
    for wrong in ('can run code', 'unsafe', 'weights_only', 'storages'):
        assert wrong not in str(info.value)


def test_an_unsafe_load_names_code_that_is_not_installed(tmp_path):
    module = types.ModuleType('mmsoft_gone_module')
    module.Gone = type('Gone', (), {'__module__': 'mmsoft_gone_module'})
    sys.modules['mmsoft_gone_module'] = module
    try:
        torch.save(dict(state_dict=dict(w=torch.ones(1)), extra=module.Gone()),
                   tmp_path / 'gone.pth')
    finally:
        del sys.modules['mmsoft_gone_module']
    with pytest.raises(RuntimeError, match=r"gone\.pth holds objects of code that is "
                       r"not installed here \(ModuleNotFoundError: No module named "
                       r"'mmsoft_gone_module'\)"):
        load_local_checkpoint(str(tmp_path / 'gone.pth'), weights_only=False)
