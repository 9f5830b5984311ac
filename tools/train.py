"""Train a model from a config with mmengine's Runner (mmpretrain, mmdet or mmseg).

The config's ``default_scope`` decides the toolbox. Examples:
    python tools/train.py configs/soft_tiny_imagenet.py
    python tools/train.py configs/retinanet_softnorm-tiny_fpn_1x_coco.py \
        --cfg-options model.backbone.init_cfg.checkpoint=soft_tiny.pth
    tools/dist_train.sh configs/soft_tiny_imagenet.py 8 --resume
"""
if __name__ == '__main__':  # first, before seconds of imports: see the module
    import os.path as osp
    import runpy
    runpy.run_path(osp.join(osp.dirname(osp.abspath(__file__)), 'lib',
                            'follow_launcher.py'))['follow_launcher']()
import argparse
import os

from mmengine.config import DictAction
from mmengine.runner import Runner

import mmsoft.runtime  # noqa: F401  (SOFT's names, weights-only loading, atomic writes)
from mmsoft.apis import (
    WorkDirLock,
    check_annotation_files,
    finish_distributed,
    global_rank,
    init_cpu_distributed,
    load_config,
    prepare_config,
    stop_with_launcher,
)
from mmsoft.engine import CheckpointFitHook, CollectInWorkDirHook, SegLabelCheckHook
from mmsoft.engine.atomic_local_backend import is_temporary, remove_stale_temporaries


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go '
                        '(default: work_dirs/<config name>)')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from a checkpoint of this config; without a '
                        'path, from the latest one in the work dir (to start '
                        'from the weights of another model, set load_from)')
    parser.add_argument('--amp', action='store_true',
                        help='mixed precision (float16 on CUDA, bfloat16 on CPU)')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the actual total batch')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local-rank', '--local_rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None) -> Runner:
    """Run the training; returns the Runner that ran it.

    The run holds ``<work_dir>/train.lock`` while it trains (rank 0 takes
    it), so a second run, a ``--resume`` included, refuses to start on the
    same work dir while the first one runs.
    """
    args = parse_args(argv)
    stop_with_launcher()
    cfg = load_config(args.config, args.cfg_options, args.launcher, args.work_dir)
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume:
        if is_temporary(args.resume):
            raise ValueError(f'{args.resume} is the temporary file of a checkpoint '
                             'write that never finished, not a checkpoint; resume '
                             'from a checkpoint without the leading dot, or use '
                             '--resume alone for the latest one.')
        cfg.resume, cfg.load_from = True, args.resume
    if args.auto_scale_lr:
        cfg.setdefault('auto_scale_lr', {})['enable'] = True
    if global_rank() == 0:
        check_annotation_files(
            cfg, loops=('train', 'val') if cfg.get('val_cfg') else ('train', ))
    lock = WorkDirLock(cfg.work_dir) if global_rank() == 0 else None
    if lock:
        lock.acquire()
    try:
        if lock and args.resume:
            for path in remove_stale_temporaries(cfg.work_dir):
                print(f'Removed {path}, left by a checkpoint write that was killed.')
        prepare_config(cfg, amp=args.amp)
        init_cpu_distributed(args.launcher)
        runner = Runner.from_cfg(cfg)
        runner.register_hook(CollectInWorkDirHook())
        runner.register_hook(SegLabelCheckHook())
        if args.resume:
            checkpoint = None if args.resume == 'auto' else args.resume
            runner.register_hook(CheckpointFitHook(checkpoint, purpose='resume'))
        runner.train()
    finally:
        if lock:
            lock.release()
    return runner

if __name__ == '__main__':
    try:
        main()  # the Runner it returns goes here, before the process group
    finally:
        finish_distributed()
