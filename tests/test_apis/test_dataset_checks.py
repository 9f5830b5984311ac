"""Annotation files are read once before a run: broken JSON named, dropped boxes counted."""
import json
from pathlib import Path

import pytest
from helpers.logs import logged_messages
from helpers.tiny_datasets import make_coco
from mmengine.config import Config

from mmsoft.apis import check_annotation_files

REPO = Path(__file__).resolve().parents[2]


def coco_config(root: Path) -> Config:
    cfg = Config.fromfile(REPO / 'configs' / 'retinanet_softnorm-tiny_fpn_1x_coco.py')
    for split in ('train', 'val', 'test'):
        cfg.merge_from_dict({f'{split}_dataloader.dataset.data_root': f'{root}/'})
    for split in ('val', 'test'):
        cfg.merge_from_dict({
            f'{split}_evaluator.ann_file': f'{root}/annotations/instances_val2017.json'})
    return cfg


def test_boxes_mmdet_drops_are_counted_and_reported_once(tmp_path):
    from mmdet.datasets import CocoDataset
    root = make_coco(tmp_path / 'coco')
    path = root / 'annotations' / 'instances_train2017.json'
    content = json.loads(path.read_text())
    content['annotations'][1]['bbox'] = [60, 40, -50, 45]   # a negative width
    path.write_text(json.dumps(content))
    with logged_messages() as messages:
        counts = check_annotation_files(coco_config(root))
    assert counts == {str(path): 1, str(path).replace('train', 'val'): 0}
    warned = [m for m in messages if 'left out' in m]
    assert len(warned) == 1
    assert warned[0].startswith(f'{path}: 1 of 4 boxes have no area inside their '
                                'image') and 'annotation id 2 of image id 1' in warned[0]
    # What the warning claims: mmdet's dataset leaves the box out.
    dataset = CocoDataset(data_root=str(root), ann_file=str(path), pipeline=[],
                          data_prefix=dict(img='train2017/'))
    assert sum(len(dataset.get_data_info(i)['instances'])
               for i in range(len(dataset))) == 3


def test_a_truncated_annotation_file_is_named(tmp_path):
    root = make_coco(tmp_path / 'coco')
    path = root / 'annotations' / 'instances_val2017.json'
    path.write_text(path.read_text()[:300])
    with pytest.raises(ValueError, match=rf'Annotation file {path} is not valid JSON '
                       r'\(.*\): it is truncated or damaged'):
        check_annotation_files(coco_config(root), loops=('test', ))
