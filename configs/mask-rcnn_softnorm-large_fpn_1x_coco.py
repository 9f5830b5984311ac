# Mask R-CNN 1x on COCO with a SOFT-Norm-Large backbone; the settings
# are in _base_/mask-rcnn_softnorm_fpn_1x_coco.py.
_base_ = ['./_base_/mask-rcnn_softnorm_fpn_1x_coco.py']

# ImageNet weights of the same size: a checkpoint of
# configs/softnorm_large_imagenet.py, or a converted released one
# (tools/model_converters/soft2mmsoft.py). Or override on the command line:
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
pretrained = 'checkpoints/softnorm_large_imagenet.pth'
model = dict(
    backbone=dict(arch='large-norm', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels={{_base_.soft_channels.large}}))
