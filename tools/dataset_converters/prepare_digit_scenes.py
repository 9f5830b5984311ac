"""Compose scikit-learn's digit scans into scenes for detection and segmentation.

Each scene is a black canvas with a few of the real 8 x 8 scans, upscaled
bilinearly to a random size and placed at a random position. A digit's
pixels are those of its upscaled scan at half intensity or more; its box is
tight around them. Digits may touch, their pixels never overlap, and two
boxes overlap by at most ``--max-iou``. Training scenes use only the scans of
the digits demo's training split and validation scenes only those of its
validation split (the 1,438 / 359 split of prepare_digits.py), so no
validation digit is seen in pretraining or fine-tuning.

One folder holds both layouts, sharing the images:

    OUT_DIR/img_dir/{train,val}/<id>.png        grey scenes
    OUT_DIR/ann_dir/{train,val}/<id>.png        labels: 0 background, 1 + digit
    OUT_DIR/annotations/instances_{train,val}.json
                                                COCO boxes and RLE masks,
                                                categories '0'-'9'
    OUT_DIR/scenes.json                         the settings that made it

The class lists and the default canvas are those of the configs' dataset
base, configs/_base_/datasets/digit_scenes.py, read from there so that the
files and the configs agree. The same settings give the same files; a folder
made with other settings is never overwritten.

Example:
    python tools/dataset_converters/prepare_digit_scenes.py data/digit_scenes
    python tools/dataset_converters/prepare_digit_scenes.py data/scenes_s1 \\
        --seed 1 --canvas 128 160 --per-image 3 6 --num-train 500 --num-val 100
"""
import argparse
import importlib.util
import json
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
from mmengine.config import Config
from PIL import Image

DATASET_BASE = (Path(__file__).resolve().parents[2] / 'configs' / '_base_' /
                'datasets' / 'digit_scenes.py')
_scenes = Config.fromfile(str(DATASET_BASE))
CLASSES = tuple(_scenes.classes)  # COCO categories: category_id 1 + index
SEG_CLASSES = tuple(_scenes.seg_classes)  # label-map values: index
MASK_THRESHOLD = 128
DEFAULTS = dict(seed=0, canvas=tuple(_scenes.canvas), per_image=(2, 4),
                digit_size=(20, 40), max_iou=0.2, num_train=1200, num_val=200)
if len(CLASSES) != 10 or SEG_CLASSES[1:] != CLASSES:
    raise ValueError(f'{DATASET_BASE} must name the ten digits in order (classes) '
                     'and the background followed by them (seg_classes): digit d '
                     'is category d + 1 and label-map value d + 1.')


