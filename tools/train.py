"""Train a model from a config with mmengine's Runner (mmpretrain, mmdet or mmseg).

The config's ``default_scope`` decides the toolbox. Examples:
    python tools/train.py configs/soft_tiny_imagenet.py
    python tools/train.py configs/retinanet_softnorm-tiny_fpn_1x_coco.py \
        --cfg-options model.backbone.init_cfg.checkpoint=soft_tiny.pth
    tools/dist_train.sh configs/soft_tiny_imagenet.py 8 --resume
"""
import argparse
import os

from mmengine.config import DictAction
from mmengine.runner import Runner

import mmsoft  # noqa: F401  (registers SOFT, weights-only checkpoint loading)
from mmsoft.apis import (
    finish_distributed,
    init_cpu_distributed,
    load_config,
    prepare_config,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go '
                        '(default: work_dirs/<config name>)')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from a checkpoint; without a path, from the '
                        'latest one in the work dir')
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
    """Run the training; returns the Runner that ran it."""
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, args.launcher, args.work_dir)
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume:
        cfg.resume, cfg.load_from = True, args.resume
    if args.auto_scale_lr:
        cfg.setdefault('auto_scale_lr', {})['enable'] = True
    prepare_config(cfg, amp=args.amp)
    init_cpu_distributed(args.launcher)
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner


if __name__ == '__main__':
    try:
        main()  # the Runner it returns goes here, before the process group
    finally:
        finish_distributed()
