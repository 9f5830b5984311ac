# mmseg's UperNet (with its auxiliary FCN head on the stride-16 stage) and a
# SOFT-Norm backbone (the feature maps of all four stages), for every size and
# dataset. A config sets `model.backbone.arch`, the checkpoint
# (`model.backbone.init_cfg.checkpoint`), the heads' `in_channels` from
# `soft_channels` and `soft_channels_s16`, and `num_classes`.
_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    '../soft_channels.py',
    '../custom_imports.py',
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', prefix='backbone.')))
