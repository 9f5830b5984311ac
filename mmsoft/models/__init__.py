"""SOFT models: attention modules and backbones, registered on import."""
from .attention import *  # noqa: F401,F403
from .attention import token_mixer_names
from .backbones import *  # noqa: F401,F403


def root_model_names() -> list:
    """The names ``import mmsoft`` gives mmengine's root ``MODELS``
    (:func:`mmsoft.registry.register_in_root_registry`): ``SOFT`` and every
    registered token mixer."""
    return ['SOFT'] + token_mixer_names()
