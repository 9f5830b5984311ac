"""The registries of mmsoft, and how they join the OpenMMLab registry tree.

mmsoft's own ``MODELS`` registry is a child of mmengine's root ``MODELS``
registry with the scope ``'mmsoft'``, so ``type='mmsoft.SOFT'`` resolves from
every toolbox. Each class is also registered in the root registry itself: a
registry searches its ancestors for names without a scope, so
``type='SOFT'`` then resolves under ``default_scope='mmpretrain'``, ``'mmdet'``
and ``'mmseg'`` alike, without importing any of those toolboxes.
"""
from typing import Any

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import DefaultScope, Registry

MODELS = Registry(
    'model', parent=MMENGINE_MODELS, scope='mmsoft',
    locations=['mmsoft.models'])


def register_model(cls: type) -> type:
    """Register a model class in mmsoft's registry and in mmengine's root.

    Args:
        cls (type): The ``nn.Module`` subclass to register.

    Returns:
        type: ``cls`` unchanged, so this works as a class decorator.
    """
    MODELS.register_module(module=cls)
    MMENGINE_MODELS.register_module(module=cls)
    return cls


def build_model(cfg: dict, **kwargs: Any) -> Any:
    """Build a model component from mmsoft's registry whatever the caller's scope.

    A plain ``MODELS.build`` under ``default_scope='mmdet'`` searches only
    mmdet's registry; nested builds in mmsoft go through this function so they
    find mmsoft's classes under every scope.

    Args:
        cfg (dict): Config with a ``type`` key.
        **kwargs: Extra keyword arguments passed to the constructor.

    Returns:
        The built object.
    """
    with DefaultScope.overwrite_default_scope('mmsoft'):
        return MODELS.build(cfg, default_args=kwargs or None)

