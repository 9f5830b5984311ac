"""configs/metafile.yml matches the configs and the FLOP counter, and
model-index-classification.yml holds its classification entries."""
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def test_metafile_is_up_to_date():
    from importlib import import_module
    make_metafile = import_module('tools.analysis.make_metafile')
    expected = make_metafile.dump(make_metafile.make())
    assert (REPO / 'configs' / 'metafile.yml').read_text() == expected, (
        'configs/metafile.yml is out of date: run '
        'python tools/analysis/make_metafile.py')


def test_classification_index_holds_the_classifiers_of_the_metafile():
    from importlib import import_module
    make_metafile = import_module('tools.analysis.make_metafile')
    metafile = yaml.safe_load((REPO / 'configs' / 'metafile.yml').read_text())
    text = (REPO / 'model-index-classification.yml').read_text()
    assert text == make_metafile.dump_classifiers(metafile), (
        'model-index-classification.yml is out of date: run '
        'python tools/analysis/make_metafile.py')
    index = yaml.safe_load(text)
    assert index['Collections'] == metafile['Collections']
    names = [m['Name'] for m in index['Models']]
    assert len(names) == 10 and all(n.endswith('_imagenet') for n in names)
    assert [m for m in metafile['Models'] if m['Name'] in names] == index['Models']


def test_check_names_the_stale_file(tmp_path, monkeypatch, capsys):
    from importlib import import_module
    make_metafile = import_module('tools.analysis.make_metafile')
    data = yaml.safe_load((REPO / 'configs' / 'metafile.yml').read_text())
    monkeypatch.setattr(make_metafile, 'make', lambda: data)
    monkeypatch.setattr(make_metafile, 'REPO', tmp_path)
    monkeypatch.setattr(make_metafile, 'METAFILE', tmp_path / 'configs' / 'metafile.yml')
    monkeypatch.setattr(make_metafile, 'CLASSIFIERS',
                        tmp_path / 'model-index-classification.yml')
    (tmp_path / 'configs').mkdir()
    make_metafile.main([])
    make_metafile.main(['--check'])
    assert 'are up to date' in capsys.readouterr().out
    (tmp_path / 'model-index-classification.yml').write_text('Models: []\n')
    with pytest.raises(SystemExit, match='out of date: model-index-classification.yml;'):
        make_metafile.main(['--check'])


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
