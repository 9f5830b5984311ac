"""ONNX export of SOFT models and ONNX Runtime against torch."""
import re

import pytest
import torch

from mmsoft.deployment import check_request, export_onnx, load_model, verify_onnx
from mmsoft.models import SOFT
from mmsoft.ops import export_path, exporting, use_newton_route
from mmsoft.ops.dispatch import route_name_for
from tools.deployment.pytorch2onnx import main

RETINANET = 'configs/retinanet_softnorm-tiny_fpn_1x_coco.py'
UPERNET = 'configs/upernet_softnorm-small_512x512_160k_ade20k.py'
TOLERANCE = 1e-4  # largest relative difference ONNX Runtime vs torch eager


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[2])


def _relative(actual, expected):
    return max(float((a - e).abs().max() / e.abs().max())
               for a, e in zip(actual, expected))


def test_export_path_equals_default_where_eager_takes_eig():
    # 320 x 320: 100 landmarks in stage 1; eager evaluates the Newton iterate
    # through eigh (forced here: the measured route varies by machine), the
    # export path runs the iteration itself.
    torch.manual_seed(0)
    model = SOFT(arch='tiny-norm', out_type='featmap',
                 out_indices=(0, 1, 2, 3)).eval()
    model.init_weights()
    x = torch.randn(1, 3, 320, 320)
    with torch.no_grad():
        with use_newton_route('eigh'):
            assert route_name_for('cpu', 100, exporting()) == 'eigh'
            default = model(x)
        with export_path():
            assert route_name_for('cpu', 100, exporting()) == 'loop'
            graph = model(x)
    assert _relative(graph, default) < 1e-5


def test_classifier_export_at_224_matches_torch(tmp_path, capsys):
    out = tmp_path / 'soft_tiny.onnx'
    assert main(['configs/soft_tiny_imagenet.py', '--shape', '224', '224',
                 '--out', str(out), '--verify']) == 0
    printed = capsys.readouterr().out
    assert 'outputs cls_score; serves batch 1 at 224 x 224 only' in printed
    diff = float(re.search(r'at 224 x 224: largest relative difference (\S+)',
                           printed).group(1))
    assert diff <= TOLERANCE
    import onnx
    graph = onnx.load(str(out)).graph
    assert [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim] == [1, 1000]
    assert not any(node.op_type in ('Loop', 'If') for node in graph.node)


@pytest.mark.slow
def test_dynamic_retinanet_serves_other_sizes(tmp_path):
    # SOFT-Norm-Tiny at 320 x 320 (eig path in eager), checked at two sizes
    # it was not exported at.
    model = load_model(RETINANET)
    out = str(tmp_path / 'retinanet.onnx')
    export_onnx(model, (320, 320), out, dynamic=True)
    diffs = verify_onnx(model, out, [(320, 320), (256, 384), (480, 352)], batch=2)
    assert len(diffs) == 3
    assert max(diffs.values()) <= TOLERANCE, diffs
    assert model.output_names[:2] == ['cls_score_0', 'cls_score_1']


@pytest.mark.slow
def test_upernet_softnorm_tiny_export(tmp_path):
    model = load_model(UPERNET, cfg_options={'model.backbone.arch': 'tiny-norm'})
    assert model.task == 'segmentor'
    with pytest.raises(ValueError, match='--dynamic cannot serve.*pools adaptively'):
        check_request(model, (320, 320), dynamic=True)
    out = str(tmp_path / 'upernet.onnx')
    export_onnx(model, (320, 320), out)
    assert verify_onnx(model, out, [(320, 320)])[(320, 320)] <= TOLERANCE


def test_bad_requests_get_clear_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match='does not exist; pass a config'):
        load_model('configs/no_such_config.py')
    model = load_model(RETINANET)
    out = tmp_path / 'never.onnx'
    with pytest.raises(ValueError, match='not divisible by 32.*--shape 352 320'):
        export_onnx(model, (330, 320), str(out))
    with pytest.raises(ValueError, match='--dynamic serves sides from 160 px'):
        check_request(model, (128, 128), dynamic=True)
    capped = load_model(RETINANET, cfg_options={
        'model.backbone.attn_cfg': dict(type='SOFTAttention', max_landmarks=64)})
    with pytest.raises(ValueError, match='--dynamic cannot serve.*max_landmarks=64'):
        export_onnx(capped, (320, 320), str(out), dynamic=True)
    assert main([RETINANET, '--shape', '320', '321', '--out', str(out)]) == 1
    assert 'is not divisible by 32' in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no file, not even a partial one
    from mmsoft.ops import InverseCfg, bottleneck_apply
    with export_path(), pytest.raises(ValueError, match="method='solve'.*cannot be"):
        bottleneck_apply(torch.eye(3)[None], torch.ones(1, 3, 1),
                         InverseCfg(method='solve'))


def test_exported_file_gets_the_mode_open_would_give(tmp_path):
    import os

    from mmsoft.deployment.onnx_export import export_module
    old = os.umask(0o027)
    try:
        out = export_module(torch.nn.Conv2d(3, 4, 3), torch.randn(1, 3, 8, 8),
                            str(tmp_path / 'conv.onnx'))
    finally:
        os.umask(old)
    assert os.stat(out).st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ['conv.onnx']


def test_newton_node_export_runs_in_onnx_runtime_as_eager(tmp_path, capsys):
    # 320 x 320 UperNet: 100 landmarks per SOFT stage, so eager and the node
    # both take a spectral route; the node is one custom node per attention.
    out = tmp_path / 'upernet_node.onnx'
    assert main([UPERNET, '--shape', '320', '320', '--out', str(out), '--newton-node',
                 '--cfg-options', 'model.backbone.arch=tiny-norm', '--verify']) == 0
    diff = float(re.search(r'largest relative difference (\S+)',
                           capsys.readouterr().out).group(1))
    assert diff <= 1e-5
    import onnx

    from mmsoft.deployment import has_newton_node
    from mmsoft.ops.dispatch import NEWTON_NODE
    domain, name = NEWTON_NODE.split('::')
    nodes = [n for n in onnx.load(str(out)).graph.node if n.op_type == name]
    assert len(nodes) == 6 and all(n.domain == domain for n in nodes)  # 1 + 2 + 3 blocks
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}
    assert attrs == dict(num_iters=20, reg=pytest.approx(0.01), backoff=0, group=2)
    assert has_newton_node(str(out))
    standard = tmp_path / 'standard.onnx'
    model = load_model(UPERNET, cfg_options={'model.backbone.arch': 'tiny-norm'})
    export_onnx(model, (64, 64), str(standard))
    assert not has_newton_node(str(standard))
