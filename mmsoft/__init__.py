"""mmsoft: SOFT (softmax-free transformer) backbones for OpenMMLab.

Importing the package registers the SOFT models in mmsoft's registries
(``type='mmsoft.SOFT'`` resolves from every toolbox) and applies the
process-wide patches of :mod:`mmsoft.process_patches`: ``type='SOFT'`` in the
root registry, weights-only loading of mmengine checkpoints, atomic
checkpoint writes. ``MMSOFT_DISABLE_PATCHES`` switches each off. It imports
neither mmdet nor mmseg.
"""
from . import engine, models  # noqa: F401  (registers the classes)
from .process_patches import apply_patches
from .version import __version__, version_info

apply_patches()

__all__ = ['__version__', 'version_info']
