"""Tiny on-disk datasets in the real ImageNet, COCO and ADE20K layouts."""
import json
from pathlib import Path

import numpy as np
from PIL import Image


def _image(path: Path, height: int, width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(path)


def make_imagenet(root: Path, per_split: int = 2) -> Path:
    """``root/{train,val}/<wnid>/*.JPEG`` with ``root/meta/{train,val}.txt``."""
    (root / 'meta').mkdir(parents=True, exist_ok=True)
    for split in ('train', 'val'):
        lines = []
        for i in range(per_split):
            rel = f'n0000000{i % 2}/img_{i}.JPEG'
            _image(root / split / rel, 80, 96, seed=i)
            lines.append(f'{rel} {i % 2}')
        (root / 'meta' / f'{split}.txt').write_text('\n'.join(lines) + '\n')
    return root


def make_coco(root: Path, per_split: int = 2) -> Path:
    """``root/{train,val}2017/*.jpg`` and ``root/annotations/instances_*.json``.

    The annotation files list all 80 COCO categories, as the real ones do, so
    CocoMetric can map any label an untrained detector predicts; the boxes
    are of the first two (person, bicycle).
    """
    from mmdet.datasets import CocoDataset
    categories = [dict(id=i + 1, name=name)
                  for i, name in enumerate(CocoDataset.METAINFO['classes'])]
    (root / 'annotations').mkdir(parents=True, exist_ok=True)
    for split in ('train2017', 'val2017'):
        images, annotations = [], []
        for i in range(per_split):
            name = f'{i:012d}.jpg'
            _image(root / split / name, 96, 128, seed=10 + i)
            images.append(dict(id=i + 1, file_name=name, height=96, width=128))
            for j, (x, y, w, h) in enumerate([(10, 12, 40, 30), (60, 40, 50, 45)]):
                annotations.append(dict(
                    id=len(annotations) + 1, image_id=i + 1, category_id=1 + j,
                    bbox=[x, y, w, h], area=w * h, iscrowd=0,
                    segmentation=[[x, y, x + w, y, x + w, y + h, x, y + h]]))
        (root / 'annotations' / f'instances_{split}.json').write_text(json.dumps(
            dict(images=images, annotations=annotations, categories=categories)))
    return root


def make_ade20k(root: Path, per_split: int = 2) -> Path:
    """``root/images/{training,validation}/*.jpg`` and ``root/annotations/...png``."""
    for split in ('training', 'validation'):
        for i in range(per_split):
            _image(root / 'images' / split / f'ADE_{i}.jpg', 72, 96, seed=20 + i)
            labels = np.zeros((72, 96), dtype=np.uint8)
            labels[10:40, 20:70] = 1 + i
            labels[40:, :] = 5
            path = root / 'annotations' / split / f'ADE_{i}.png'
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(labels).save(path)
    return root
