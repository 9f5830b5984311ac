"""Save a detector's or segmentor's predictions on images as PNG pictures.

Runs mmdet's DetInferencer (boxes, and masks for instance segmentation) or
mmseg's MMSegInferencer (class maps), as the config's default_scope says, and
draws with their visualisers. One PNG per image, named
``<OUT_PREFIX><image name>.png``; one that exists is replaced only with
--force, checked before the model is built.

Examples:
    python tools/analysis/visualize_predictions.py \\
        configs/mask-rcnn_softnorm-tiny_fpn_6e_digit-scenes.py \\
        work_dirs/mask-rcnn_softnorm-tiny_fpn_6e_digit-scenes/epoch_4.pth \\
        data/digit_scenes/img_dir/val/00003.png --out-prefix docs/mask-rcnn_ --scale 3
"""
import argparse
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

import mmsoft  # noqa: F401


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='mmdet or mmseg config')
    parser.add_argument('checkpoint', help='checkpoint of that config')
    parser.add_argument('images', nargs='+', help='image files')
    parser.add_argument('--out-prefix', default='predictions/',
                        help='path prefix of the PNGs (default: predictions/)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detections below this score are not drawn (default: 0.3)')
    parser.add_argument('--opacity', type=float, default=0.5,
                        help='opacity of segmentation maps (default: 0.5)')
    parser.add_argument('--scale', type=int, default=1,
                        help='enlarge the pictures this many times, pixels kept '
                        'sharp, for small images (default: 1)')
    parser.add_argument('--force', action='store_true',
                        help='replace PNGs that exist')
    return parser.parse_args(argv)


def visualize(config: str, checkpoint: str, images: Sequence[str], out_prefix: str,
              score_thr: float = 0.3, opacity: float = 0.5,
              scale: int = 1, force: bool = False) -> List[Path]:
    """Draw predictions on ``images``; returns the PNGs written.

    Args:
        config (str): An mmdet or mmseg config file.
        checkpoint (str): Its checkpoint.
        images (Sequence[str]): Image files.
        out_prefix (str): Path prefix of the PNGs.
        score_thr (float): Lowest score drawn (detection). Defaults to 0.3.
        opacity (float): Opacity of class maps (segmentation). Defaults to 0.5.
        scale (int): Enlarge the pictures this many times (nearest
            neighbour). Defaults to 1.
        force (bool): Replace PNGs that exist. Defaults to False.

    Returns:
        list[Path]: The written files, in the order of ``images``.

    Raises:
        ValueError: A bad argument, or a PNG that cannot be written
            (:func:`mmsoft.utils.check_output_file`), before any model is built.
    """
    from mmengine.config import Config
    from PIL import Image

    from mmsoft.utils import check_output_file
    if scale < 1:
        raise ValueError(f'scale must be a positive integer, got {scale}.')
    targets = {}
    for image in images:
        target = f'{out_prefix}{Path(image).stem}.png'
        if target in targets:
            raise ValueError(f'{targets[target]} and {image} would both be drawn to '
                             f'{target}; pass images of different names.')
        targets[target] = image
        check_output_file(target, force, make_folders=True)
    cfg = Config.fromfile(config)
    scope = cfg.get('default_scope')
    if scope not in ('mmdet', 'mmseg'):
        raise ValueError(f'{config} has default_scope {scope!r}; this tool draws '
                         "mmdet or mmseg predictions (default_scope 'mmdet' or "
                         "'mmseg').")
    # The inferencers build the model without loading ImageNet weights.
    cfg.model.backbone.init_cfg = None
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        if scope == 'mmdet':
            from mmdet.apis import DetInferencer
            inferencer = DetInferencer(model=cfg, weights=checkpoint, device='cpu')
            for image in images:
                inferencer(image, out_dir=tmp, pred_score_thr=score_thr,
                           no_save_pred=True)
            drawn = Path(tmp) / 'vis'
        else:
            from mmseg.apis import MMSegInferencer
            inferencer = MMSegInferencer(model=cfg, weights=checkpoint, device='cpu')
            for image in images:
                inferencer(image, out_dir=tmp, opacity=opacity)
            drawn = Path(tmp) / 'vis'
        for image in images:
            source = drawn / Path(image).name
            target = Path(f'{out_prefix}{Path(image).stem}.png')  # as checked above
            target.parent.mkdir(parents=True, exist_ok=True)
            picture = Image.open(source)
            if scale > 1:
                picture = picture.resize((picture.width * scale,
                                          picture.height * scale), Image.NEAREST)
            picture.save(target)
            written.append(target)
    return written


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    for path in visualize(args.config, args.checkpoint, args.images,
                          args.out_prefix, args.score_thr, args.opacity,
                          args.scale, args.force):
        print(f'Saved {path}')


if __name__ == '__main__':
    main()
