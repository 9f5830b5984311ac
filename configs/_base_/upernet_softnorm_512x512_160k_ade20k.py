# UperNet on ADE20K, 512 x 512 crops, 160k iterations, with a SOFT-Norm
# backbone, for every size. The SOFT authors published no segmentation
# settings; these are mmseg's Swin UperNet ones (AdamW lr 6e-5, weight decay
# 0.01 except on norms and position embeddings, linear warm-up 1500 iterations
# then poly, 8 GPUs x 2). A size config sets `model.backbone.arch`, the
# checkpoint (`model.backbone.init_cfg.checkpoint`) and the heads'
# `in_channels` from `soft_channels` and `soft_channels_s16`.
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    './soft_channels.py', './custom_imports.py'
]

model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', prefix='backbone.')),
    decode_head=dict(num_classes=150),
    auxiliary_head=dict(num_classes=150))
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        custom_keys={
            'norm': dict(decay_mult=0.),
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
        }))
