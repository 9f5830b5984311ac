"""mmsoft installed the way users install packages.

The wheel and the sdist carry the configs, the tools and the model index in
``mmsoft/.mim/``; an editable install links them. The wheel, installed (not
editable) in a fresh virtual environment that reuses this environment's
packages, works from a project folder outside the checkout: mmpretrain's
model listing, user configs with ``mmsoft::`` bases, ``mim train|test|run
mmsoft ...`` on the digits, and mmdet's own ``tools/train.py`` on a
digit-scene RetinaNet config. Every run is a few iterations on a few images.
"""
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
METAFILE = yaml.safe_load((REPO / 'configs' / 'metafile.yml').read_text())
CLASSIFIERS = sorted(m['Name'] for m in METAFILE['Models']
                     if any(r['Task'] == 'Image Classification' for r in m['Results']))
MIM_FILES = ('model-index.yml', 'model-index-classification.yml')


# A user's configs; the dense ones start from the digits classifier that
# `mim train` writes.
USER_CONFIGS = {
    # mmengine builds each typed dict a `pkg::` base defines in that package's
    # scope; the classifier recipe defines its model itself, so the user
    # config names mmpretrain's.
    'classifier.py': """
        _base_ = ['mmsoft::_base_/soft_imagenet_recipe.py']
        model = dict(_scope_='mmpretrain', backbone=dict(arch='tiny-norm'))
    """,
    'retinanet.py': """
        _base_ = ['mmsoft::_base_/retinanet_softnorm_fpn_1x_coco.py']
        model = dict(
            backbone=dict(arch='tiny-norm', init_cfg=dict(checkpoint='work_dirs/digits/epoch_1.pth')),
            neck=dict(in_channels={{_base_.soft_channels.tiny}}))
    """,
    'mask_rcnn.py': """
        _base_ = ['mmsoft::_base_/mask-rcnn_softnorm_fpn_1x_coco.py']
        model = dict(
            backbone=dict(arch='tiny-norm', init_cfg=dict(checkpoint='work_dirs/digits/epoch_1.pth')),
            neck=dict(in_channels={{_base_.soft_channels.tiny}}))
    """,
    'upernet.py': """
        _base_ = ['mmsoft::_base_/upernet_softnorm_512x512_160k_ade20k.py']
        model = dict(
            backbone=dict(arch='tiny-norm', init_cfg=dict(checkpoint='work_dirs/digits/epoch_1.pth')),
            decode_head=dict(in_channels={{_base_.soft_channels.tiny}}),
            auxiliary_head=dict(in_channels={{_base_.soft_channels_s16.tiny}}))
    """,
}


def get_started_example() -> str:
    """The config of the worked example in docs/en/get_started.md."""
    text = (REPO / 'docs' / 'en' / 'get_started.md').read_text()
    blocks = re.findall(r'```python\n(.*?)```', text, re.S)
    return next(b for b in blocks if b.startswith("_base_ = ['mmsoft::"))


