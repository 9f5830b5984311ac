# SOFT-Norm-Huge on ImageNet-1K: the settings of soft_huge_imagenet.py with the
# normalised attention.
_base_ = ['./soft_huge_imagenet.py']
model = dict(backbone=dict(arch='huge-norm'))
