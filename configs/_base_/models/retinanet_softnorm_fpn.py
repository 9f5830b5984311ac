# mmdet's RetinaNet with a SOFT-Norm backbone (the feature maps of all four
# stages), for every size and dataset. A config sets `model.backbone.arch`,
# the checkpoint (`model.backbone.init_cfg.checkpoint`) and
# `model.neck.in_channels` from `soft_channels`.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    '../soft_channels.py',
    '../custom_imports.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', prefix='backbone.')))
