# Mask R-CNN 1x on COCO with a SOFT-Norm backbone, for every size. The SOFT
# authors published no detection settings; these are the PVT ones mmdet and
# the PVT paper use for RetinaNet and Mask R-CNN 1x (AdamW lr 1e-4, weight
# decay 1e-4, 500-iteration warm-up, 12 epochs, steps at 8 and 11, 8 GPUs x 2),
# from mmdet's own bases: its Mask R-CNN, COCO instance data, 1x schedule and
# runtime. A size config sets `model.backbone.arch`, the checkpoint
# (`model.backbone.init_cfg.checkpoint`) and `model.neck.in_channels` from
# `soft_channels`.
_base_ = [
    './models/mask-rcnn_softnorm_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
