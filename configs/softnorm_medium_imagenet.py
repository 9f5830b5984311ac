# SOFT-Norm-Medium on ImageNet-1K: the settings of soft_medium_imagenet.py with the
# normalised attention.
_base_ = ['./soft_medium_imagenet.py']
model = dict(backbone=dict(arch='medium-norm'))
