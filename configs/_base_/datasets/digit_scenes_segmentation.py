# The digit scenes (datasets/digit_scenes.py) as mmseg data: the label maps
# (background and the ten digits), whole canvases instead of crops (no
# resize, crop, flip or colour jitter: a mirrored digit is another shape),
# 8 images per batch, loaded in the main process.
_base_ = ['mmseg::_base_/datasets/ade20k.py', './digit_scenes.py']

data_root = 'data/digit_scenes'
crop_size = _base_.canvas
metainfo = dict(
    classes=_base_.seg_classes,
    palette=[[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25],
             [0, 130, 200], [245, 130, 48], [145, 30, 180], [70, 240, 240],
             [240, 50, 230], [210, 245, 60], [250, 190, 212]])

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs'),
]
test_pipeline = train_pipeline
dataset = dict(type='BaseSegDataset', data_root=data_root, metainfo=metainfo,
               img_suffix='.png', seg_map_suffix='.png')
train_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        _delete_=True,
        data_prefix=dict(img_path='img_dir/train', seg_map_path='ann_dir/train'),
        pipeline=train_pipeline,
        **dataset))
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        _delete_=True,
        data_prefix=dict(img_path='img_dir/val', seg_map_path='ann_dir/val'),
        pipeline=test_pipeline,
        **dataset))
test_dataloader = val_dataloader
