"""Checks of a config's annotation files before a run builds its datasets.

mmdet reads a COCO annotation file with a bare ``json.load``, so a truncated
file fails with a ``JSONDecodeError`` that does not name it, and its
``CocoDataset`` leaves out boxes without area (a negative width, for
example) without a word. :func:`check_annotation_files` reads every JSON
annotation file a config's datasets and evaluators name, once: a file that
is not valid JSON is an error naming it, and the boxes mmdet would leave out
are counted and reported in one warning per file. ``tools/train.py`` and
``tools/test.py`` run it on rank 0 before the Runner is built. Label maps
of segmentation datasets are checked as they are loaded, by
:class:`mmsoft.engine.SegLabelCheckHook`.
"""
import json
import logging
import os.path as osp
from typing import Dict, Iterator, List, Optional, Sequence

from mmengine.config import Config
from mmengine.logging import print_log

SECTIONS = {
    'train': ('train_dataloader', ),
    'val': ('val_dataloader', 'val_evaluator'),
    'test': ('test_dataloader', 'test_evaluator'),
}
"""The config sections each kind of loop reads its datasets from."""


def _ann_files(node, data_root: Optional[str] = None) -> Iterator[str]:
    """Local paths of the ``ann_file`` entries in a dataloader or evaluator config."""
    if isinstance(node, (list, tuple)):
        for item in node:
            yield from _ann_files(item, data_root)
        return
    if not isinstance(node, dict):
        return
    data_root = node.get('data_root') or data_root
    ann_file = node.get('ann_file')
    if isinstance(ann_file, str) and ann_file and '://' not in ann_file:
        yield ann_file if osp.isabs(ann_file) else osp.join(data_root or '', ann_file)
    for key in ('dataset', 'datasets', 'metrics'):  # wrappers, evaluators
        yield from _ann_files(node.get(key), data_root)


def _dropped_boxes(content: dict) -> List[dict]:
    """The annotations mmdet's ``CocoDataset.parse_data_info`` leaves out.

    A box without area inside its image (``[x, y, w, h]`` clipped to the
    image), or with a width or height below 1 px or an ``area`` of 0 or
    less.
    """
    images = {image.get('id'): image for image in content.get('images') or []}
    dropped = []
    for ann in content.get('annotations') or []:
        box = ann.get('bbox') if isinstance(ann, dict) else None
        if not (isinstance(box, (list, tuple)) and len(box) == 4):
            continue
        x, y, w, h = box
        image = images.get(ann.get('image_id'), {})
        width, height = image.get('width', x + w), image.get('height', y + h)
        inter_w = max(0, min(x + w, width) - max(x, 0))
        inter_h = max(0, min(y + h, height) - max(y, 0))
        if inter_w * inter_h == 0 or ann.get('area', w * h) <= 0 or w < 1 or h < 1:
            dropped.append(ann)
    return dropped


def check_annotation_files(cfg: Config, loops: Sequence[str] = ('train', 'val')
                           ) -> Dict[str, int]:
    """Read the JSON annotation files of ``loops``; stop on a broken one.

    Args:
        cfg (Config): The run's config.
        loops (Sequence[str]): Which of ``'train'``, ``'val'`` and
            ``'test'`` the run has (see :data:`SECTIONS`). Defaults to
            ``('train', 'val')``.

    Returns:
        dict[str, int]: For each COCO-style file, how many boxes mmdet
        leaves out (each file with some is reported in one warning).

    Raises:
        ValueError: A file is not valid JSON (truncated, for example); the
            message names it.

    Examples:
        >>> from mmengine.config import Config
        >>> check_annotation_files(Config(dict(train_dataloader=dict(
        ...     dataset=dict(type='ImageNet', ann_file='meta/train.txt')))))
        {}
    """
    paths = dict.fromkeys(path for loop in loops for section in SECTIONS[loop]
                          for path in _ann_files(cfg.get(section)))
    counts = {}
    for path in paths:
        if not (path.endswith('.json') and osp.isfile(path)):
            continue  # other formats, and missing files, are the dataset's to report
        try:
            with open(path, encoding='utf-8') as f:
                content = json.load(f)
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f'Annotation file {path} is not valid JSON ({err}): it '
                             'is truncated or damaged. Download or write it '
                             'again.') from err
        if not (isinstance(content, dict) and 'annotations' in content):
            continue
        dropped = _dropped_boxes(content)
        counts[path] = len(dropped)
        if dropped:
            first = dropped[0]
            print_log(
                f'{path}: {len(dropped)} of {len(content["annotations"])} boxes have '
                'no area inside their image (a width or height below 1 px, or '
                'outside it) and are left out of training and evaluation; the '
                f'first is annotation id {first.get("id")} of image id '
                f'{first.get("image_id")}, bbox {first.get("bbox")}. Fix or remove '
                'them.', logger='current', level=logging.WARNING)
    return counts
