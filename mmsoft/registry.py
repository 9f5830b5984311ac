"""The registries of mmsoft, and how they join the OpenMMLab registry tree.

mmsoft's ``MODELS`` and ``OPTIM_WRAPPERS`` registries are children of
mmengine's root registries with the scope ``'mmsoft'``, so
``type='mmsoft.SOFT'`` resolves from every toolbox. The few classes that
configs of other toolboxes name without a scope (``type='SOFT'``) are also
registered in the root registries, by
:func:`mmsoft.process_patches.register_in_root_registry`, which says why for
each.
"""
from typing import Any

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import DefaultScope, Registry

MODELS = Registry(
    'model', parent=MMENGINE_MODELS, scope='mmsoft',
    locations=['mmsoft.models'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmsoft',
    locations=['mmsoft.engine'])


def register_model(cls: type) -> type:
    """Register a model class in mmsoft's registry.

    Args:
        cls (type): The ``nn.Module`` subclass to register.

    Returns:
        type: ``cls`` unchanged, so this works as a class decorator.
    """
    MODELS.register_module(module=cls)
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

