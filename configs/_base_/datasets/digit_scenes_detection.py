# The digit scenes (datasets/digit_scenes.py) as mmdet's COCO box data:
# whole canvases, no flip (a mirrored digit is another shape), 8 images per
# batch, loaded in the main process.
_base_ = ['mmdet::_base_/datasets/coco_detection.py', './digit_scenes.py']

data_root = 'data/digit_scenes/'

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=_base_.canvas[::-1], keep_ratio=True),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=_base_.canvas[::-1], keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    batch_sampler=None,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=_base_.classes),
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='img_dir/train/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=dict(classes=_base_.classes),
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='img_dir/val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
