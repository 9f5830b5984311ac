# RetinaNet 1x on COCO with a SOFT-Norm backbone, for every size. The SOFT
# authors published no detection settings; these are mmdet's PVT RetinaNet 1x
# ones (AdamW lr 1e-4, weight decay 1e-4, 12 epochs, steps at 8 and 11,
# 8 GPUs x 2). A size config sets `model.backbone.arch`, the checkpoint
# (`model.backbone.init_cfg.checkpoint`) and `model.neck.in_channels` from
# `soft_channels`.
_base_ = [
    'mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py', './soft_channels.py',
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
