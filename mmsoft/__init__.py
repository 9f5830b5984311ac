"""mmsoft: SOFT (softmax-free transformer) backbones for OpenMMLab.

Importing the package registers the SOFT models in mmengine's registry tree
and makes mmengine checkpoints loadable under torch's ``weights_only`` loader.
It imports neither mmdet nor mmseg.
"""
from .version import __version__, version_info

__all__ = ['__version__', 'version_info']
