# Mask R-CNN 1x on COCO with a SOFT-Norm-Medium backbone. The SOFT authors
# published no detection settings; these are the PVT ones mmdet and the PVT
# paper use for RetinaNet and Mask R-CNN 1x (AdamW lr 1e-4, weight decay 1e-4,
# 500-iteration warm-up, 12 epochs, steps at 8 and 11, 8 GPUs x 2).
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']
custom_imports = dict(imports=['mmsoft'], allow_failed_imports=False)

# ImageNet weights of the same size: a checkpoint of
# configs/softnorm_medium_imagenet.py, or a converted released one
# (tools/model_converters/soft2mmsoft.py). Or override on the command line:
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
pretrained = 'checkpoints/softnorm_medium_imagenet.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='SOFT',
        arch='medium-norm',
        out_type='featmap',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained,
                      prefix='backbone.')),
    neck=dict(in_channels=[64, 128, 288, 512]))
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, weight_decay=1e-4))
