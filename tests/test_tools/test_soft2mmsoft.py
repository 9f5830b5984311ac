"""Released checkpoints convert to mmsoft and give the released model's logits."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.logs import logged_messages
from helpers.official_soft import official_forward, official_state_dict
from helpers.tools import load_tool
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint
from mmpretrain.registry import MODELS

import mmsoft  # noqa: F401  (registers SOFT, as custom_imports does)

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / 'tools' / 'model_converters' / 'soft2mmsoft.py'


def run_tool(*args):
    """The tool as a user runs it, in a fresh interpreter."""
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def call_tool(*args):
    """The tool's ``main`` in this process: (exit status, error message)."""
    tool = load_tool(TOOL)
    try:
        tool.main([str(a) for a in args])
    except SystemExit as stop:
        return 1, str(stop.code)
    return 0, ''


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


def test_converted_checkpoint_reproduces_released_logits(released, tmp_path):
    path, weights, _ = released
    out = tmp_path / 'converted.pth'
    result = run_tool(path, out, '--newton', 'ridge')
    assert result.returncode == 0, result.stderr
    model = classifier()
    model.load_state_dict(torch.load(out, weights_only=True)['state_dict'],
                          strict=True)
    for size in ((224, 224), (160, 192)):
        img = torch.randn(2, 3, *size)
        with torch.no_grad():
            ours = model(img, mode='tensor')
        expected = official_forward(weights, img)
        rel = (ours - expected).norm() / expected.norm()
        assert rel < 1e-4, (size, rel)


def test_ema_flag_picks_the_ema_weights(released, tmp_path):
    path, _, ema = released
    out = tmp_path / 'converted_ema.pth'
    status, message = call_tool(path, out, '--ema')
    assert status == 0, message
    checkpoint = torch.load(out, weights_only=True)
    assert checkpoint['meta']['ema'] is True
    converted = checkpoint['state_dict']
    classifier().load_state_dict(converted, strict=True)
    torch.testing.assert_close(converted['backbone.stages.3.cls_token'], ema['cls_token'])
    torch.testing.assert_close(converted['head.fc.weight'], ema['head.weight'])
    torch.testing.assert_close(
        converted['backbone.stages.2.blocks.1.attn.landmark_conv.weight'],
        ema['block3.1.att.mha.attn.Qlandmark_op.weight'])


def test_bare_state_dict_and_model_key_are_accepted(tmp_path):
    weights = official_state_dict(seed=3)
    for name, payload in (('bare', weights), ('model', dict(model=weights))):
        src, dst = tmp_path / f'{name}.pth', tmp_path / f'{name}_out.pth'
        torch.save(payload, src)
        assert call_tool(src, dst) == (0, '')
        converted = torch.load(dst, weights_only=True)['state_dict']
        assert 'backbone.stages.2.blocks.2.attn.landmark_conv.weight' in converted
        assert 'head.fc.weight' in converted


def test_unmapped_keys_stop_the_tool(tmp_path):
    weights = official_state_dict(seed=4)
    weights['block1.0.att.mha.attn.mystery'] = torch.zeros(1)
    src, dst = tmp_path / 'odd.pth', tmp_path / 'odd_out.pth'
    torch.save(weights, src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert 'block1.0.att.mha.attn.mystery' in message
    assert not dst.exists()


def test_missing_ema_is_explained(tmp_path):
    src = tmp_path / 'no_ema.pth'
    torch.save(dict(state_dict=official_state_dict(seed=5)), src)
    status, message = call_tool(src, tmp_path / 'x.pth', '--ema')
    assert status != 0 and 'no state_dict_ema' in message


@pytest.mark.parametrize('size', [(224, 224), (96, 128), (33, 65)])
def test_small_custom_arch_matches_the_released_forward(size):
    from mmsoft.models.utils.ckpt_convert import convert_soft_state_dict
    arch = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4],
                depths=[1, 1, 2, 1])
    weights = official_state_dict(arch=arch, num_classes=10, seed=6)
    converted, leftovers = convert_soft_state_dict(weights, with_head=True)
    assert leftovers == []
    init_default_scope('mmpretrain')
    model = MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='SOFT', arch=arch),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=64))).eval()
    model.load_state_dict(converted, strict=True)
    img = torch.randn(2, 3, *size)
    with torch.no_grad():
        ours = model(img, mode='tensor')
    expected = official_forward(weights, img, arch=arch)
    assert (ours - expected).norm() / expected.norm() < 1e-4


