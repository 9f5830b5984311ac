"""Evaluate a checkpoint on a config's test set (mmpretrain, mmdet or mmseg).

A checkpoint whose weights do not fit the config's model (missing, unexpected
or of other shapes) is an error naming the keys, unless --allow-partial-load.

Examples:
    python tools/test.py configs/soft_tiny_imagenet.py work_dirs/epoch_300.pth
    tools/dist_test.sh configs/soft_tiny_imagenet.py soft_tiny.pth 8
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
    check_annotation_files,
    finish_distributed,
    global_rank,
    init_cpu_distributed,
    load_config,
    prepare_config,
    stop_with_launcher,
)
from mmsoft.engine import CheckpointFitHook, CollectInWorkDirHook, SegLabelCheckHook


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint to evaluate')
    parser.add_argument('--work-dir', help='where logs and results go')
    parser.add_argument('--amp', action='store_true',
                        help='evaluate under autocast (float16 on CUDA, bfloat16 '
                        'on CPU)')
    parser.add_argument('--allow-partial-load', action='store_true',
                        help='evaluate even when some weights of CHECKPOINT do not '
                        'fit the model (they are listed in a warning and keep '
                        'their initial values); without it that is an error')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local-rank', '--local_rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None) -> dict:
    """Run the evaluation; returns the metrics (rank 0 holds them all)."""
    args = parse_args(argv)
    stop_with_launcher()
    cfg = load_config(args.config, args.cfg_options, args.launcher, args.work_dir)
    cfg.load_from = args.checkpoint
    if args.amp:
        cfg.test_cfg = {**(cfg.get('test_cfg') or {}), 'fp16': True}
    if global_rank() == 0:
        check_annotation_files(cfg, loops=('test', ))
    prepare_config(cfg)
    init_cpu_distributed(args.launcher)
    runner = Runner.from_cfg(cfg)
    runner.register_hook(CollectInWorkDirHook())
    runner.register_hook(SegLabelCheckHook())
    runner.register_hook(CheckpointFitHook(args.checkpoint,
                                           allow_partial=args.allow_partial_load))
    return runner.test()


if __name__ == '__main__':
    try:
        main()  # the Runner goes with it, before the process group
    finally:
        finish_distributed()
