"""mmsoft: SOFT (softmax-free transformer) backbones for OpenMMLab.

Importing the package registers names and does nothing else: mmsoft's
classes in its own registries (``type='mmsoft.SOFT'`` resolves from every
toolbox), the backbone and the token mixers in mmengine's root ``MODELS`` for
configs of other toolboxes (:mod:`mmsoft.registry` says why), mmsoft's
classifiers in mmpretrain's model listing, the ``mmsoft`` package in
mmengine's table of packages whose configs a config may inherit
(``mmsoft::`` base configs), and the ``mmsoft::`` operators of its numerics
in torch. It imports neither mmdet nor mmseg. The process-wide
changes a training or test process needs are :mod:`mmsoft.runtime`, imported
by ``tools/train.py`` and ``tools/test.py`` or named in a config's
``custom_imports``.
"""
from mmengine.logging import print_log

from . import engine, models  # noqa: F401  (registers the classes)
from .registry import (
    register_config_package,
    register_in_root_registry,
    register_model_index,
)
from .version import __version__, version_info

_taken = register_in_root_registry(models.root_model_names())
if _taken:
    print_log(f'mmsoft: the root registry already holds {_taken}; use '
              "'mmsoft.<name>' for them", logger='current')
_listed = register_model_index()
if _listed:
    print_log(f"mmsoft: mmpretrain's model listing already holds {_listed} for "
              "other configs; mmsoft's classifiers are not listed",
              logger='current')
register_config_package()

__all__ = ['__version__', 'version_info']
