"""tools/dataset_converters/prepare_digit_scenes.py: scenes for detection and segmentation.

The scenes are made once per module at a small size; the checks read the
written files the way mmdet and mmseg do, and compare them with the scans.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.tools import load_tool
from PIL import Image
from pycocotools import mask as mask_utils
from sklearn.datasets import load_digits

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'dataset_converters' / 'prepare_digit_scenes.py'


scenes = load_tool(SCRIPT)
digits_tool = load_tool(SCRIPT.with_name('prepare_digits.py'))
SETTINGS = dict(seed=3, canvas=(64, 80), per_image=(2, 3), digit_size=(16, 28),
                max_iou=0.1, num_train=24, num_val=12)


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp('scenes') / 'data'
    counts = scenes.prepare_digit_scenes(str(root), **SETTINGS)
    return root, counts


def coco(root: Path, split: str) -> dict:
    return json.loads((root / 'annotations' / f'instances_{split}.json').read_text())


def test_counts_and_files(written):
    root, counts = written
    for split, num in (('train', 24), ('val', 12)):
        data = coco(root, split)
        assert len(data['images']) == num
        assert counts[split] == (num, len(data['annotations']))
        assert [c['name'] for c in data['categories']] == [str(d) for d in range(10)]
        names = sorted(p.name for p in (root / 'img_dir' / split).glob('*.png'))
        assert names == sorted(i['file_name'] for i in data['images'])
        assert names == sorted(p.name for p in (root / 'ann_dir' / split).glob('*.png'))
        per_image = np.bincount([a['image_id'] for a in data['annotations']],
                                minlength=num + 1)[1:]
        assert per_image.min() >= 2 and per_image.max() <= 3
        for image in data['images']:
            assert (image['height'], image['width']) == (64, 80)


def test_splits_are_disjoint_at_the_scan_level(written):
    root, _ = written
    split = digits_tool.split_indices(load_digits().target)
    labels = load_digits().target
    for name in ('train', 'val'):
        anns = coco(root, name)['annotations']
        used = {a['scan_index'] for a in anns}
        assert used <= set(split[name].tolist())
        assert all(a['category_id'] == labels[a['scan_index']] + 1 for a in anns)
    train = {a['scan_index'] for a in coco(root, 'train')['annotations']}
    val = {a['scan_index'] for a in coco(root, 'val')['annotations']}
    assert not train & val


def test_boxes_are_tight_masks_match_the_label_pngs_and_pixels(written):
    root, _ = written
    for split in ('train', 'val'):
        data = coco(root, split)
        by_image = {}
        for ann in data['annotations']:
            by_image.setdefault(ann['image_id'], []).append(ann)
        for image in data['images']:
            labels = np.asarray(Image.open(root / 'ann_dir' / split / image['file_name']))
            pixels = np.asarray(Image.open(root / 'img_dir' / split / image['file_name']))
            rebuilt = np.zeros_like(labels)
            boxes = []
            for ann in by_image[image['id']]:
                mask = mask_utils.decode(ann['segmentation']).astype(bool)
                assert mask.shape == (64, 80) and ann['iscrowd'] == 0
                assert ann['area'] == mask.sum() > 0
                assert not rebuilt[mask].any(), 'two digits share pixels'
                rebuilt[mask] = ann['category_id']
                ys, xs = np.nonzero(mask)
                x, y, w, h = ann['bbox']
                assert [x, y, x + w - 1, y + h - 1] == [xs.min(), ys.min(),
                                                        xs.max(), ys.max()]
                assert 0 <= x and x + w <= 80 and 0 <= y and y + h <= 64
                assert (pixels[mask] >= scenes.MASK_THRESHOLD).all()
                boxes.append([x, y, x + w - 1, y + h - 1])
            np.testing.assert_array_equal(rebuilt, labels)
            for i, a in enumerate(boxes):
                for b in boxes[i + 1:]:
                    assert scenes.box_iou(a, b) <= 0.1


def test_a_digit_is_its_scan_upscaled(written):
    root, _ = written
    images = (load_digits().images * (255.0 / 16.0)).round().astype(np.uint8)
    data = coco(root, 'val')
    ann = data['annotations'][0]
    image = data['images'][ann['image_id'] - 1]
    pixels = np.asarray(Image.open(root / 'img_dir' / 'val' / image['file_name']))
    mask = mask_utils.decode(ann['segmentation']).astype(bool)
    # The scan, upscaled to some size and placed somewhere, gives this mask.
    found = False
    for size in range(16, 29):
        patch = np.asarray(Image.fromarray(images[ann['scan_index']]).resize(
            (size, size), Image.BILINEAR)) >= scenes.MASK_THRESHOLD
        ys, xs = np.nonzero(patch)
        y0, x0 = ann['bbox'][1] - ys.min(), ann['bbox'][0] - xs.min()
        if y0 < 0 or x0 < 0 or y0 + size > 64 or x0 + size > 80:
            continue
        placed = np.zeros_like(mask)
        placed[y0:y0 + size, x0:x0 + size] = patch
        if np.array_equal(placed, mask):
            found = (pixels[mask] >= scenes.MASK_THRESHOLD).all()
    assert found


def test_same_seed_same_files_other_seed_or_canvas_other_valid_set(written, tmp_path):
    root, _ = written
    small = dict(SETTINGS, num_train=3, num_val=2)
    scenes.prepare_digit_scenes(str(tmp_path / 'a'), **small)
    scenes.prepare_digit_scenes(str(tmp_path / 'b'), **small)
    scenes.prepare_digit_scenes(str(tmp_path / 'c'), **dict(small, seed=4))
    scenes.prepare_digit_scenes(str(tmp_path / 'd'), **dict(small, canvas=(96, 96)))
    first = coco(tmp_path / 'a', 'val')
    assert coco(tmp_path / 'b', 'val') == first
    assert (tmp_path / 'a/img_dir/val/00001.png').read_bytes() == (
        tmp_path / 'b/img_dir/val/00001.png').read_bytes()
    assert coco(tmp_path / 'c', 'val')['annotations'] != first['annotations']
    other = coco(tmp_path / 'd', 'val')
    assert {(i['height'], i['width']) for i in other['images']} == {(96, 96)}
    assert all(2 <= len([a for a in other['annotations'] if a['image_id'] == i['id']])
               <= 3 for i in other['images'])


def test_mmdet_and_mmseg_read_it(written):
    from mmdet.datasets import CocoDataset
    from mmengine.registry import DefaultScope
    from mmseg.datasets import BaseSegDataset
    root, _ = written
    with DefaultScope.overwrite_default_scope('mmdet'):
        dataset = CocoDataset(
            data_root=str(root), ann_file='annotations/instances_val.json',
            data_prefix=dict(img='img_dir/val/'), metainfo=dict(classes=scenes.CLASSES),
            pipeline=[dict(type='LoadImageFromFile'),
                      dict(type='LoadAnnotations', with_bbox=True, with_mask=True)])
        item = dataset[0]
    assert len(dataset) == 12
    assert item['img'].shape == (64, 80, 3)
    assert len(item['gt_bboxes']) == len(item['gt_masks']) >= 2
    labels = np.asarray(Image.open(root / 'ann_dir' / 'val' / '00000.png'))
    union = item['gt_masks'].to_ndarray().any(axis=0)
    np.testing.assert_array_equal(union, labels > 0)

    with DefaultScope.overwrite_default_scope('mmseg'):
        seg = BaseSegDataset(
            data_root=str(root), data_prefix=dict(img_path='img_dir/val',
                                                   seg_map_path='ann_dir/val'),
            img_suffix='.png', seg_map_suffix='.png',
            metainfo=dict(classes=scenes.SEG_CLASSES),
            pipeline=[dict(type='LoadImageFromFile'), dict(type='LoadAnnotations')])
        labels_read = seg[0]['gt_seg_map']
    assert len(seg) == 12 and seg.metainfo['classes'][0] == 'background'
    np.testing.assert_array_equal(labels_read, labels)


@pytest.mark.parametrize('settings,message', [
    (dict(canvas=(32, 32), digit_size=(20, 40)), 'does not fit the 32 x 32 canvas'),
    (dict(per_image=(3, 2)), 'need 1 <= MIN <= MAX'),
    (dict(digit_size=(4, 20)), 'scans are 8 x 8'),
    (dict(max_iou=1.0), 'must be in'),
    (dict(num_val=0), '--num-val must be at least 1'),
])
def test_bad_settings_are_named(settings, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        scenes.prepare_digit_scenes(str(tmp_path), **settings)
    assert not any(tmp_path.iterdir())


def test_a_crowded_canvas_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match='enlarge --canvas'):
        scenes.prepare_digit_scenes(str(tmp_path), canvas=(40, 40), digit_size=(30, 40),
                                    per_image=(4, 4), max_iou=0.0, num_train=1,
                                    num_val=1)


def test_command_line_writes_once_and_guards_other_settings(tmp_path):
    out = tmp_path / 'scenes'
    cmd = [sys.executable, str(SCRIPT), str(out), '--num-train', '2', '--num-val', '1',
           '--canvas', '64', '64', '--digit-size', '16', '24']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'Wrote 2 training scenes' in result.stdout
    assert 'and 1 validation scenes' in result.stdout
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert 'already holds these digit scenes' in again.stdout
    other = subprocess.run(cmd + ['--seed', '1'], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert other.returncode != 0
    assert 'made with other settings' in other.stderr


@pytest.mark.slow
def test_classifier_checkpoint_to_dense_model_with_the_launchers(written, tmp_path):
    """A digits classifier's backbone loads whole into RetinaNet, which trains
    with dist_train.sh (2 processes) and is evaluated with dist_test.sh.

    The learning rate is 0, so the fine-tuned checkpoint must still hold every
    weight of the classifier's backbone (position embeddings resized).
    """
    import os

    import torch
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS

    import mmsoft  # noqa: F401
    root, _ = written
    cls_cfg = Config.fromfile(REPO / 'configs' / 'softnorm_tiny_digits.py')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        classifier = MODELS.build(cls_cfg.model)
    classifier.init_weights()
    source = {k: v.clone() for k, v in classifier.state_dict().items()}
    torch.save(dict(state_dict=source, meta=dict()), tmp_path / 'classifier.pth')

    config = tmp_path / 'retinanet_scenes.py'
    config.write_text(f"""_base_ = ['{REPO / 'configs' / 'retinanet_softnorm-tiny_fpn_6e_digit-scenes.py'}']
