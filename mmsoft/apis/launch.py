"""Adapt a config to the machine it runs on (GPU or CPU, AMP or not)."""
import gc
import itertools
import os
import os.path as osp
import signal
import sys
import threading
import time
from typing import Any, Optional

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS

from mmsoft.engine import CompilableOptimWrapperConstructor, CPUAmpOptimWrapper


def _replace_sync_bn(node: Any) -> int:
    """Turn every ``SyncBN`` norm config inside ``node`` into ``BN``."""
    count = 0
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
            count += 1
        for value in node.values():
            count += _replace_sync_bn(value)
    elif isinstance(node, (list, tuple)):
        count += sum(_replace_sync_bn(value) for value in node)
    return count


_RUNS_IN_PROCESS = itertools.count()


def _root_or_scoped(root, name: str, cls: type) -> str:
    """``name`` where mmengine's root registry holds ``cls`` under it (see
    :mod:`mmsoft.runtime`), else ``'mmsoft.<name>'``, which always resolves."""
    return name if root.module_dict.get(name) is cls else f'mmsoft.{name}'


def load_config(path: str, cfg_options: Optional[dict] = None,
                launcher: str = 'none', work_dir: Optional[str] = None) -> Config:
    """Read a config the way the entry points do.

    mmengine names a run's logger, message hub and visualizer
    ``<experiment_name>_<timestamp>`` to the second and reuses an instance
    of the same name, so a second run started in the same process and second
    would log into the first run's files and carry on its message hub. From
    the second call on in a process, a config without ``experiment_name``
    gets ``<config name>_run<k>``.

    Args:
        path (str): Config file.
        cfg_options (dict, optional): ``--cfg-options`` overrides.
            Defaults to None.
        launcher (str): Job launcher. Defaults to ``'none'``.
        work_dir (str, optional): Work dir; else the config's, else
            ``work_dirs/<config name>``. Defaults to None.

    Returns:
        Config: The config with ``launcher`` and ``work_dir`` set.
    """
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    cfg.launcher = launcher
    name = osp.splitext(osp.basename(path))[0]
    cfg.work_dir = work_dir or cfg.get('work_dir') or osp.join('work_dirs', name)
    run = next(_RUNS_IN_PROCESS)
    if run and not cfg.get('experiment_name'):
        cfg.experiment_name = f'{name}_run{run}'
    return cfg


def prepare_config(cfg: Config, amp: bool = False) -> Config:
    """Settings a run needs on this machine, applied to ``cfg`` in place.

    - ``amp``: mmengine's ``AmpOptimWrapper`` (float16, dynamic loss scale)
      on CUDA; :class:`mmsoft.engine.CPUAmpOptimWrapper` (bfloat16) on CPU.
    - ``compile`` set (mmengine compiles the whole ``train_step``, optimizer
      step included): :class:`mmsoft.engine.CompilableOptimWrapperConstructor`
      when the config names no optimizer constructor.
    - Without CUDA: gloo as the distributed backend, DDP without device
      ids, and BatchNorm in place of SyncBN (which needs GPUs).

    Args:
        cfg (Config): The loaded config, with ``launcher`` set.
        amp (bool): Train with mixed precision. Defaults to False.

    Returns:
        Config: ``cfg``.
    """
    on_gpu = torch.cuda.is_available()
    if cfg.get('compile') and 'constructor' not in cfg.get('optim_wrapper', {}):
        cfg.optim_wrapper.constructor = _root_or_scoped(
            OPTIM_WRAPPER_CONSTRUCTORS, 'CompilableOptimWrapperConstructor',
            CompilableOptimWrapperConstructor)
    if amp:
        wrapper = cfg.optim_wrapper
        if on_gpu:
            wrapper.type = 'AmpOptimWrapper'
            wrapper.setdefault('loss_scale', 'dynamic')
            wrapper.setdefault('dtype', 'float16')
        else:
            wrapper.type = _root_or_scoped(OPTIM_WRAPPERS, 'CPUAmpOptimWrapper',
                                           CPUAmpOptimWrapper)
            wrapper.pop('loss_scale', None)
            wrapper['dtype'] = 'bfloat16'
    if not on_gpu:
        cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})['backend'] = 'gloo'
        if cfg.get('launcher', 'none') != 'none':
            cfg.model_wrapper_cfg = dict(
                type='MMDistributedDataParallel', device_ids=None,
                broadcast_buffers=False,
                find_unused_parameters=cfg.get('find_unused_parameters', False))
        if _replace_sync_bn(cfg.get('model', {})):
            print_log('No CUDA: SyncBN layers of the config use BN instead.',
                      logger='current')
    return cfg


