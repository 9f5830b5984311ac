# Mask R-CNN 1x on COCO with a SOFT-Norm backbone, for every size. The SOFT
# authors published no detection settings; these are the PVT ones mmdet and
# the PVT paper use for RetinaNet and Mask R-CNN 1x (AdamW lr 1e-4, weight
# decay 1e-4, 500-iteration warm-up, 12 epochs, steps at 8 and 11, 8 GPUs x 2).
# A size config sets `model.backbone.arch`, the checkpoint
# (`model.backbone.init_cfg.checkpoint`) and `model.neck.in_channels` from
# `soft_channels`.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', './soft_channels.py',
    './custom_imports.py'
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', prefix='backbone.')))
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, weight_decay=1e-4))
