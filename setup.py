"""Packaging for mmsoft, the SOFT plugin for OpenMMLab."""
import os.path as osp

from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))


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


setup(
    name='mmsoft',
    version=read_version(),
    description='SOFT (softmax-free transformers) backbones for OpenMMLab',
    long_description=open(osp.join(HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    python_requires='>=3.8',
    packages=find_packages(exclude=('configs', 'tools', 'tests')),
    install_requires=read_requirements('runtime'),
    extras_require={
        'mim': read_requirements('mminstall'),
        'dense': read_requirements('dense'),
        'tests': read_requirements('tests'),
        'all': read_requirements('dense') + read_requirements('tests'),
    },
    zip_safe=False,
)