data_root = '{root}/'
canvas = (64, 80)
model = dict(backbone=dict(init_cfg=dict(checkpoint='{tmp_path / 'classifier.pth'}')))
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
optim_wrapper = dict(optimizer=dict(lr=0.0))
param_scheduler = None  # the cosine schedule's eta_min would move the weights
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1))
""")
    env = {**os.environ, 'PORT': '29741', 'OMP_NUM_THREADS': '1'}
    work = tmp_path / 'work'
    result = subprocess.run(['tools/dist_train.sh', str(config), '2', '--work-dir',
                             str(work)], cwd=REPO, capture_output=True, text=True,
                            timeout=600, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    tuned = torch.load(work / 'epoch_1.pth', weights_only=True)['state_dict']
    backbone = {k: v for k, v in tuned.items() if k.startswith('backbone.')}
    assert f'Loaded {len(backbone)} weights from {tmp_path / "classifier.pth"}' in log
    for key, value in backbone.items():
        if 'running_' in key or 'num_batches_tracked' in key:
            continue  # BatchNorm statistics follow the scenes even at lr 0
        if key.endswith('.pos_embed'):
            assert value.shape != source[key].shape, key  # resized to the canvas
            continue
        torch.testing.assert_close(value, source[key], rtol=0, atol=0, msg=key)

    env['PORT'] = '29742'
    result = subprocess.run(['tools/dist_test.sh', str(config), str(work / 'epoch_1.pth'),
                             '2', '--work-dir', str(tmp_path / 'test')], cwd=REPO,
                            capture_output=True, text=True, timeout=600, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert 'Evaluating bbox' in log and 'Epoch(test)' in log
