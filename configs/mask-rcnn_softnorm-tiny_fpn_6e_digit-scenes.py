# Mask R-CNN with a SOFT-Norm-Tiny backbone on the digit scenes (scikit-learn's
# digit scans composed onto 96 x 96 canvases, no download), fine-tuned from
# the digits classifier of configs/softnorm_tiny_digits.py:
#   python tools/dataset_converters/prepare_digits.py data/digits
#   python tools/dataset_converters/prepare_digit_scenes.py data/digit_scenes
#   tools/dist_train.sh configs/softnorm_tiny_digits.py 2
#   tools/dist_train.sh configs/mask-rcnn_softnorm-tiny_fpn_6e_digit-scenes.py 2
# From scratch instead (no init_cfg):
#   --cfg-options model.backbone.init_cfg=None
# The model, optimizer and runtime bases are those of
# mask-rcnn_softnorm-tiny_fpn_1x_coco.py; the data is
# _base_/datasets/digit_scenes_instance.py, the checkpoint and pixel
# normalisation those of the classifier (_base_/digits_classifier.py). What
# differs from the COCO config, for a 10-class task on 96 px scenes: RPN
# anchors half the COCO size (16 px on the stride-4 level); neck, RPN and RoI
# heads 128 wide, a 256-wide box head, a 2-convolution mask head 128 wide, and
# fewer proposals and sampled RoIs (a scene holds at most a few digits);
# lr 4e-4 for a batch of 16 (as the RetinaNet digit-scenes config) with a
# short warm-up and cosine decay over 6 epochs (the 15-minute budget on two
# CPU processes).
_base_ = [
    './_base_/models/mask-rcnn_softnorm_fpn.py',
    './_base_/datasets/digit_scenes_instance.py',
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
    rpn_head=dict(in_channels=128, feat_channels=128,
                  anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=128),
        bbox_head=dict(in_channels=128, fc_out_channels=256,
                       num_classes=len(_base_.classes)),
        mask_roi_extractor=dict(out_channels=128),
        mask_head=dict(num_convs=2, in_channels=128, conv_out_channels=128,
                       num_classes=len(_base_.classes))),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=500, max_per_img=100),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(
        rpn=dict(nms_pre=300, max_per_img=50),
        rcnn=dict(max_per_img=20)))

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