def _split_indices(labels: np.ndarray) -> dict:
    """The digits demo's split, from prepare_digits.py next to this file."""
    path = Path(__file__).with_name('prepare_digits.py')
    spec = importlib.util.spec_from_file_location('prepare_digits', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.split_indices(labels)


def box_iou(a: Sequence[int], b: Sequence[int]) -> float:
    """IoU of two ``[x1, y1, x2, y2]`` boxes with inclusive pixel corners."""
    width = min(a[2], b[2]) - max(a[0], b[0]) + 1
    height = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    area = lambda box: (box[2] - box[0] + 1) * (box[3] - box[1] + 1)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def compose_scene(rng: np.random.Generator, scans: np.ndarray, labels: np.ndarray,
                  pool: np.ndarray, canvas: Tuple[int, int],
                  per_image: Tuple[int, int], digit_size: Tuple[int, int],
                  max_iou: float) -> Tuple[np.ndarray, np.ndarray, List[dict]]:
    """One scene: the grey image, the label map and its instances.

    Args:
        rng (np.random.Generator): Source of all randomness.
        scans (np.ndarray): (N, 8, 8) uint8 scans, 0-255.
        labels (np.ndarray): (N, ) digit of each scan.
        pool (np.ndarray): Indices of the scans this scene may use.
        canvas (tuple[int, int]): Height and width.
        per_image (tuple[int, int]): Fewest and most digits.
        digit_size (tuple[int, int]): Smallest and largest side of a scan.
        max_iou (float): Largest box IoU between two digits.

    Returns:
        tuple: ``(image, label_map, instances)``; each instance has
        ``scan``, ``digit``, ``box`` ([x1, y1, x2, y2], inclusive) and
        ``mask`` (bool, canvas-sized).
    """
    height, width = canvas
    image = np.zeros(canvas, np.uint8)
    label_map = np.zeros(canvas, np.uint8)
    wanted = int(rng.integers(per_image[0], per_image[1] + 1))
    instances: List[dict] = []
    for _ in range(50 * wanted):
        if len(instances) == wanted:
            break
        scan = int(rng.choice(pool))
        size = int(rng.integers(digit_size[0], digit_size[1] + 1))
        patch = np.asarray(Image.fromarray(scans[scan]).resize(
            (size, size), Image.BILINEAR))
        y0 = int(rng.integers(0, height - size + 1))
        x0 = int(rng.integers(0, width - size + 1))
        mask = np.zeros(canvas, bool)
        mask[y0:y0 + size, x0:x0 + size] = patch >= MASK_THRESHOLD
        if not mask.any() or (label_map[mask] > 0).any():
            continue
        ys, xs = np.nonzero(mask)
        box = [int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())]
        if any(box_iou(box, other['box']) > max_iou for other in instances):
            continue
        region = image[y0:y0 + size, x0:x0 + size]
        np.maximum(region, patch, out=region)
        label_map[mask] = labels[scan] + 1
        instances.append(dict(scan=scan, digit=int(labels[scan]), box=box,
                              mask=mask))
    if len(instances) < per_image[0]:
        raise RuntimeError(
            f'Placed only {len(instances)} of at least {per_image[0]} digits on a '
            f'{height} x {width} canvas after {50 * wanted} tries; enlarge --canvas '
            'or --max-iou, or lower --per-image or --digit-size.')
    return image, label_map, instances


def _coco_annotation(instance: dict, ann_id: int, image_id: int) -> dict:
    from pycocotools import mask as mask_utils
    rle = mask_utils.encode(np.asfortranarray(instance['mask'].astype(np.uint8)))
    x1, y1, x2, y2 = instance['box']
    return dict(id=ann_id, image_id=image_id, category_id=instance['digit'] + 1,
                bbox=[x1, y1, x2 - x1 + 1, y2 - y1 + 1],
                area=int(instance['mask'].sum()), iscrowd=0,
                segmentation=dict(size=rle['size'],
                                  counts=rle['counts'].decode('ascii')),
                scan_index=instance['scan'])


def check_settings(settings: dict) -> None:
    """Raise a ValueError naming any setting that cannot make valid scenes."""
    height, width = settings['canvas']
    low, high = settings['digit_size']
    if not 8 <= low <= high:
        raise ValueError(f'--digit-size {low} {high}: need 8 <= MIN <= MAX '
                         '(scans are 8 x 8 and are only enlarged).')
    if high > min(height, width):
        raise ValueError(f'--digit-size maximum {high} px does not fit the '
                         f'{height} x {width} canvas; enlarge --canvas or '
                         'shrink --digit-size.')
    fewest, most = settings['per_image']
    if not 1 <= fewest <= most:
        raise ValueError(f'--per-image {fewest} {most}: need 1 <= MIN <= MAX.')
    if not 0.0 <= settings['max_iou'] < 1.0:
        raise ValueError(f'--max-iou {settings["max_iou"]} must be in [0, 1).')
    for key in ('num_train', 'num_val'):
        if settings[key] < 1:
            raise ValueError(f'--{key.replace("_", "-")} must be at least 1.')


