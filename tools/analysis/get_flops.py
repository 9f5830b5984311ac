"""Print parameters and FLOPs (multiply-accumulates) of a config's model.

Counts at torch's dispatcher (mmsoft.utils.flops), so the attention's matrix
products, its exp and the Newton iterations are all seen. The published SOFT
FLOPs leave the Newton iterations out; both figures are printed.

Example:
    python tools/analysis/get_flops.py configs/soft_tiny_imagenet.py --shape 224 224
    python tools/analysis/get_flops.py configs/retinanet_softnorm-tiny_fpn_1x_coco.py \
        --shape 800 1333
"""
import argparse

from mmengine.config import Config, DictAction

import mmsoft  # noqa: F401  (registers SOFT)
from mmsoft.utils.flops import measure_config


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config file')
    parser.add_argument('--shape', type=int, nargs='+', default=[224, 224],
                        help='input H W (one value for a square); default 224 224')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    height, width = (args.shape * 2)[:2]
    config = Config.fromfile(args.config)
    if args.cfg_options:
        config.merge_from_dict(args.cfg_options)
    rows = measure_config(config, height, width)
    print(f'Input shape: 1 x 3 x {height} x {width}   (FLOPs = multiply-accumulates)')
    header = f'| {"part":<12}| {"params (M)":>11} | {"FLOPs (G)":>10} | ' \
             f'{"FLOPs w/o Newton (G)":>21} |'
    print(header)
    print('|' + '|'.join('-' * (len(c)) for c in header.split('|')[1:-1]) + '|')
    for name, params, macs, macs_no_newton in rows:
        print(f'| {name:<12}| {params / 1e6:>11.2f} | {macs / 1e9:>10.3f} | '
              f'{macs_no_newton / 1e9:>21.3f} |')


if __name__ == '__main__':
    main()
