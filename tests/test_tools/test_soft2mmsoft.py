"""Released checkpoints convert to mmsoft and give the released model's logits."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.official_soft import official_forward, official_state_dict
from mmengine.registry import init_default_scope
from mmpretrain.registry import MODELS

import mmsoft  # noqa: F401  (registers SOFT, as custom_imports does)

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / 'tools' / 'model_converters' / 'soft2mmsoft.py'


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def classifier():
    init_default_scope('mmpretrain')
    return MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='SOFT', arch='tiny'),
        head=dict(type='LinearClsHead', num_classes=1000, in_channels=512))).eval()


@pytest.fixture(scope='module')
def released(tmp_path_factory):
    """A released-format tiny checkpoint as timm writes it, DDP prefixes included."""
    weights = official_state_dict(seed=1)
    ema = official_state_dict(seed=2)
    path = tmp_path_factory.mktemp('released') / 'soft_tiny.pth'
    torch.save(dict(state_dict={f'module.{k}': v for k, v in weights.items()},
                    state_dict_ema=ema, epoch=299), path)
    return path, weights, ema


@pytest.mark.parametrize('use_ema', [False, True])
def test_converted_checkpoint_reproduces_released_logits(released, tmp_path,
                                                         use_ema):
    path, weights, ema = released
    out = tmp_path / 'converted.pth'
    result = run_tool(path, out, *(['--ema'] if use_ema else []))
    assert result.returncode == 0, result.stderr
    model = classifier()
    model.load_state_dict(torch.load(out, weights_only=True)['state_dict'],
                          strict=True)
    reference = ema if use_ema else weights
    for size in ((224, 224), (160, 192)):
        img = torch.randn(2, 3, *size)
        with torch.no_grad():
            ours = model(img, mode='tensor')
        expected = official_forward(reference, img)
        rel = (ours - expected).norm() / expected.norm()
        assert rel < 1e-4, (size, rel)


def test_bare_state_dict_and_model_key_are_accepted(tmp_path):
    weights = official_state_dict(seed=3)
    for name, payload in (('bare', weights), ('model', dict(model=weights))):
        src, dst = tmp_path / f'{name}.pth', tmp_path / f'{name}_out.pth'
        torch.save(payload, src)
        assert run_tool(src, dst).returncode == 0
        converted = torch.load(dst, weights_only=True)['state_dict']
        assert 'backbone.stages.2.2.attn.landmark_conv.weight' in converted
        assert 'head.fc.weight' in converted


def test_unmapped_keys_stop_the_tool(tmp_path):
    weights = official_state_dict(seed=4)
    weights['block1.0.att.mha.attn.mystery'] = torch.zeros(1)
    src, dst = tmp_path / 'odd.pth', tmp_path / 'odd_out.pth'
    torch.save(weights, src)
    result = run_tool(src, dst)
    assert result.returncode != 0
    assert 'block1.0.att.mha.attn.mystery' in result.stderr
    assert not dst.exists()


def test_missing_ema_is_explained(tmp_path):
    src = tmp_path / 'no_ema.pth'
    torch.save(dict(state_dict=official_state_dict(seed=5)), src)
    result = run_tool(src, tmp_path / 'x.pth', '--ema')
    assert result.returncode != 0 and 'no state_dict_ema' in result.stderr
