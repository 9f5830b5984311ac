# UperNet with a SOFT-Norm-Tiny backbone on the digit scenes (scikit-learn's
# digit scans composed onto 96 x 96 canvases, no download; 11 classes:
# background and the ten digits), fine-tuned from the digits classifier of
# configs/softnorm_tiny_digits.py:
#   python tools/dataset_converters/prepare_digits.py data/digits
#   python tools/dataset_converters/prepare_digit_scenes.py data/digit_scenes
#   tools/dist_train.sh configs/softnorm_tiny_digits.py 2
#   tools/dist_train.sh configs/upernet_softnorm-tiny_96x96_10e_digit-scenes.py 2
# From scratch instead (no init_cfg):
#   --cfg-options model.backbone.init_cfg=None
# What differs from the ADE20K settings, for this task: the data, classes and
# whole 96 x 96 scenes instead of 512 x 512 crops (no resize, crop, flip or
# colour jitter: a mirrored digit is another shape); the classifier's pixel
# normalisation (grey scans, mean 60, std 95); decode head 128 wide and
# auxiliary head 64 wide instead of 512 and 256; background weighted 0.3 in
# both heads' losses (it holds 91% of the pixels; unweighted, the arg-max
# stayed background for all 6 epochs, mIoU 0.083; weighted 0.1, the digits
# were found (96% pixel recall) but drawn too fat, mIoU 0.65); lr 4e-4 for a
# batch of 16, 100 warm-up iterations, then poly decay; 10 epochs (the
# 15-minute budget on two CPU processes) instead of 160k iterations.
_base_ = ['./_base_/upernet_softnorm_512x512_160k_ade20k.py']

data_root = 'data/digit_scenes'
canvas = (96, 96)  # (height, width), as given to prepare_digit_scenes.py
crop_size = canvas
metainfo = dict(
    classes=('background', ) + tuple(str(d) for d in range(10)),
    palette=[[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25],
             [0, 130, 200], [245, 130, 48], [145, 30, 180], [70, 240, 240],
             [240, 50, 230], [210, 245, 60], [250, 190, 212]])
pretrained = 'work_dirs/softnorm_tiny_digits/epoch_30.pth'
max_epochs = 10
class_weight = [0.3] + [1.0] * 10

model = dict(
    data_preprocessor=dict(mean=[60.0] * 3, std=[95.0] * 3, bgr_to_rgb=False,
                           size=canvas),
    backbone=dict(arch='tiny-norm', img_size=canvas[0], drop_path_rate=0.1,
                  init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels={{_base_.soft_channels.tiny}}, channels=128,
                     num_classes=len(metainfo['classes']),
                     loss_decode=dict(class_weight=class_weight)),
    auxiliary_head=dict(in_channels={{_base_.soft_channels_s16.tiny}},
                        channels=64, num_classes=len(metainfo['classes']),
                        loss_decode=dict(class_weight=class_weight)))

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

optim_wrapper = dict(optimizer=dict(lr=4e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=0, end=max_epochs,
         by_epoch=True, convert_to_iter_based=True),
]
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs=max_epochs,
                 val_interval=2)
default_hooks = dict(
    logger=dict(interval=20, log_metric_by_epoch=True),
    checkpoint=dict(by_epoch=True, interval=2, max_keep_ckpts=1))
randomness = dict(seed=0)
