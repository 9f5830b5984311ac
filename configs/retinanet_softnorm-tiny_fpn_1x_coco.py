# RetinaNet 1x on COCO with a SOFT-Norm-Tiny backbone; the settings
# are in _base_/retinanet_softnorm_fpn_1x_coco.py.
_base_ = ['./_base_/retinanet_softnorm_fpn_1x_coco.py']

# ImageNet weights of the same size: a checkpoint of
# configs/softnorm_tiny_imagenet.py, or a converted released one
# (tools/model_converters/soft2mmsoft.py). Or override on the command line:
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
pretrained = 'checkpoints/softnorm_tiny_imagenet.pth'
model = dict(
    backbone=dict(arch='tiny-norm', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels={{_base_.soft_channels.tiny}}))
