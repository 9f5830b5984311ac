"""Importing mmsoft is cheap, needs no dense toolbox, and reports its environment."""
import subprocess
import sys
import textwrap

import mmsoft
from mmsoft.utils import collect_env


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_import_does_not_import_dense_toolboxes():
    result = run_python("""
        import sys
        import mmsoft
        loaded = sorted(m for m in sys.modules
                        if m.split('.')[0] in ('mmdet', 'mmseg'))
        print(loaded)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '[]'


def test_classification_works_without_mmdet_and_mmseg():
    # A finder that makes mmdet and mmseg unimportable, as on a machine
    # that installed only mmengine, mmcv and mmpretrain.
    result = run_python("""
        import sys

        class NoDenseToolboxes:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('mmdet', 'mmseg'):
                    raise ImportError(f'{name} is not installed')
                return None

        sys.meta_path.insert(0, NoDenseToolboxes())
        import torch
        import mmsoft
        from mmengine.registry import init_default_scope
        from mmpretrain.registry import MODELS
        init_default_scope('mmpretrain')
        model = MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type='SOFT', arch=dict(
                embed_dims=[16, 16, 32, 32], num_heads=[1, 1, 1, 1],
                depths=[1, 1, 1, 1])),
            head=dict(type='LinearClsHead', num_classes=3, in_channels=32)))
        scores = model.eval()(torch.rand(1, 3, 32, 32), mode='tensor')
        print(tuple(scores.shape))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == '(1, 3)'


def test_collect_env_reports_the_stack():
    info = collect_env()
    for key in ('PyTorch', 'MMCV', 'MMCV ops', 'MMEngine', 'MMPretrain',
                'MMDetection', 'MMSegmentation', 'NumPy', 'mmsoft', 'GCC'):
        assert key in info, key
    assert info['mmsoft'] == mmsoft.__version__
    assert info['MMCV ops'] == 'available'


def test_collect_env_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, '-m', 'mmsoft.utils.collect_env'],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert 'MMCV ops: available' in result.stdout
    assert 'RuntimeWarning' not in result.stderr