def prepare_digit_scenes(out_dir: str, **settings) -> dict:
    """Write the scenes; returns the number of scenes and digits per split.

    Args:
        out_dir (str): Output folder.
        **settings: Any of ``seed`` (0), ``canvas`` ((96, 96)), ``per_image``
            ((2, 4)), ``digit_size`` ((20, 40)), ``max_iou`` (0.2),
            ``num_train`` (1200) and ``num_val`` (200).

    Returns:
        dict: ``{'train': (scenes, digits), 'val': (scenes, digits)}``.
    """
    unknown = set(settings) - set(DEFAULTS)
    if unknown:
        raise TypeError(f'Unknown settings {sorted(unknown)}; allowed: '
                        f'{sorted(DEFAULTS)}.')
    settings = {**DEFAULTS, **settings}
    settings = {k: list(v) if isinstance(v, (tuple, list)) else v
                for k, v in settings.items()}
    check_settings(settings)
    from sklearn.datasets import load_digits
    digits = load_digits()
    scans = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    split = _split_indices(digits.target)
    root = Path(out_dir)
    rng = np.random.default_rng(settings['seed'])
    categories = [dict(id=i + 1, name=name) for i, name in enumerate(CLASSES)]
    counts = {}
    for name in ('train', 'val'):
        images, annotations = [], []
        for folder in ('img_dir', 'ann_dir'):
            (root / folder / name).mkdir(parents=True, exist_ok=True)
        for index in range(settings[f'num_{name}']):
            image, label_map, instances = compose_scene(
                rng, scans, digits.target, split[name], tuple(settings['canvas']),
                tuple(settings['per_image']), tuple(settings['digit_size']),
                settings['max_iou'])
            file_name = f'{index:05d}.png'
            Image.fromarray(image).save(root / 'img_dir' / name / file_name)
            Image.fromarray(label_map).save(root / 'ann_dir' / name / file_name)
            images.append(dict(id=index + 1, file_name=file_name,
                               height=image.shape[0], width=image.shape[1]))
            for instance in instances:
                annotations.append(_coco_annotation(instance, len(annotations) + 1,
                                                    index + 1))
        (root / 'annotations').mkdir(exist_ok=True)
        (root / 'annotations' / f'instances_{name}.json').write_text(json.dumps(
            dict(images=images, annotations=annotations, categories=categories)))
        counts[name] = (len(images), len(annotations))
    (root / 'scenes.json').write_text(json.dumps(settings, indent=1))
    return counts


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('out_dir', nargs='?', default='data/digit_scenes',
                        help='output folder (default: data/digit_scenes)')
    parser.add_argument('--seed', type=int, default=DEFAULTS['seed'],
                        help='random seed (default: 0)')
    parser.add_argument('--canvas', type=int, nargs=2, metavar=('H', 'W'),
                        default=DEFAULTS['canvas'],
                        help='canvas size (default: {} {}, the dataset base\'s)'.format(
                            *DEFAULTS['canvas']))
    parser.add_argument('--per-image', type=int, nargs=2, metavar=('MIN', 'MAX'),
                        default=DEFAULTS['per_image'],
                        help='digits per scene (default: 2 4)')
    parser.add_argument('--digit-size', type=int, nargs=2, metavar=('MIN', 'MAX'),
                        default=DEFAULTS['digit_size'],
                        help='side of an upscaled scan in px (default: 20 40)')
    parser.add_argument('--max-iou', type=float, default=DEFAULTS['max_iou'],
                        help='largest box IoU between two digits (default: 0.2)')
    parser.add_argument('--num-train', type=int, default=DEFAULTS['num_train'],
                        help='training scenes (default: 1200)')
    parser.add_argument('--num-val', type=int, default=DEFAULTS['num_val'],
                        help='validation scenes (default: 200)')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = vars(parse_args(argv))
    out_dir = args.pop('out_dir')
    settings = {k: list(v) if isinstance(v, (tuple, list)) else v
                for k, v in args.items()}
    record = Path(out_dir) / 'scenes.json'
    if record.exists():
        if json.loads(record.read_text()) == settings:
            print(f'{out_dir} already holds these digit scenes.')
            return
        raise SystemExit(f'{out_dir} holds digit scenes made with other settings '
                         f'({record}); delete the folder or choose another one.')
    from mmsoft.utils import check_output_folder
    try:
        check_output_folder(out_dir)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if Path(out_dir).is_dir() and any(Path(out_dir).iterdir()):
        raise SystemExit(f'{out_dir} is not empty; choose a new folder.')
    try:
        check_settings(settings)
        counts = prepare_digit_scenes(out_dir, **settings)
    except (ValueError, RuntimeError) as error:
        raise SystemExit(str(error)) from None
    print(f'Wrote {counts["train"][0]} training scenes ({counts["train"][1]} '
          f'digits) and {counts["val"][0]} validation scenes '
          f'({counts["val"][1]} digits) to {out_dir}.')


if __name__ == '__main__':
    main()
