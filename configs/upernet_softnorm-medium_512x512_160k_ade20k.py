# UperNet on ADE20K, 512 x 512 crops, 160k iterations, SOFT-Norm-Medium
# backbone; the settings are in _base_/upernet_softnorm_512x512_160k_ade20k.py.
_base_ = ['./_base_/upernet_softnorm_512x512_160k_ade20k.py']

# ImageNet weights of the same size; override with
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
pretrained = 'checkpoints/softnorm_medium_imagenet.pth'
model = dict(
    backbone=dict(arch='medium-norm', init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels={{_base_.soft_channels.medium}}),
    auxiliary_head=dict(in_channels={{_base_.soft_channels_s16.medium}}))
