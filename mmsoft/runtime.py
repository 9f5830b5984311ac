"""mmsoft's runtime: the process-wide changes a training or test process takes.

``import mmsoft`` registers names and changes nothing else. A process that
trains or evaluates with mmengine needs more than names, and this module is
the one place that says what and why. Importing it applies every change (so
``custom_imports=dict(imports=['mmsoft', 'mmsoft.runtime'])`` in a config
works with any toolbox's entry points); ``tools/train.py`` and
``tools/test.py`` import it. ``MMSOFT_DISABLE_RUNTIME``, a comma-separated
list of the names below or ``all``, switches changes off before the import:

=============================  ===============================================
name                           what it changes
=============================  ===============================================
``torch_safe_globals``         :func:`allow_mmengine_checkpoints_in_torch_load`
``checkpoint_loader``          :func:`load_local_checkpoints_safely`
``atomic_checkpoint_writes``   :func:`write_local_files_atomically`
``cpu_amp``                    :func:`name_cpu_amp_in_root_registry`
``compile_constructor``        :func:`name_compile_constructor_in_root_registry`
=============================  ===============================================

None of them replaces what someone else registered: a change whose slot is
taken is skipped, the skip is logged, and :func:`runtime_status` says so.
"""
import os
from typing import Callable, Dict, List

import torch
from mmengine.fileio.backends import LocalBackend
from mmengine.fileio.backends import registry_utils as _backends
from mmengine.logging import print_log
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as ROOT_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as ROOT_OPTIM_WRAPPERS
from mmengine.runner.checkpoint import CheckpointLoader, load_from_local

import mmsoft  # noqa: F401  (the names come first)

from .engine import CompilableOptimWrapperConstructor, CPUAmpOptimWrapper
from .engine.atomic_local_backend import AtomicLocalBackend
from .utils.safe_checkpoint import load_local_checkpoint, safe_globals

ENV_VAR = 'MMSOFT_DISABLE_RUNTIME'
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

    Without it: mmengine's own loader (``torch.load`` with torch's default)
    for ``load_from`` and resuming; the SOFT backbone's ``init_cfg`` loading
    reads local paths through mmsoft's loader either way. Skipped when
    something other than mmengine's loader holds the scheme.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
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
    taken = [backend for backend in (_backends.backends.get('local'),
                                     _backends.prefix_to_backends.get(''))
             if backend not in (None, LocalBackend, AtomicLocalBackend)]
    if taken:
        return f'skipped: the local file backend is taken by {taken[0]!r}'
    _backends.register_backend('local', AtomicLocalBackend, force=True,
                               prefixes='')
    return 'applied'


def _name_in_root(root, name: str, cls: type) -> str:
    held = root.module_dict.get(name)
    if held is not None and held is not cls:
        return (f"skipped: the root registry holds another {name}; write "
                f"'mmsoft.{name}'")
    if held is None:
        root.register_module(name=name, module=cls)
    return 'applied'


def name_cpu_amp_in_root_registry() -> str:
    """Register ``CPUAmpOptimWrapper`` in mmengine's root ``OPTIM_WRAPPERS``.

    Why: ``--amp`` on a CPU machine trains under bfloat16 autocast through
    :class:`mmsoft.engine.CPUAmpOptimWrapper` (mmengine's ``AmpOptimWrapper``
    runs on accelerators only), and configs of every toolbox name it
    ``type='CPUAmpOptimWrapper'`` under their own scope.

    Without it: write ``type='mmsoft.CPUAmpOptimWrapper'``.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
    return _name_in_root(ROOT_OPTIM_WRAPPERS, 'CPUAmpOptimWrapper', CPUAmpOptimWrapper)


def name_compile_constructor_in_root_registry() -> str:
    """Register ``CompilableOptimWrapperConstructor`` in mmengine's root
    ``OPTIM_WRAPPER_CONSTRUCTORS``.

    Why: mmengine's ``compile=True`` compiles the whole ``train_step``, and
    dynamo stops on the ``ConfigDict`` parameter groups of mmengine's default
    constructor; ``tools/train.py`` selects this constructor (plain-dict
    groups) for configs that set ``compile`` and name no constructor.

    Without it: write
    ``constructor='mmsoft.CompilableOptimWrapperConstructor'``.

    Returns:
        str: ``'applied'``, or why it was skipped.
    """
    return _name_in_root(ROOT_CONSTRUCTORS, 'CompilableOptimWrapperConstructor',
                         CompilableOptimWrapperConstructor)


CHANGES: Dict[str, Callable[[], str]] = {
    'torch_safe_globals': allow_mmengine_checkpoints_in_torch_load,
    'checkpoint_loader': load_local_checkpoints_safely,
    'atomic_checkpoint_writes': write_local_files_atomically,
    'cpu_amp': name_cpu_amp_in_root_registry,
    'compile_constructor': name_compile_constructor_in_root_registry,
}
"""Every change of the runtime, by name; each function's docstring says what
it changes and why."""


def disabled_changes() -> List[str]:
    """The names ``MMSOFT_DISABLE_RUNTIME`` switches off.

    Raises:
        ValueError: The variable names an unknown change.
    """
    names = [n.strip() for n in os.environ.get(ENV_VAR, '').split(',') if n.strip()]
    if 'all' in names:
        return list(CHANGES)
    unknown = sorted(set(names) - set(CHANGES))
    if unknown:
        raise ValueError(f'{ENV_VAR} names unknown changes {unknown}; use any of '
                         f'{list(CHANGES)} or all, comma-separated.')
    return names


def apply_runtime() -> Dict[str, str]:
    """Apply every change not switched off by ``MMSOFT_DISABLE_RUNTIME``.

    Runs when this module is imported; calling it again changes nothing.

    Returns:
        dict[str, str]: Change name to status, as :func:`runtime_status`.
    """
    disabled = disabled_changes()
    for name, change in CHANGES.items():
        _STATUS[name] = f'off ({ENV_VAR})' if name in disabled else change()
        if _STATUS[name].startswith('skipped'):
            print_log(f'mmsoft runtime {name}: {_STATUS[name]}', logger='current')
    return runtime_status()


def runtime_status() -> Dict[str, str]:
    """What each change did here: ``'applied'``, ``'off (...)'`` or why skipped.

    Examples:
        >>> import mmsoft.runtime
        >>> from mmsoft.runtime import runtime_status
        >>> runtime_status()['atomic_checkpoint_writes']
        'applied'
    """
    return dict(_STATUS)


apply_runtime()

__all__ = ['CHANGES', 'ENV_VAR', 'apply_runtime', 'runtime_status', 'disabled_changes']
