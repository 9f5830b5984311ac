"""Convert a released SOFT checkpoint into an mmpretrain classifier checkpoint.

Example:
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth \
        checkpoints/soft_tiny_mmsoft.pth
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth out.pth --ema
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth out.pth --newton ridge

The result loads strictly into the model of ``configs/soft_tiny_imagenet.py``
(``load_from=out.pth``) and, with ``prefix='backbone.'``, into the backbone of
any detection or segmentation config. The checkpoint records the Newton
inverse (``--newton``, default ``backoff``: the one every release was trained
with); the backbone takes it on load and logs it, so ``tools/test.py CONFIG
out.pth`` evaluates the released network without further flags.
"""
import argparse
import os.path as osp
import sys

import torch

from mmsoft.models.utils import convert_soft_state_dict, strip_prefix
from mmsoft.models.utils.ckpt_convert import NEWTON_CODES, RELEASED_NEWTON


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='released checkpoint (.pth)')
    parser.add_argument('dst', help='where to write the converted checkpoint')
    parser.add_argument('--ema', action='store_true',
                        help='convert the EMA weights (state_dict_ema)')
    parser.add_argument('--newton', choices=tuple(NEWTON_CODES),
                        default=RELEASED_NEWTON,
                        help='Newton inverse recorded in the checkpoint: backoff '
                        '(the released models\' inverse, default) or ridge '
                        "(mmsoft's training default, A2 + 0.01 I)")
    return parser.parse_args(argv)


def select_weights(checkpoint: dict, ema: bool) -> dict:
    """Pick the state dict out of a released checkpoint."""
    if ema:
        if 'state_dict_ema' not in checkpoint:
            raise SystemExit(f'--ema was given but the checkpoint has no '
                             f'state_dict_ema (keys: {list(checkpoint)[:10]}).')
        weights = checkpoint['state_dict_ema']
    else:
        for key in ('state_dict', 'model'):
            if isinstance(checkpoint.get(key), dict):
                weights = checkpoint[key]
                break
        else:
            weights = checkpoint
    return strip_prefix(weights, 'module.')


def main(argv=None) -> None:
    args = parse_args(argv)
    # Released checkpoints are timm training states (argparse namespaces and
    # the like), which a weights-only load refuses: read them only from a
    # source you trust.
    checkpoint = torch.load(args.src, map_location='cpu', weights_only=False)
    weights = select_weights(checkpoint, args.ema)
    converted, leftovers = convert_soft_state_dict(weights, with_head=True,
                                                   newton=args.newton)
    if leftovers:
        sys.exit(f'Stopped: {len(leftovers)} keys of {args.src} have no mapping: '
                 f'{leftovers}')
    dirname = osp.dirname(osp.abspath(args.dst))
    if not osp.isdir(dirname):
        sys.exit(f'Output folder {dirname} does not exist.')
    torch.save(dict(state_dict=converted,
                    meta=dict(converted_from=osp.basename(args.src),
                              ema=args.ema, newton=args.newton)), args.dst)
    print(f'Converted {len(converted)} tensors from {args.src} to {args.dst} '
          f'(Newton inverse: {args.newton}).')


if __name__ == '__main__':
    main()
