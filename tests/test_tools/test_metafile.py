"""configs/metafile.yml matches the configs and the FLOP counter."""
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_metafile_is_up_to_date():
    from importlib import import_module
    make_metafile = import_module('tools.analysis.make_metafile')
    expected = make_metafile.dump(make_metafile.make())
    assert (REPO / 'configs' / 'metafile.yml').read_text() == expected, (
        'configs/metafile.yml is out of date: run '
        'python tools/analysis/make_metafile.py')


def test_model_index_covers_every_benchmark_config():
    index = yaml.safe_load((REPO / 'model-index.yml').read_text())
    assert index['Import'] == ['configs/metafile.yml']
    models = yaml.safe_load((REPO / 'configs' / 'metafile.yml').read_text())['Models']
    listed = {m['Config'] for m in models}
    configs = {f'configs/{p.name}' for p in (REPO / 'configs').glob('*.py')}
    demos = {p for p in configs if p.endswith(('_digits.py', '_digit-scenes.py'))}
    assert demos >= {'configs/soft_tiny_digits.py', 'configs/softnorm_tiny_digits.py'}
    assert configs - listed == demos  # the download-free demos only
    for model in models:
        assert (REPO / model['Config']).exists()
        assert model['Metadata']['Parameters'] > 0 and model['Results']
        if model['Name'].endswith('_imagenet'):
            assert 1e9 < model['Metadata']['FLOPs'] < 2e10
