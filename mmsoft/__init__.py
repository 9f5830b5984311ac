"""mmsoft: SOFT (softmax-free transformer) backbones for OpenMMLab.

Importing the package registers the SOFT models in mmengine's registry tree
(``type='SOFT'`` then resolves under the mmpretrain, mmdet and mmseg scopes,
``type='mmsoft.SOFT'`` everywhere) and lets torch's weights-only loader read
mmengine checkpoints. It imports neither mmdet nor mmseg.
"""
from .utils.safe_checkpoint import allow_mmengine_checkpoints
from .version import __version__, version_info

allow_mmengine_checkpoints()

from . import engine, models  # noqa: E402,F401  (registers the models)

__all__ = ['__version__', 'version_info']
