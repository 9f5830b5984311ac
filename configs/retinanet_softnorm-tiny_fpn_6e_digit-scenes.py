# RetinaNet with a SOFT-Norm-Tiny backbone on the digit scenes (scikit-learn's
# digit scans composed onto 96 x 96 canvases, no download), fine-tuned from
# the digits classifier of configs/softnorm_tiny_digits.py:
#   python tools/dataset_converters/prepare_digits.py data/digits
#   python tools/dataset_converters/prepare_digit_scenes.py data/digit_scenes
#   tools/dist_train.sh configs/softnorm_tiny_digits.py 2
#   tools/dist_train.sh configs/retinanet_softnorm-tiny_fpn_6e_digit-scenes.py 2
# From scratch instead (no init_cfg):
#   --cfg-options model.backbone.init_cfg=None
# The model, optimizer and runtime bases are those of
# retinanet_softnorm-tiny_fpn_1x_coco.py; the data is
# _base_/datasets/digit_scenes_detection.py, the checkpoint and pixel
# normalisation those of the classifier (_base_/digits_classifier.py). What
# differs from the COCO config, for a 10-class task on 96 px scenes: anchors
# half the COCO size (16-25 px on the stride-8 level, for 20-40 px digits);
# neck and head 128 wide with 2 convolutions instead of 256 and 4 (the head
# would otherwise cost 3x the backbone at this size); lr 4e-4 for a batch of
# 16 with a short warm-up and cosine decay over 6 epochs (the 15-minute
# budget on two CPU processes).
_base_ = [
    './_base_/models/retinanet_softnorm_fpn.py',
    './_base_/datasets/digit_scenes_detection.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
    './_base_/digits_classifier.py',
]

max_epochs = 6
model = dict(
    data_preprocessor=_base_.pixel_norm,
    backbone=dict(arch='tiny-norm', img_size=_base_.canvas[0],
                  init_cfg=dict(checkpoint=_base_.pretrained)),
    neck=dict(in_channels=_base_.soft_channels.tiny, out_channels=128),
    bbox_head=dict(
        num_classes=len(_base_.classes),
        in_channels=128,
        feat_channels=128,
        stacked_convs=2,
        anchor_generator=dict(octave_base_scale=2)),
    test_cfg=dict(max_per_img=20))

optim_wrapper = dict(optimizer=dict(lr=4e-4), clip_grad=dict(max_norm=10.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=0, end=max_epochs,
         T_max=max_epochs, eta_min=1e-6, convert_to_iter_based=True),
]
train_cfg = dict(max_epochs=max_epochs, val_interval=2)
default_hooks = dict(
    logger=dict(interval=20),
    checkpoint=dict(interval=2, max_keep_ckpts=1))
randomness = dict(seed=0)
