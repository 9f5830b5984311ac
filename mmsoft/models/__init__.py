"""SOFT models: attention modules and backbones, registered on import."""
from .attention import *  # noqa: F401,F403
from .backbones import *  # noqa: F401,F403
