"""Packaging for mmsoft, the SOFT plugin for OpenMMLab.

As the OpenMMLab toolboxes do, the package carries its configs, tools and
model index in ``mmsoft/.mim/``, where mmengine (``mmsoft::`` base configs),
``mim train|test|run mmsoft ...`` and mmsoft's model listing find them once
mmsoft is installed: a wheel or an sdist holds copies, an editable install
(``pip install -e .``) links ``mmsoft/.mim/<name>`` to the checkout's own.
"""
import os
import os.path as osp
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop
from setuptools.command.sdist import sdist

HERE = osp.dirname(osp.abspath(__file__))
# What goes into mmsoft/.mim/, relative to the repository root.
MIM_ITEMS = ('configs', 'tools', 'model-index.yml', 'model-index-classification.yml')
MIM_DIR = osp.join('mmsoft', '.mim')
# Left out of the copies: caches and what tools write into their own folders.
MIM_IGNORE = shutil.ignore_patterns('__pycache__', '*.py[cod]')


def read_requirements(name: str) -> list:
    """Requirement lines of ``requirements/<name>.txt``, comments dropped."""
    with open(osp.join(HERE, 'requirements', f'{name}.txt')) as f:
        lines = (line.split('#')[0].strip() for line in f)
        return [line for line in lines if line]


def read_version() -> str:
    """``__version__`` from ``mmsoft/version.py`` without importing mmsoft."""
    scope: dict = {}
    with open(osp.join(HERE, 'mmsoft', 'version.py')) as f:
        exec(compile(f.read(), 'version.py', 'exec'), scope)
    return scope['__version__']


def mim_source() -> str:
    """The folder that holds :data:`MIM_ITEMS`: the repository root, or the
    ``mmsoft/.mim`` of an unpacked sdist (which has no top-level copies)."""
    if osp.isdir(osp.join(HERE, 'configs')):
        return HERE
    return osp.join(HERE, MIM_DIR)


def copy_mim_items(target: str) -> None:
    """Copy :data:`MIM_ITEMS` into ``target`` (a ``.mim`` folder), replacing it."""
    source = mim_source()
    if osp.realpath(source) == osp.realpath(target):
        return
    _remove(target)
    os.makedirs(target)
    for name in MIM_ITEMS:
        src = osp.join(source, name)
        if osp.isdir(src):
            shutil.copytree(src, osp.join(target, name), ignore=MIM_IGNORE)
        else:
            shutil.copy2(src, osp.join(target, name))


def link_mim_items() -> None:
    """Link ``mmsoft/.mim/<name>`` to the checkout's ``<name>`` (relative links)."""
    target = osp.join(HERE, MIM_DIR)
    os.makedirs(target, exist_ok=True)
    for name in MIM_ITEMS:
        link = osp.join(target, name)
        _remove(link)
        os.symlink(osp.relpath(osp.join(HERE, name), target), link)


def _remove(path: str) -> None:
    if osp.islink(path) or osp.isfile(path):
        os.remove(path)
    elif osp.isdir(path):
        shutil.rmtree(path)


class BuildPyWithMim(build_py):
    """``build_py`` that also copies the ``.mim`` items into the build, so a
    wheel carries them and the source tree stays as it is."""

    def run(self):
        super().run()
        copy_mim_items(osp.join(self.build_lib, MIM_DIR))


class SdistWithMim(sdist):
    """``sdist`` whose archive holds the ``.mim`` items in ``mmsoft/.mim/``."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        copy_mim_items(osp.join(base_dir, MIM_DIR))


class DevelopWithMim(develop):
    """Legacy editable install (``setup.py develop``): link the ``.mim`` items."""

    def run(self):
        link_mim_items()
        super().run()


CMDCLASS = {'build_py': BuildPyWithMim, 'sdist': SdistWithMim,
            'develop': DevelopWithMim}
try:  # PEP 660 editable installs (setuptools >= 64)
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheelWithMim(editable_wheel):
        """``pip install -e .``: link the ``.mim`` items."""

        def run(self):
            link_mim_items()
            super().run()

    CMDCLASS['editable_wheel'] = EditableWheelWithMim
except ImportError:
    pass


setup(
    name='mmsoft',
    version=read_version(),
    description='SOFT (softmax-free transformers) backbones for OpenMMLab',
    long_description=open(osp.join(HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    python_requires='>=3.8',
    packages=find_packages(exclude=('configs', 'configs.*', 'tools', 'tools.*',
                                    'tests', 'tests.*')),
    install_requires=read_requirements('runtime'),
    extras_require={
        'mim': read_requirements('mminstall'),
        'dense': read_requirements('dense'),
        'tests': read_requirements('tests'),
        'all': read_requirements('dense') + read_requirements('tests'),
    },
    cmdclass=CMDCLASS,
    zip_safe=False,
)
