# RetinaNet 1x on COCO with a SOFT-Norm backbone, for every size. The SOFT
# authors published no detection settings; these are mmdet's PVT RetinaNet 1x
# ones (AdamW lr 1e-4, weight decay 1e-4, 12 epochs, steps at 8 and 11,
# 8 GPUs x 2), from mmdet's own bases: its RetinaNet, COCO detection data,
# 1x schedule and runtime. A size config sets `model.backbone.arch`, the
# checkpoint (`model.backbone.init_cfg.checkpoint`) and
# `model.neck.in_channels` from `soft_channels`.
_base_ = [
    './models/retinanet_softnorm_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    './schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
]