def checkout_files() -> list:
    """The checkout's files as git sees them (tracked or new, not ignored)."""
    listed = subprocess.run(
        ['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
        cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted(p for p in listed.split('\0') if p and (REPO / p).is_file())


def expected_mim_files() -> set:
    return {p for p in checkout_files()
            if p.startswith(('configs/', 'tools/')) or p in MIM_FILES}


def run(cmd, cwd: Path, timeout: int = 600) -> str:
    """Run ``cmd`` without the checkout on the path; its output, or a failure
    that shows it."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, timeout=timeout,
                            capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f'{cmd} failed:\n{output[-4000:]}'
    return output


@pytest.fixture(scope='module')
def built(tmp_path_factory) -> Path:
    """A copy of the checkout (the build writes into its source folder), and
    the wheel and the sdist built from it in ``dist/``."""
    root = tmp_path_factory.mktemp('package')
    source = root / 'source'
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
        (source / name).chmod((REPO / name).stat().st_mode)
    run([sys.executable, '-m', 'pip', 'wheel', source, '--no-deps',
         '--no-build-isolation', '--wheel-dir', root / 'dist'], cwd=root)
    run([sys.executable, 'setup.py', '-q', 'sdist', '--dist-dir', root / 'dist'],
        cwd=source)
    return root


def make_venv(path: Path) -> Path:
    """A virtual environment that sees this environment's packages (torch and
    the OpenMMLab stack are not installed again); its python."""
    run([sys.executable, '-m', 'venv', '--system-site-packages', '--without-pip',
         path], cwd=path.parent)
    python = path / 'bin' / 'python'
    if sys.prefix != sys.base_prefix:  # this environment is a venv itself
        site = run([python, '-c', 'import site; print(site.getsitepackages()[0])'],
                   cwd=path).strip()
        (Path(site) / 'outer_environment.pth').write_text(
            '\n'.join(p for p in sys.path if p.endswith('site-packages')) + '\n')
    return python


def pip_install(python: Path, *args) -> None:
    run([sys.executable, '-m', 'pip', '--python', python, 'install', '--no-deps',
         '--no-build-isolation', '--ignore-installed', *args], cwd=python.parent)


@pytest.fixture(scope='module')
def python(built) -> Path:
    """The python of a fresh environment with the wheel installed."""
    python = make_venv(built / 'venv')
    pip_install(python, next((built / 'dist').glob('mmsoft-*.whl')))
    return python


@pytest.fixture(scope='module')
def project(built, python) -> Path:
    """A user's project folder outside the checkout: the digits and the digit
    scenes prepared by the installed tools (``mim run``), and configs with
    ``mmsoft::`` bases in ``my_configs/``."""
    project = built / 'my_project'
    project.mkdir()
    run([python, '-m', 'mim', 'run', 'mmsoft', 'prepare_digits', 'data/digits'],
        cwd=project)
    run([python, '-m', 'mim', 'run', 'mmsoft', 'prepare_digit_scenes',
         'data/digit_scenes', '--num-train', '4', '--num-val', '2'], cwd=project)
    (project / 'my_configs').mkdir()
    for name, text in USER_CONFIGS.items():
        (project / 'my_configs' / name).write_text(textwrap.dedent(text))
    (project / 'my_configs' / 'get_started_example.py').write_text(get_started_example())
    return project


@pytest.fixture(scope='module')
def digits_checkpoint(python, project) -> Path:
    """``mim train mmsoft softnorm_tiny_digits.py``: one epoch of 64 scans."""
    output = run([python, '-m', 'mim', 'train', 'mmsoft', 'softnorm_tiny_digits.py',
                  '--work-dir', 'work_dirs/digits', '--cfg-options',
                  'train_dataloader.dataset.indices=64',
                  'val_dataloader.dataset.indices=32',
                  'train_cfg.max_epochs=1', 'train_cfg.val_interval=1'], cwd=project)
    packaged = f'mmsoft{os.sep}.mim{os.sep}tools{os.sep}train.py'
    assert packaged in output  # mim ran the installed package's tools/train.py
    checkpoint = project / 'work_dirs' / 'digits' / 'epoch_1.pth'
    assert checkpoint.is_file(), output[-3000:]
    return checkpoint


def test_wheel_and_sdist_carry_configs_tools_and_model_index(built):
    expected = expected_mim_files()
    assert {'configs/metafile.yml', 'tools/train.py', 'tools/dist_train.sh',
            'tools/analysis/get_flops.py', *MIM_FILES} <= expected

    wheel = zipfile.ZipFile(next((built / 'dist').glob('mmsoft-*.whl')))
    names = set(wheel.namelist())
    in_wheel = {n[len('mmsoft/.mim/'):] for n in names if n.startswith('mmsoft/.mim/')}
    assert in_wheel == expected
    assert not {n for n in names if n.startswith(('configs/', 'tools/'))}
    assert 'mmsoft/registry.py' in names

    sdist = tarfile.open(next((built / 'dist').glob('mmsoft-*.tar.gz')))
    top = sdist.getnames()[0].split('/')[0]
    prefix = f'{top}/mmsoft/.mim/'
    in_sdist = {n[len(prefix):] for n in sdist.getnames()
                if n.startswith(prefix) and sdist.getmember(n).isfile()}
    assert in_sdist == expected
    # The build wrote nothing into the copied checkout's package.
    assert not (built / 'source' / 'mmsoft' / '.mim').exists()


def test_mim_train_then_test_on_the_digits(python, project, digits_checkpoint):
    output = run([python, '-m', 'mim', 'test', 'mmsoft', 'softnorm_tiny_digits.py',
                  '--checkpoint', digits_checkpoint, '--work-dir', 'work_dirs/test',
                  '--cfg-options', 'test_dataloader.dataset.indices=32'], cwd=project)
    assert 'accuracy/top1' in output


# Run in the fresh environment, from the project folder.
CHECKS = """
    import json, sys
    from pathlib import Path
    import torch
    import mmpretrain
    import mmsoft
    from mmengine.config import Config
    from mmengine.registry import MODELS, DefaultScope

    report = dict(package=mmsoft.__file__, listed=mmpretrain.list_models('*soft*'))

    name = 'softnorm_tiny_imagenet'
    state = mmpretrain.get_model(name).state_dict()
    state['head.fc.weight'].normal_()
    torch.save(dict(state_dict=state), 'softnorm_tiny.pth')
    model = mmpretrain.get_model(name, pretrained='softnorm_tiny.pth')
    report['get_model'] = [type(model).__name__, torch.equal(
        model.state_dict()['head.fc.weight'], state['head.fc.weight'])]

    digits = torch.load(sys.argv[1], map_location='cpu', weights_only=False)['state_dict']
    key = 'stages.0.blocks.0.attn.q.weight'
    report['built'] = {}
    for path in sorted(Path('my_configs').glob('*.py')):
        cfg = Config.fromfile(path)
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            model = MODELS.build(cfg.model)
        loaded = None
        if cfg.model.backbone.get('init_cfg', {}).get('checkpoint') == sys.argv[1]:
            model.init_weights()
            loaded = torch.equal(model.backbone.state_dict()[key],
                                 digits['backbone.' + key])
        report['built'][path.stem] = [type(model).__name__, cfg.default_scope, loaded]
    print('report:', json.dumps(report))
"""


def test_listing_and_mmsoft_base_configs_outside_the_checkout(python, project,
                                                             digits_checkpoint):
    output = run([python, '-c', textwrap.dedent(CHECKS), 'work_dirs/digits/epoch_1.pth'],
                 cwd=project)
    report = json.loads(output.split('report: ', 1)[1].splitlines()[0])

    site = python.parent.parent
    assert Path(report['package']).is_relative_to(site)  # the wheel, not the checkout
    assert report['listed'] == CLASSIFIERS
    assert report['get_model'] == ['ImageClassifier', True]
    assert report['built'] == {
        'classifier': ['ImageClassifier', 'mmpretrain', None],
        'get_started_example': ['RetinaNet', 'mmdet', None],
        'mask_rcnn': ['MaskRCNN', 'mmdet', True],
        'retinanet': ['RetinaNet', 'mmdet', True],
        'upernet': ['EncoderDecoder', 'mmseg', True],
    }


def test_mim_run_get_flops_prints_the_table(python, project):
    output = run([python, '-m', 'mim', 'run', 'mmsoft', 'get_flops',
                  'my_configs/classifier.py', '--shape', '64', '64'], cwd=project)
    assert 'Input shape: 1 x 3 x 64 x 64' in output
    assert '| part' in output and 'FLOPs w/o Newton (G)' in output


def test_mmdet_train_trains_a_digit_scene_retinanet(python, project, digits_checkpoint):
    paths = run([python, '-c', 'import mmdet, mmsoft, os; print(os.path.dirname('
                 'mmdet.__file__)); print(os.path.dirname(mmsoft.__file__))'],
                cwd=project).split()
    mmdet_train = Path(paths[-2]) / '.mim' / 'tools' / 'train.py'
    config = Path(paths[-1]) / '.mim' / 'configs' / 'retinanet_softnorm-tiny_fpn_6e_digit-scenes.py'
    output = run([python, mmdet_train, config, '--work-dir', 'work_dirs/retinanet',
                  '--cfg-options', f'model.backbone.init_cfg.checkpoint={digits_checkpoint}',
                  'train_dataloader.batch_size=2', 'train_cfg.max_epochs=1'], cwd=project)
    assert 'loss_cls' in output
    assert (project / 'work_dirs' / 'retinanet' / 'epoch_1.pth').is_file()


def test_editable_install_links_instead_of_copying(built):
    source = built / 'editable'
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    pip_install(make_venv(built / 'editable_venv'), '--editable', source)
    mim = source / 'mmsoft' / '.mim'
    for name in ('configs', 'tools', *MIM_FILES):
        assert (mim / name).is_symlink() and (mim / name).resolve() == source / name
