# Mask R-CNN 1x on COCO with a SOFT-Norm-Large backbone. The SOFT authors
# published no detection settings; these are mmdet's Swin Mask R-CNN 1x ones
# (AdamW lr 1e-4, weight decay 0.05 except on norms and position embeddings,
# 1000-iteration warm-up, 12 epochs, steps at 8 and 11, 8 GPUs x 2).
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']
custom_imports = dict(imports=['mmsoft'], allow_failed_imports=False)

# ImageNet weights of the same size; override with
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
pretrained = 'checkpoints/softnorm_large_imagenet.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        arch='large-norm',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained,
                      prefix='backbone.')),
    neck=dict(in_channels=[64, 128, 320, 512]))
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        custom_keys={
            'norm': dict(decay_mult=0.),
            '.pos_embeds': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
        }))
