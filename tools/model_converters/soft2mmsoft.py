"""Convert a released SOFT checkpoint into an mmpretrain classifier checkpoint.

Example:
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth \
        checkpoints/soft_tiny_mmsoft.pth
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth out.pth --ema
    python tools/model_converters/soft2mmsoft.py soft_tiny.pth out.pth --newton ridge

The converter never writes over a file unless ``--force`` is given, never
over the source (also through a link), and never over anything that is not a
regular file (a folder, a FIFO, a device such as /dev/null), checked before
the source is read. The output is written aside, loaded
back weights-only and checked before it takes its name. The checkpoint's
``meta['ema']`` says whether the weights are the EMA ones (an EMA-only source
gives them without ``--ema``).

Weights that hold NaN or Inf stop the converter, named, unless
``--allow-non-finite`` is given.

The source is read weights-only: a checkpoint whose pickle carries code is
refused, never run. Training states of the authors' code (timm or DeiT,
with an ``args`` namespace beside the weights) read that way too;
``--unsafe-load`` exists for a file you trust that holds other objects.

The result loads strictly into the model of ``configs/soft_tiny_imagenet.py``
(``load_from=out.pth``) and, with ``prefix='backbone.'``, into the backbone of
any detection or segmentation config. The checkpoint records the Newton
inverse (``--newton``, default ``backoff``: the one every release was trained
with); the backbone takes it on load and logs it, so ``tools/test.py CONFIG
out.pth`` evaluates the released network without further flags.
"""
import argparse
import os.path as osp
import pickle
import sys

import torch

from mmsoft.engine.atomic_local_backend import atomic_output
from mmsoft.models.utils import (
    check_finite_weights,
    convert_soft_state_dict,
    extract_state_dict,
)
from mmsoft.models.utils.checkpoint_loading import EMA_KEY, weights_key
from mmsoft.models.utils.ckpt_convert import NEWTON_CODES, RELEASED_NEWTON
from mmsoft.utils import check_output_file, load_local_checkpoint

# Plain classes the authors' training states hold besides tensors; unpickling
# them sets attributes and runs no code.
TRAINING_STATE_GLOBALS = (argparse.Namespace, )


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='released checkpoint (.pth)')
    parser.add_argument('dst', help='where to write the converted checkpoint')
    parser.add_argument('--ema', action='store_true',
                        help='convert the EMA weights (state_dict_ema)')
    parser.add_argument('--force', action='store_true',
                        help='replace DST when it exists (never SRC itself)')
    parser.add_argument('--unsafe-load', action='store_true',
                        help='load SRC with weights_only=False, which RUNS ANY '
                        'CODE pickled in it: only for a file you trust that the '
                        'safe load refuses')
    parser.add_argument('--allow-non-finite', action='store_true',
                        help='convert weights that hold NaN or Inf (named in a '
                        'warning) instead of stopping')
    parser.add_argument('--newton', choices=tuple(NEWTON_CODES),
                        default=RELEASED_NEWTON,
                        help='Newton inverse recorded in the checkpoint: backoff '
                        '(the released models\' inverse, default) or ridge '
                        "(mmsoft's training default, A2 + 0.01 I)")
    return parser.parse_args(argv)


def load_source(path: str, unsafe: bool = False) -> dict:
    """Read ``path`` weights-only (or, with ``unsafe``, as a full pickle)."""
    return load_local_checkpoint(path, map_location='cpu',
                                 extra_safe_globals=TRAINING_STATE_GLOBALS,
                                 weights_only=not unsafe)


def check_destination(src: str, dst: str, force: bool = False) -> None:
    """Stop unless ``dst`` can be written without losing anything of the user's.

    ``dst`` is never ``src`` (also through a link), and passes
    :func:`mmsoft.utils.check_output_file`: a regular file, replaced only with
    ``force``, in a writable folder.

    Args:
        src (str): The checkpoint to convert.
        dst (str): Where the converted checkpoint goes.
        force (bool): Replace an existing ``dst``. Defaults to False.
    """
    if osp.isfile(dst) and osp.exists(src) and osp.samefile(src, dst):
        how = ' (through a link)' if osp.abspath(src) != osp.abspath(dst) else ''
        sys.exit(f'{dst} is the source {src} itself{how}; write the converted '
                 'checkpoint to another file.')
    try:
        check_output_file(dst, force,
                          example=osp.splitext(osp.basename(src))[0] + '_mmsoft.pth')
    except ValueError as error:
        sys.exit(str(error))


def write_checked(checkpoint: dict, dst: str) -> None:
    """Write ``checkpoint`` aside, load it back weights-only, then rename it.

    Raises:
        RuntimeError: What was written does not load back as the same tensors;
            ``dst`` is left as it was.
    """
    expected = checkpoint['state_dict']
    with atomic_output(dst) as partial:
        torch.save(checkpoint, partial)
        written = load_local_checkpoint(partial, map_location='cpu')['state_dict']
        wrong = [key for key in expected
                 if not isinstance(written.get(key), torch.Tensor)
                 or written[key].shape != expected[key].shape
                 or written[key].dtype != expected[key].dtype]
        if wrong or len(written) != len(expected):
            raise RuntimeError(f'The checkpoint written for {dst} does not load back '
                               f'as converted (keys {wrong[:10]}); nothing was '
                               'written.')


def main(argv=None) -> None:
    args = parse_args(argv)
    check_destination(args.src, args.dst, args.force)
    try:
        checkpoint = load_source(args.src, args.unsafe_load)
        weights = extract_state_dict(checkpoint, ema=args.ema, source=args.src)
        check_finite_weights(weights, args.src, 'pass --allow-non-finite',
                             allow=args.allow_non_finite)
    except pickle.UnpicklingError as err:  # refused by the weights-only load
        advice = '' if args.unsafe_load else \
            f'\nOnly if you trust {args.src}: pass --unsafe-load.'
        sys.exit(f'{err}{advice}')
    except (FileNotFoundError, RuntimeError, TypeError, KeyError,
            ValueError) as err:
        sys.exit(str(err.args[0]) if err.args else str(err))
    ema = weights_key(checkpoint, args.ema) == EMA_KEY
    converted, leftovers = convert_soft_state_dict(weights, with_head=True,
                                                   newton=args.newton)
    if leftovers:
        sys.exit(f'Stopped: {len(leftovers)} keys of {args.src} have no mapping: '
                 f'{leftovers}')
    if not any(key.startswith('backbone.') and key != 'backbone.newton_variant'
               for key in converted):
        sys.exit(f'Stopped: {args.src} holds no SOFT backbone weights (keys: '
                 f'{list(weights)[:10]}).')
    write_checked(dict(state_dict=converted,
                       meta=dict(converted_from=osp.basename(args.src), ema=ema,
                                 newton=args.newton)), args.dst)
    which = ('the EMA weights' + ('' if args.ema else f', the only ones {args.src} '
                                  'holds') if ema else 'the weights')
    print(f'Converted {len(converted)} tensors ({which}) from {args.src} to '
          f'{args.dst} (Newton inverse: {args.newton}).')


if __name__ == '__main__':
    main()