def init_cpu_distributed(launcher: str) -> None:
    """Start a gloo process group for ``launcher='pytorch'`` runs without CUDA.

    mmengine's own initialisation selects a CUDA device first, which fails on
    a machine without one; an existing process group is reused by the Runner.
    """
    if (launcher == 'pytorch' and not torch.cuda.is_available()
            and not dist.is_initialized()):
        dist.init_process_group(backend='gloo', rank=int(os.environ['RANK']),
                                world_size=int(os.environ['WORLD_SIZE']))


def finish_distributed() -> None:
    """Destroy the process groups and join gloo's threads; a no-op without them.

    Call it at the very end of an entry point, once the Runner is gone: its
    DDP wrapper holds the group, and the group's threads stop only when its
    last reference goes. A gloo worker thread frees each finished
    collective's tensors, which needs the GIL for tensors made in Python
    (``broadcast_object_list`` makes them). Once the interpreter has begun to
    shut down, that thread is ended in the middle of a destructor and the
    process aborts ("terminate called without an active exception") after
    a run that succeeded. Dropping the last reference here, while the
    interpreter is alive, joins the threads first: torch releases the GIL
    while it destroys a group, so a waiting worker thread can finish.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    group = dist.group.WORLD
    dist.destroy_process_group()
    gc.collect()  # reference cycles that keep a DDP wrapper, and the group, alive
    del group  # the last reference: the group's destructor joins its threads


def stop_with_launcher(poll_s: float = 1.0, grace_s: float = 30.0) -> bool:
    """End this worker when the launcher that started it is gone.

    torchrun starts each worker in a session of its own, so a SIGKILL to the
    launcher (or to the launcher's process group) cannot reach the workers,
    and they would train on and write checkpoints. On SIGTERM or SIGINT the
    launcher ends them itself; this covers SIGKILL: a daemon thread notices
    that the worker's parent is no longer the launcher and sends SIGTERM to
    the worker's process group (itself and its data loader workers), then
    SIGKILL after ``grace_s``. It does nothing unless the process was started
    by torchrun.

    The launcher is the pid in ``MMSOFT_LAUNCHER_PID`` when set, else the
    parent now. ``tools/train.py`` and ``tools/test.py`` set it before their
    imports (``tools/lib/follow_launcher.py``, which on Linux also has the
    kernel end the worker with its launcher from then on): a launcher killed
    during those seconds leaves a parent that is not the launcher, and the
    watch ends the worker at once.

    Args:
        poll_s (float): How often to check the parent. Defaults to 1.0.
        grace_s (float): Time between SIGTERM and SIGKILL. Defaults to 30.

    Returns:
        bool: Whether the watch was started.
    """
    if 'TORCHELASTIC_RUN_ID' not in os.environ:
        return False
    given = os.environ.get('MMSOFT_LAUNCHER_PID', '')
    launcher = int(given) if given.isdigit() else os.getppid()
    own_group = os.getpgid(0) == os.getpid()

    def end(sig: int) -> None:
        if own_group:
            os.killpg(os.getpid(), sig)
        else:
            os.kill(os.getpid(), sig)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(poll_s)
        print(f'mmsoft: the launcher (pid {launcher}) is gone; ending worker '
              f'{os.getpid()} (rank {os.environ.get("RANK", "?")}).',
              file=sys.stderr, flush=True)
        end(signal.SIGTERM)
        time.sleep(grace_s)
        end(signal.SIGKILL)

    threading.Thread(target=watch, name='mmsoft-launcher-watch',
                     daemon=True).start()
    return True


def global_rank() -> int:
    """This process's rank from the launcher's environment (0 without one)."""
    return int(os.environ.get('RANK', os.environ.get('SLURM_PROCID', 0)))
