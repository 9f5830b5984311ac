"""The registries of mmsoft, and the few names it also gives mmengine's root.

mmsoft's ``MODELS``, ``OPTIM_WRAPPERS`` and ``OPTIM_WRAPPER_CONSTRUCTORS``
registries are children of mmengine's root registries with the scope
``'mmsoft'``, so ``type='mmsoft.SOFT'`` resolves from every toolbox.

Configs of mmpretrain, mmdet and mmseg build under their own default scope
and name the backbone ``type='SOFT'``; a registry searches its ancestors for
names without a scope, so ``import mmsoft`` also registers, in mmengine's
root ``MODELS`` (:func:`register_in_root_registry`):

- ``SOFT``, the backbone, for those configs;
- every token mixer (each subclass of
  :class:`mmsoft.models.attention.TokenMixer`: ``SOFTAttention`` and the
  peers it is compared with), which those toolboxes' configs and layers name
  without a scope to swap attentions in their own models.

Nothing else of mmsoft goes there, and a name the root already holds is left
as it is (use ``'mmsoft.<name>'``).

``import mmsoft`` also lists mmsoft's classifiers in mmpretrain's model
listing (:func:`register_model_index`), so ``mmpretrain.list_models('*soft*')``
finds the classification configs of ``model-index.yml`` and
``mmpretrain.get_model(name, pretrained=PATH)`` builds one. The detection and
segmentation entries of that index are not mmpretrain models and stay out.
And it names the ``mmsoft`` package in mmengine's table of packages whose
configs a config may inherit (:func:`register_config_package`), so
``_base_ = ['mmsoft::_base_/retinanet_softnorm_fpn_1x_coco.py']`` reads the
installed package's configs.

Everything that changes a process beyond names is :mod:`mmsoft.runtime`,
which a process opts into.
"""
from pathlib import Path
from typing import Any, List, Optional, Sequence

from mmengine.config.utils import MODULE2PACKAGE
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import DefaultScope, Registry

MODELS = Registry(
    'model', parent=MMENGINE_MODELS, scope='mmsoft',
    locations=['mmsoft.models'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmsoft',
    locations=['mmsoft.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor', parent=MMENGINE_CONSTRUCTORS, scope='mmsoft',
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


def register_in_root_registry(names: Sequence[str]) -> List[str]:
    """Register mmsoft's classes ``names`` in mmengine's root ``MODELS``.

    Called by ``import mmsoft`` with :func:`mmsoft.models.root_model_names`
    (``SOFT`` and every token mixer); a name the root already holds for
    another class is left as it is.

    Args:
        names (Sequence[str]): Names registered in mmsoft's ``MODELS``.

    Returns:
        list[str]: The names left out because the root holds them.
    """
    taken = []
    for name in names:
        cls = MODELS.get(name)
        held = MMENGINE_MODELS.module_dict.get(name)
        if held is None:
            MMENGINE_MODELS.register_module(name=name, module=cls)
        elif held is not cls:
            taken.append(name)
    return taken


# The task of the model-index entries that go into mmpretrain's listing.
CLASSIFICATION = 'Image Classification'
# Those entries, beside model-index.yml (tools/analysis/make_metafile.py
# writes both): mmpretrain's ``ModelHub.register_model_index`` takes a whole
# index, so the classifiers have one of their own.
CLASSIFIER_INDEX = 'model-index-classification.yml'


def register_config_package() -> None:
    """Name ``mmsoft`` in mmengine's table of packages with configs.

    Called by ``import mmsoft``. mmengine reads a base config
    ``'mmsoft::<folder>/<file>'`` from the installed package's
    ``mmsoft/.mim/configs/`` only for the packages this table names (mmengine
    0.10.7 names the OpenMMLab toolboxes). An entry the table already holds
    is left as it is.
    """
    MODULE2PACKAGE.setdefault('mmsoft', 'mmsoft')


def find_model_index(package_dir: Optional[Path] = None) -> Optional[Path]:
    """Where mmsoft's ``model-index.yml`` is, whatever the current directory.

    OpenMMLab packages ship their configs and index in ``<package>/.mim/``
    (a wheel holds copies there, an editable install links them to the
    checkout); a source checkout run without installing has them in the
    repository next to the package. ``.mim`` is looked at first.

    Args:
        package_dir (Path, optional): The ``mmsoft`` package folder. Defaults
            to the one this module is in.

    Returns:
        Path | None: The index with links resolved (the checkout's own file
        for an editable install), or None where neither place has one (a
        package installed without its configs).
    """
    package_dir = Path(package_dir or Path(__file__).resolve().parent)
    for root in (package_dir / '.mim', package_dir.parent):
        index = root / 'model-index.yml'
        if index.is_file() and (root / 'configs' / 'metafile.yml').is_file():
            return index.resolve()
    return None


def register_model_index(index: Optional[Path] = None) -> List[str]:
    """List mmsoft's classifiers in mmpretrain's model listing.

    Called by ``import mmsoft``. The classification index beside ``index``
    (:data:`CLASSIFIER_INDEX`) goes to mmpretrain's
    ``ModelHub.register_model_index``, with the configs in the ``configs/``
    folder beside it. A config is read only when ``get_model`` asks for it,
    and reading it imports its ``custom_imports`` (:mod:`mmsoft.runtime`
    among them). Registering again is harmless. Where mmpretrain already
    lists one of the names for another config (another package's), nothing
    is added.

    Args:
        index (Path, optional): mmsoft's ``model-index.yml``. Defaults to
            :func:`find_model_index`.

    Returns:
        list[str]: The names mmpretrain lists for another config; mmsoft's
        classifiers were not added when there are any.

    Examples:
        >>> import mmpretrain
        >>> import mmsoft
        >>> mmpretrain.list_models('softnorm_tiny')
        ['softnorm_tiny_imagenet']
        >>> register_model_index()  # again: nothing new, nothing taken
        []
    """
    index = index or find_model_index()
    if index is None:
        return []
    root = Path(index).parent
    classifiers = root / CLASSIFIER_INDEX
    try:
        # Imported here: mmpretrain may be missing, and then nothing is listed.
        from mmpretrain.apis.model import ModelHub
        from modelindex.load_model_index import load
    except ImportError:
        return []
    if not classifiers.is_file():
        return []
    ours = {model.name.lower(): str(root / model.config)
            for model in load(str(classifiers)).models}
    listed = [name for name in ours if ModelHub.has(name)]
    if not listed:
        ModelHub.register_model_index(classifiers, config_prefix=root)
        return []
    # Listed by an earlier call, or by another package: the entry's config
    # tells (read only; ModelHub.get would parse the config and import its
    # custom_imports).
    return [name for name in listed
            if ModelHub._models_dict[name].config != ours[name]]
