"""mmengine's ``compile`` setting: tools/train.py with a compiled train step."""
from pathlib import Path

import pytest
import torch
from helpers.batchnorm import bias_before_batchnorm
from helpers.tools import load_tool

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_compiled_training_equals_eager(tmp_path):
    # Runner._maybe_compile wraps model.train_step in torch.compile with the
    # config's `compile` dict; aot_eager traces forward and backward as
    # inductor does, without generating code.
    train = load_tool(REPO / 'tools' / 'train.py', 'train_for_compile')
    prepare = load_tool(REPO / 'tools' / 'dataset_converters' / 'prepare_digits.py',
                    'prepare_digits_for_compile')
    prepare.prepare_digits(str(tmp_path / 'digits'))
    config = tmp_path / 'digits_compile.py'
    config.write_text(f"""_base_ = ['{REPO / 'configs' / 'soft_tiny_digits.py'}']
data_root = '{tmp_path / 'digits'}'
train_dataloader = dict(batch_size=8, dataset=dict(data_root=data_root, indices=16),
                        sampler=dict(shuffle=False))
val_dataloader = dict(batch_size=16, dataset=dict(data_root=data_root, indices=16))
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=1, val_interval=1)
randomness = dict(seed=0)
# Plain SGD: its steps follow the gradients' rounding smoothly, where Adam's
# normalised steps turn near-zero gradients' rounding into full steps.
optim_wrapper = dict(optimizer=dict(_delete_=True, type='SGD', lr=0.01, weight_decay=0.05))
""")
    runners = {}
    for name, options in (('eager', []),
                          ('compiled', ['compile.backend=aot_eager'])):
        torch._dynamo.reset()
        runners[name] = train.main([str(config), '--work-dir', str(tmp_path / name),
                                    '--cfg-options', *options] if options else
                                   [str(config), '--work-dir', str(tmp_path / name)])
    compiled = runners['compiled'].model.train_step
    assert hasattr(compiled, '_torchdynamo_orig_callable')  # it was compiled
    eager_params = dict(runners['eager'].model.named_parameters())
    # A convolution bias before a train-mode BatchNorm gets only rounding noise.
    cancelled = bias_before_batchnorm(runners['eager'].model)
    assert len(cancelled) == 6
    # A gradient that cancels to rounding noise elsewhere (|g| ~ 1e-5 where
    # the rest are ~1e-2 to 10) moves its parameter by lr x noise, so a
    # parameter may differ by that much (1e-6) besides its relative 1e-4.
    for name, param in runners['compiled'].model.named_parameters():
        if name in cancelled:
            continue
        expected = eager_params[name]
        diff = float((param - expected).abs().max())
        assert diff < 1e-4 * float(expected.abs().max()) + 1e-6, (name, diff)
