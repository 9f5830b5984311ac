"""Every change ``import mmsoft`` makes outside mmsoft's own names.

mmsoft's classes live in its own registries (scope ``'mmsoft'``). Four
things reach further, because users need them, and all of them are here:

=============================  ===============================================
name                           what it changes
=============================  ===============================================
``torch_safe_globals``         :func:`allow_mmengine_checkpoints_in_torch_load`
``checkpoint_loader``          :func:`load_local_checkpoints_safely`
``atomic_checkpoint_writes``   :func:`write_local_files_atomically`
``root_registry``              :func:`register_in_root_registry`
=============================  ===============================================

:func:`apply_patches` runs them once, when ``mmsoft`` is imported. Switch any
of them off before the import with the environment variable
``MMSOFT_DISABLE_PATCHES``, a comma-separated list of the names above or
``all``::

    MMSOFT_DISABLE_PATCHES=atomic_checkpoint_writes,root_registry \\
        python tools/train.py configs/soft_tiny_imagenet.py

None of them replaces something already registered by someone else: a patch
whose slot is taken is skipped, and :func:`patch_status` says so. Each patch
returns its status, and :func:`patch_status` reports them all.
"""
import os
from typing import Callable, Dict, List

import torch
from mmengine.fileio.backends import LocalBackend
from mmengine.fileio.backends import registry_utils as _backends
from mmengine.logging import print_log
from mmengine.registry import MODELS as ROOT_MODELS
from mmengine.registry import OPTIM_WRAPPERS as ROOT_OPTIM_WRAPPERS
from mmengine.runner.checkpoint import CheckpointLoader, load_from_local

ENV_VAR = 'MMSOFT_DISABLE_PATCHES'

# Names registered in mmengine's root registries, and why each must be found
# from other scopes. A registry searches its ancestors for names without a
# scope, so a name in the root resolves under default_scope='mmpretrain',
# 'mmdet' and 'mmseg' alike without importing those toolboxes.
_MIXER_REASON = ("a token mixer: other toolboxes' layers and configs name it "
                 'without a scope, to compare attentions in their own models')
ROOT_MODEL_NAMES: Dict[str, str] = {
    'SOFT': "the backbone: mmpretrain, mmdet and mmseg configs name it "
            "type='SOFT' under their own default scope",
    'SOFTAttention': _MIXER_REASON,
    'SoftmaxAttention2d': _MIXER_REASON,
    'SpatialReductionAttention': _MIXER_REASON,
    'PerformerAttention': _MIXER_REASON,
    'NystromAttention': _MIXER_REASON,
}
ROOT_OPTIM_WRAPPER_NAMES: Dict[str, str] = {
    'CPUAmpOptimWrapper': "--amp on CPU: prepare_config and configs of every "
                          "toolbox name it type='CPUAmpOptimWrapper'",
}
# Everything else (the blocks, patch embeddings and so on) is found as
# 'mmsoft.<name>' or built inside SOFT in mmsoft's scope.

_STATUS: Dict[str, str] = {}


def allow_mmengine_checkpoints_in_torch_load() -> str:
    """Add the globals of mmengine checkpoints to torch's weights-only allow-list.

    What: ``torch.serialization.add_safe_globals`` with
    :func:`mmsoft.utils.safe_checkpoint.safe_globals` (mmengine's
    ``HistoryBuffer``, numpy arrays, and a ``getattr`` restricted to
    HistoryBuffer's statistics methods).

    Why: torch >= 2.6 loads weights-only by default and mmengine 0.10 calls
    ``torch.load`` without ``weights_only``, so any ``torch.load`` of an
    mmengine checkpoint (yours, mmengine's remote loaders) fails. Adding to
    the list never allows code: pickled callables are still refused.

    Without it: mmsoft's own loads still work (they pass the list per call);
    plain ``torch.load`` of a checkpoint with a message hub fails.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
    if not hasattr(torch.serialization, 'add_safe_globals'):
        return 'skipped: torch < 2.4 has no weights-only allow-list'
    from .utils.safe_checkpoint import safe_globals
    torch.serialization.add_safe_globals(safe_globals())
    return 'applied'


def load_local_checkpoints_safely() -> str:
    """Load local checkpoints in mmengine through mmsoft's weights-only loader.

    What: registers :func:`mmsoft.utils.safe_checkpoint.load_local_checkpoint`
    as mmengine's ``CheckpointLoader`` scheme for plain paths (the empty
    prefix), in place of mmengine's ``load_from_local``.

    Why: resuming, ``load_from`` and ``init_cfg=dict(type='Pretrained')``
    then load weights-only with mmengine's allow-list under every torch
    version, and a refused, truncated or foreign file is an error that names
    the file and says what to do.

    Without it: mmengine's own loader (``torch.load`` with torch's default).
    Skipped when something other than mmengine's loader holds the scheme.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
    from .utils.safe_checkpoint import load_local_checkpoint
    current = CheckpointLoader._schemes.get('')
    if current is load_local_checkpoint:
        return 'applied'
    if current is not None and current is not load_from_local:
        return f'skipped: the local scheme is taken by {current!r}'
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_local_checkpoint, force=True)
    return 'applied'


