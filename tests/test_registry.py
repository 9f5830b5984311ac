"""mmpretrain's model listing knows mmsoft's classifiers after ``import mmsoft``:
``list_models`` finds the classification entries of ``model-index.yml``, from
any current directory, and ``get_model`` builds one and loads a checkpoint."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from mmengine.config import Config
from mmengine.registry import DefaultScope

import mmsoft  # noqa: F401
from mmsoft.registry import find_model_index, register_model_index

REPO = Path(__file__).resolve().parents[1]
METAFILE = yaml.safe_load((REPO / 'configs' / 'metafile.yml').read_text())
CLASSIFIERS = sorted(m['Name'] for m in METAFILE['Models']
                     if any(r['Task'] == 'Image Classification' for r in m['Results']))
DENSE = sorted(m['Name'] for m in METAFILE['Models'] if m['Name'] not in CLASSIFIERS)


def test_the_index_holds_classifiers_and_dense_models():
    assert len(CLASSIFIERS) == 10 and 'soft_tiny_imagenet' in CLASSIFIERS
    assert any(name.startswith('retinanet_') for name in DENSE)
    assert all(name.endswith(('_coco', '_ade20k')) for name in DENSE)


def test_list_models_finds_the_classifiers_from_any_directory(tmp_path):
    # mmsoft first: mmpretrain lists its own models at the first query, after
    # mmsoft's, and must find no name taken.
    code = textwrap.dedent("""
        import json
        import mmsoft
        import mmpretrain
        print(json.dumps([mmpretrain.list_models('*soft*'),
                          mmpretrain.list_models(task='Image Classification'),
                          mmpretrain.list_models()]))
    """)
    path = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get('PYTHONPATH')] if p])
    result = subprocess.run([sys.executable, '-c', code], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, 'PYTHONPATH': path})
    assert result.returncode == 0, result.stderr[-3000:]
    soft, classification, everything = json.loads(result.stdout.strip().splitlines()[-1])
    assert soft == CLASSIFIERS
    assert set(CLASSIFIERS) <= set(classification)
    assert not set(DENSE) & set(everything)


def test_get_model_builds_a_classifier_and_loads_a_local_checkpoint(tmp_path):
    import mmpretrain
    from mmpretrain.apis.model import ModelHub
    from mmpretrain.registry import MODELS

    name = 'soft_tiny_imagenet'
    config = ModelHub._models_dict[name].config
    assert Path(config) == REPO / 'configs' / f'{name}.py'
    # A checkpoint in mmpretrain's layout, from a model built from the config.
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        source = MODELS.build(Config.fromfile(config).model)
    state = source.state_dict()
    state['head.fc.weight'] = torch.randn_like(state['head.fc.weight'])
    state['backbone.stages.0.blocks.0.attn.q.weight'].normal_()
    classes = [f'class {i}' for i in range(1000)]
    torch.save(dict(state_dict=state, meta=dict(dataset_meta=dict(classes=classes))),
               tmp_path / 'soft_tiny.pth')

    model = mmpretrain.get_model(name, pretrained=str(tmp_path / 'soft_tiny.pth'))
    assert type(model).__name__ == 'ImageClassifier'
    assert type(model.backbone).__name__ == 'SOFT' and not model.training
    assert model.backbone.arch_settings == type(model.backbone).parse_arch('tiny')
    loaded = model.state_dict()
    for key in ('head.fc.weight', 'backbone.stages.0.blocks.0.attn.q.weight'):
        torch.testing.assert_close(loaded[key], state[key], rtol=0, atol=0)
    assert model._dataset_meta['classes'] == classes


def test_the_index_is_found_next_to_the_package_or_in_its_mim_folder(tmp_path):
    assert find_model_index() == REPO / 'model-index.yml'
    package = tmp_path / 'site-packages' / 'mmsoft'
    package.mkdir(parents=True)
    assert find_model_index(package) is None  # installed without configs
    (package.parent / 'model-index.yml').write_text('Import: []\n')
    assert find_model_index(package) is None  # another project's index
    for root in (package.parent, package / '.mim'):
        (root / 'configs').mkdir(parents=True, exist_ok=True)
        (root / 'configs' / 'metafile.yml').write_text('Models: []\n')
        (root / 'model-index.yml').write_text('Import: [configs/metafile.yml]\n')
    assert find_model_index(package) == package / '.mim' / 'model-index.yml'


def test_registering_again_changes_nothing_and_keeps_other_entries(monkeypatch):
    from mmpretrain.apis.model import ModelHub
    listed = dict(ModelHub._models_dict)
    assert register_model_index() == []
    assert ModelHub._models_dict == listed

    other = type(listed['soft_tiny_imagenet'])(name='soft_tiny_imagenet',
                                               config='/elsewhere/soft_tiny.py')
    monkeypatch.setitem(ModelHub._models_dict, 'soft_tiny_imagenet', other)
    assert register_model_index() == ['soft_tiny_imagenet']
    assert ModelHub._models_dict['soft_tiny_imagenet'] is other


def test_without_an_index_nothing_is_registered(monkeypatch):
    from mmpretrain.apis.model import ModelHub

    import mmsoft.registry
    monkeypatch.setattr(ModelHub, '_models_dict', {})
    monkeypatch.setattr(mmsoft.registry, 'find_model_index', lambda: None)
    assert register_model_index() == []
    assert ModelHub._models_dict == {}
    assert register_model_index(REPO / 'model-index.yml') == []
    assert sorted(ModelHub._models_dict) == CLASSIFIERS


@pytest.mark.parametrize('name', CLASSIFIERS)
def test_every_listed_config_exists(name):
    from mmpretrain.apis.model import ModelHub
    assert Path(ModelHub._models_dict[name].config).is_file()


def test_a_name_listed_for_another_package_keeps_the_classifiers_out(monkeypatch):
    from mmpretrain.apis.model import ModelHub
    other = type(ModelHub._models_dict['soft_tiny_imagenet'])(
        name='soft_tiny_imagenet', config='/elsewhere/soft_tiny.py')
    monkeypatch.setattr(ModelHub, '_models_dict', {'soft_tiny_imagenet': other})
    assert register_model_index() == ['soft_tiny_imagenet']
    assert ModelHub._models_dict == {'soft_tiny_imagenet': other}


def test_an_index_without_its_classification_index_lists_nothing(tmp_path, monkeypatch):
    from mmpretrain.apis.model import ModelHub
    monkeypatch.setattr(ModelHub, '_models_dict', {})
    (tmp_path / 'configs').mkdir()
    (tmp_path / 'configs' / 'metafile.yml').write_text(
        (REPO / 'configs' / 'metafile.yml').read_text())
    (tmp_path / 'model-index.yml').write_text('Import: [configs/metafile.yml]\n')
    assert register_model_index(tmp_path / 'model-index.yml') == []
    assert ModelHub._models_dict == {}


def test_mmsoft_configs_can_be_inherited_with_mmsoft_bases(monkeypatch):
    from mmengine.config.utils import MODULE2PACKAGE, _get_package_and_cfg_path

    from mmsoft.registry import register_config_package
    assert MODULE2PACKAGE['mmsoft'] == 'mmsoft'
    assert _get_package_and_cfg_path('mmsoft::_base_/soft_channels.py') == (
        'mmsoft', '_base_/soft_channels.py')
    monkeypatch.setitem(MODULE2PACKAGE, 'mmsoft', 'mmsoft-fork')
    register_config_package()  # an entry the table holds stays
    assert MODULE2PACKAGE['mmsoft'] == 'mmsoft-fork'