class CreatesFile:
    """Pickles into a call that creates ``marker`` when unpickled."""

    def __init__(self, marker, call='exec'):
        self.marker, self.call = str(marker), call

    def __reduce__(self):
        if self.call == 'os.system':
            return (os.system, (f'touch {self.marker}',))
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


@pytest.mark.parametrize('call', ['exec', 'os.system'])
def test_pickled_code_is_refused_and_never_run(tmp_path, call):
    marker = tmp_path / 'marker'
    src, dst = tmp_path / 'evil.pth', tmp_path / 'evil_out.pth'
    weights = official_state_dict(seed=8)
    torch.save(dict(state_dict=weights, payload=CreatesFile(marker, call)), src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert 'Refused to load checkpoint' in message and '--unsafe-load' in message
    assert 'can run code' in message and 'truncated' not in message
    assert 'weights_only' not in message
    assert not marker.exists()
    assert not dst.exists()


@pytest.mark.parametrize('flags', [(), ('--unsafe-load', )])
@pytest.mark.parametrize('make', ['legacy header, then zeros', 'zeros'])
def test_a_corrupt_file_is_called_corrupt_and_no_flag_is_repeated(tmp_path, make,
                                                                  flags):
    src, dst = tmp_path / 'damaged.pth', tmp_path / 'damaged_out.pth'
    if make == 'zeros':
        src.write_bytes(bytes(4096))
    else:
        torch.save(dict(state_dict=official_state_dict(seed=17)), src,
                   _use_new_zipfile_serialization=False)
        src.write_bytes(src.read_bytes()[:2] + bytes(src.stat().st_size - 2))
    status, message = call_tool(src, dst, *flags)
    assert status != 0
    assert f'{src} is truncated, corrupt or not a torch checkpoint' in message
    assert 'can run code' not in message and 'storages' not in message
    assert '--unsafe-load' not in message    # no advice to load it unsafely
    assert not dst.exists()


@pytest.mark.parametrize('link', ['same path', 'symlink', 'hard link'])
@pytest.mark.parametrize('force', [False, True])
def test_the_source_is_never_overwritten(tmp_path, link, force):
    src = tmp_path / 'soft_tiny.pth'
    torch.save(dict(state_dict=official_state_dict(seed=11)), src)
    before = src.read_bytes()
    dst = {'same path': src, 'symlink': tmp_path / 'link.pth',
           'hard link': tmp_path / 'hard.pth'}[link]
    if link == 'symlink':
        dst.symlink_to(src)
    elif link == 'hard link':
        os.link(src, dst)
    status, message = call_tool(src, dst, *(['--force'] if force else []))
    assert status != 0
    assert f'{dst} is the source {src} itself' in message
    assert src.read_bytes() == before


def test_an_existing_file_is_replaced_only_with_force(tmp_path):
    src, dst = tmp_path / 'soft_tiny.pth', tmp_path / 'mine.pth'
    torch.save(dict(state_dict=official_state_dict(seed=12)), src)
    dst.write_bytes(b'my own file')
    status, message = call_tool(src, dst)
    assert status != 0 and f'{dst} exists; pass --force' in message
    assert dst.read_bytes() == b'my own file'
    assert call_tool(src, dst, '--force') == (0, '')
    assert 'backbone.stages.3.cls_token' in torch.load(dst, weights_only=True)['state_dict']
    assert sorted(os.listdir(tmp_path)) == ['mine.pth', 'soft_tiny.pth']


def test_a_folder_as_destination_is_explained(tmp_path):
    src = tmp_path / 'soft_tiny.pth'
    torch.save(dict(state_dict=official_state_dict(seed=13)), src)
    status, message = call_tool(src, tmp_path)
    assert status != 0
    assert f'{tmp_path} is a folder; name the file to write, e.g. ' \
        f'{tmp_path / "soft_tiny_mmsoft.pth"}' in message


def test_plain_numbers_become_tensors_and_the_output_loads(tmp_path):
    weights = official_state_dict(seed=14)
    count = weights['patch_embed1.proj.1.num_batches_tracked'] = 7   # a plain int
    src, dst = tmp_path / 'ints.pth', tmp_path / 'ints_out.pth'
    torch.save(dict(state_dict=weights), src)
    assert call_tool(src, dst) == (0, '')
    converted = torch.load(dst, weights_only=True)['state_dict']
    tracked = converted['backbone.stages.0.patch_embed.proj.1.num_batches_tracked']
    assert isinstance(tracked, torch.Tensor) and tracked.item() == count
    classifier().load_state_dict(converted, strict=True)


def test_values_that_are_not_weights_are_refused(tmp_path):
    weights = official_state_dict(seed=15)
    weights['block1.0.att.norm1.weight'] = 'ones'
    src, dst = tmp_path / 'odd.pth', tmp_path / 'odd_out.pth'
    torch.save(dict(state_dict=weights), src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert "holds values that are not weights: {'block1.0.att.norm1.weight': 'str'}" \
        in message
    assert not dst.exists()


def test_weights_with_and_without_the_ddp_prefix_are_refused(tmp_path):
    weights = official_state_dict(seed=16)
    state = {f'module.{k}': v for k, v in weights.items()}
    state['cls_token'] = torch.zeros_like(weights['cls_token'])   # a second copy
    state['norm.weight'] = torch.zeros_like(weights['norm.weight'])
    src, dst = tmp_path / 'twice.pth', tmp_path / 'twice_out.pth'
    torch.save(dict(state_dict=state), src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert (f"{src} holds weights twice, with and without the prefix 'module.' "
            "(2 of them): "
            "'module.cls_token' and 'cls_token' -> 'cls_token'; 'module.norm.weight' "
            "and 'norm.weight' -> 'norm.weight'. Which copy is meant is not known"
            in message), message
    assert not dst.exists()


def test_non_finite_weights_stop_the_tool_unless_allowed(tmp_path):
    weights = official_state_dict(seed=18)
    weights['block2.0.att.mha.W_q.weight'][0, :3] = float('nan')
    weights['cls_token'][0, 0, 0] = float('-inf')
    src, dst = tmp_path / 'diverged.pth', tmp_path / 'diverged_out.pth'
    torch.save(dict(state_dict=weights), src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert (f'{src} holds weights with NaN or Inf (2 of {len(weights)}): '
            'cls_token (0 NaN, 1 Inf of 512), block2.0.att.mha.W_q.weight (3 NaN, '
            '0 Inf of 16384). A model with them gives NaN outputs.' in message), message
    assert message.endswith('or pass --allow-non-finite to load them as they are.')
    assert not dst.exists()
    with logged_messages() as logged:
        assert call_tool(src, dst, '--allow-non-finite') == (0, '')
    assert any('holds weights with NaN or Inf (2 of' in m and 'as asked' in m
               for m in logged), logged
    converted = torch.load(dst, weights_only=True)['state_dict']
    assert converted['backbone.stages.1.blocks.0.attn.q.weight'].isnan().sum() == 3


def test_a_training_state_with_an_args_namespace_converts(tmp_path):
    import argparse
    weights = official_state_dict(seed=9)
    src, dst = tmp_path / 'trained.pth', tmp_path / 'trained_out.pth'
    torch.save(dict(state_dict=weights, epoch=299, arch='SOFT_Tiny',
                    args=argparse.Namespace(lr=1e-3, model='SOFT_Tiny')), src)
    assert call_tool(src, dst) == (0, '')
    assert 'backbone.stages.3.cls_token' in torch.load(dst, weights_only=True)['state_dict']


def test_ema_only_file_selects_as_the_loader_does_and_says_so(tmp_path):
    from mmsoft.models.utils import extract_state_dict
    weights = official_state_dict(seed=10)
    src, dst = tmp_path / 'ema_only.pth', tmp_path / 'ema_only_out.pth'
    torch.save(dict(state_dict_ema=weights), src)
    assert call_tool(src, dst) == (0, '')
    written = torch.load(dst, weights_only=True)
    converted = written['state_dict']
    selected = extract_state_dict(torch.load(src, weights_only=True))
    torch.testing.assert_close(converted['backbone.stages.3.cls_token'], selected['cls_token'])
    assert written['meta']['ema'] is True   # the weights are the EMA ones


@pytest.mark.parametrize('payload,expected', [
    (None, r'not a torch checkpoint'),
    ([torch.ones(1)], r'holds a list, not a dict of weights'),
    ({}, r'holds no tensors'),
    (dict(epoch=3, arch='SOFT_Tiny'), r'holds no tensors'),
    (dict(state_dict=dict(fc=torch.ones(1))), r'have no mapping'),
])
def test_inputs_that_are_not_soft_checkpoints_stop_the_tool(tmp_path, payload,
                                                            expected):
    import re
    src, dst = tmp_path / 'input.pth', tmp_path / 'out.pth'
    if payload is None:
        src.write_bytes(bytes(range(256)) * 4)
    else:
        torch.save(payload, src)
    status, message = call_tool(src, dst)
    assert status != 0
    assert re.search(expected, message), message
    assert 'weights_only=False' not in message
    assert not dst.exists()


def config_model(name):
    """The classifier of a config in ``configs/``, as tools/test.py builds it."""
    init_default_scope('mmpretrain')
    return MODELS.build(Config.fromfile(REPO / 'configs' / name).model).eval()


@pytest.mark.parametrize('config,normalize', [('soft_tiny_imagenet.py', False),
                                              ('softnorm_tiny_imagenet.py', True)])
@pytest.mark.parametrize('flags', [(), ('--newton', 'ridge')])
def test_newton_flag_is_carried_by_the_checkpoint(released, tmp_path, config,
                                                  normalize, flags):
    """The back-off twins of the released-forward test, for SOFT and SOFT-Norm."""
    path, weights, _ = released
    out = tmp_path / 'converted.pth'
    assert call_tool(path, out, *flags) == (0, '')
    newton = flags[1] if flags else 'backoff'   # the default is the releases'
    assert torch.load(out, weights_only=True)['meta']['newton'] == newton
    model = config_model(config)
    assert model.backbone.newton == 'ridge'     # from scratch: ridge
    with logged_messages() as messages:
        load_checkpoint(model, str(out), map_location='cpu', strict=True)
    assert model.backbone.newton == newton
    if newton == 'backoff':
        assert any("Newton inverse 'backoff' taken from the checkpoint" in m
                   for m in messages), messages
    # In float64, so that the two inverses (4e-5 apart here) are told apart.
    img = torch.randn(1, 3, 128, 160, dtype=torch.float64)
    weights = {k: v.double() if v.is_floating_point() else v for k, v in weights.items()}
    with torch.no_grad():
        ours = model.double()(img, mode='tensor')
    expected = official_forward(weights, img, normalize=normalize, newton=newton)
    other = official_forward(weights, img, normalize=normalize,
                             newton='ridge' if newton == 'backoff' else 'backoff')
    assert (ours - expected).norm() / expected.norm() < 1e-12
    assert (other - expected).norm() / expected.norm() > 1e-6  # a different network


def test_dense_fine_tuning_keeps_the_checkpoints_inverse(released, tmp_path):
    from mmsoft.models import SOFT
    path, _, _ = released
    out = tmp_path / 'converted.pth'
    assert call_tool(path, out) == (0, '')
    init = dict(type='Pretrained', checkpoint=str(out), prefix='backbone.')
    dense = SOFT(arch='tiny-norm', out_type='featmap', out_indices=(0, 1, 2, 3),
                 init_cfg=init)
    dense.init_weights()
    assert dense.newton == 'backoff'
    assert dense.state_dict()['newton_variant'] == 1
    assert all(attn.inverse.backoff and attn.inverse.reg == 0 and attn.normalize
               for attn in dense.soft_attentions)
    told = SOFT(arch='tiny-norm', out_type='featmap', out_indices=(0, 1, 2, 3),
                init_cfg=init, newton='ridge')
    told.init_weights()
    assert told.newton == 'ridge'               # the config says otherwise


def test_bad_newton_value_is_explained(released, tmp_path, capsys):
    path, _, _ = released
    status, _ = call_tool(path, tmp_path / 'x.pth', '--newton', 'exact')
    assert status != 0
    assert "invalid choice: 'exact'" in capsys.readouterr().err
    assert not (tmp_path / 'x.pth').exists()