def write_local_files_atomically() -> str:
    """Make mmengine's ``'local'`` file backend write through a temporary file.

    What: registers :class:`mmsoft.engine.AtomicLocalBackend` as the
    ``'local'`` backend and for plain paths, in place of mmengine's
    ``LocalBackend``. Reading is unchanged.

    Why: every Runner saves checkpoints through this backend; a run killed
    while saving would otherwise leave a truncated ``epoch_N.pth`` (and a
    ``last_checkpoint`` pointing at it) that ``--resume`` then fails on.

    Without it: mmengine writes files in place.
    Skipped when a backend other than mmengine's is registered there.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
    from .engine.atomic_local_backend import AtomicLocalBackend
    taken = [backend for backend in (_backends.backends.get('local'),
                                     _backends.prefix_to_backends.get(''))
             if backend not in (None, LocalBackend, AtomicLocalBackend)]
    if taken:
        return f'skipped: the local file backend is taken by {taken[0]!r}'
    _backends.register_backend('local', AtomicLocalBackend, force=True,
                               prefixes='')
    return 'applied'


def register_in_root_registry() -> str:
    """Register a few of mmsoft's classes in mmengine's root registries too.

    What: the backbone ``SOFT`` and the token mixers (``SOFTAttention`` and
    its peers) go into mmengine's root ``MODELS``, ``CPUAmpOptimWrapper``
    into its root ``OPTIM_WRAPPERS`` (every class is in mmsoft's own
    registries anyway).

    Why: configs of mmpretrain, mmdet and mmseg build under their own default
    scope and name these ``type='SOFT'`` and so on; ``ROOT_MODEL_NAMES`` and
    ``ROOT_OPTIM_WRAPPER_NAMES`` give the reason for each. Nothing else
    (blocks, patch embeddings) goes there.

    Without it: write ``type='mmsoft.SOFT'`` (works from every scope).
    A name a root registry already holds is left as it is.

    Returns:
        str: ``'applied'``, or which names were skipped.
    """
    from .registry import MODELS, OPTIM_WRAPPERS
    skipped = []
    for names, own, root in ((ROOT_MODEL_NAMES, MODELS, ROOT_MODELS),
                             (ROOT_OPTIM_WRAPPER_NAMES, OPTIM_WRAPPERS,
                              ROOT_OPTIM_WRAPPERS)):
        for name in names:
            cls = own.get(name)
            held = root.module_dict.get(name)
            if held is not None and held is not cls:
                skipped.append(name)
            elif held is None:
                root.register_module(name=name, module=cls)
    if skipped:
        return (f'applied, except {skipped}: the root registry already holds '
                "them (use 'mmsoft.<name>')")
    return 'applied'


PATCHES: Dict[str, Callable[[], str]] = {
    'torch_safe_globals': allow_mmengine_checkpoints_in_torch_load,
    'checkpoint_loader': load_local_checkpoints_safely,
    'atomic_checkpoint_writes': write_local_files_atomically,
    'root_registry': register_in_root_registry,
}


def disabled_patches() -> List[str]:
    """The patch names ``MMSOFT_DISABLE_PATCHES`` switches off.

    Raises:
        ValueError: The variable names an unknown patch.
    """
    names = [n.strip() for n in os.environ.get(ENV_VAR, '').split(',') if n.strip()]
    if 'all' in names:
        return list(PATCHES)
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f'{ENV_VAR} names unknown patches {unknown}; use any of '
                         f'{list(PATCHES)} or all, comma-separated.')
    return names


def apply_patches() -> Dict[str, str]:
    """Apply every patch not switched off by ``MMSOFT_DISABLE_PATCHES``.

    Called by ``import mmsoft``; calling it again changes nothing.

    Returns:
        dict[str, str]: Patch name to status, as :func:`patch_status`.
    """
    disabled = disabled_patches()
    for name, patch in PATCHES.items():
        if name in disabled:
            _STATUS[name] = f'off ({ENV_VAR})'
        else:
            _STATUS[name] = patch()
        if _STATUS[name].startswith('skipped') or 'except' in _STATUS[name]:
            print_log(f'mmsoft patch {name}: {_STATUS[name]}', logger='current')
    return patch_status()


def patch_status() -> Dict[str, str]:
    """What each patch did here: ``'applied'``, ``'off (...)'`` or why skipped.

    Examples:
        >>> import mmsoft
        >>> from mmsoft.process_patches import patch_status
        >>> patch_status()['atomic_checkpoint_writes']
        'applied'
    """
    return dict(_STATUS)


__all__ = [
    'PATCHES', 'ROOT_MODEL_NAMES', 'ROOT_OPTIM_WRAPPER_NAMES', 'ENV_VAR',
    'apply_patches', 'patch_status', 'disabled_patches',
    'allow_mmengine_checkpoints_in_torch_load', 'load_local_checkpoints_safely',
    'write_local_files_atomically', 'register_in_root_registry'
]
