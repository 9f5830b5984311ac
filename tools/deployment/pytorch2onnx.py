"""Export an mmpretrain, mmdet or mmseg model with a SOFT backbone to ONNX.

The graph takes the preprocessed image batch (normalised and padded as the
config's data preprocessor leaves it) and returns the head's raw outputs:
logits for classifiers, per-level class scores and box deltas for single-stage
detectors (two-stage: the neck's maps and the RPN's outputs), the decode
head's logits for segmentors; no NMS, no resizing. SOFT's attention runs the
Newton iteration as matrix products while exporting (mmsoft.ops.exporting),
or, with --newton-node, as one node per inverse that mmsoft runs in ONNX
Runtime (mmsoft.deployment.ort_session) by the same route as eager torch.

--out (default: the config's name + .onnx) must not exist unless --force,
and is never a folder, FIFO or device; that is checked before the export.
--dynamic makes batch, height and width symbolic; the tool prints the size
range the file serves, or refuses with the reason. --verify runs ONNX Runtime
and torch (eager, default path) on the same random input at --shape and at
each --verify-shape, and prints the largest relative difference
max|onnx - torch| / max|torch| over the outputs.

Examples:
  python tools/deployment/pytorch2onnx.py configs/soft_tiny_imagenet.py \
      --shape 224 224 --verify
  python tools/deployment/pytorch2onnx.py \
      configs/retinanet_softnorm-tiny_fpn_1x_coco.py work_dirs/retinanet/epoch_12.pth \
      --shape 512 512 --dynamic --out retinanet.onnx \
      --verify --verify-shape 480 640 --verify-shape 800 1344
"""
import argparse
import os.path as osp
import sys

from mmengine.config import DictAction


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', nargs='?', default=None,
                        help='checkpoint (default: initialised weights)')
    parser.add_argument('--shape', type=int, nargs=2, required=True,
                        metavar=('H', 'W'), help='input height and width')
    parser.add_argument('--dynamic', action='store_true',
                        help='symbolic batch, height and width')
    parser.add_argument('--opset', type=int, default=18, help='ONNX opset (default 18)')
    parser.add_argument('--newton-node', action='store_true',
                        help='write each Newton inverse as one SOFTNewtonApply node, '
                        'run by mmsoft.deployment.ort_session (needs '
                        'onnxruntime-extensions), instead of 40 standard matrix '
                        'products: several times faster at detection sizes')
    parser.add_argument('--out', default=None,
                        help='ONNX file (default: the config name + .onnx)')
    parser.add_argument('--force', action='store_true',
                        help='replace the --out file when it exists')
    parser.add_argument('--verify', action='store_true',
                        help='compare ONNX Runtime with torch on the same input')
    parser.add_argument('--verify-shape', type=int, nargs=2, action='append',
                        default=[], metavar=('H', 'W'),
                        help='another size to verify at (repeatable; --dynamic)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.verify_shape and not (args.verify and args.dynamic):
        print('error: --verify-shape needs --verify and --dynamic (a static export '
              'serves only --shape)', file=sys.stderr)
        return 2
    from mmsoft.utils import check_output_file
    default = osp.splitext(osp.basename(args.config))[0] + '.onnx'
    out = args.out or default
    try:
        check_output_file(out, args.force, make_folders=True, example=default)
    except ValueError as error:
        print(f'error: {error}', file=sys.stderr)
        return 2
    from mmsoft.deployment import export_onnx, load_model, min_dynamic_side, verify_onnx
    try:
        model = load_model(args.config, args.checkpoint, args.cfg_options)
        export_onnx(model, args.shape, out, dynamic=args.dynamic, opset=args.opset,
                    newton_node=args.newton_node)
    except (ValueError, FileNotFoundError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    height, width = args.shape
    if args.dynamic:
        low = min_dynamic_side(model)
        serves = f'any batch, H and W from {low} to 8192 px'
        if model.size_divisor > 1:
            serves += f' (multiples of {model.size_divisor}, as the pipeline pads)'
    else:
        serves = f'batch 1 at {height} x {width} only'
    names = ', '.join(model.output_names)
    print(f'Exported the {model.task} to {out}: outputs {names}; serves {serves}.')
    if args.verify:
        shapes = [tuple(args.shape)] + [tuple(s) for s in args.verify_shape]
        for shape, diff in verify_onnx(model, out, shapes).items():
            print(f'ONNX Runtime vs torch at {shape[0]} x {shape[1]}: largest relative '
                  f'difference {diff:.2e}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
