# SOFT-Norm-Large on ImageNet-1K: the settings of soft_large_imagenet.py with the
# normalised attention.
_base_ = ['./soft_large_imagenet.py']
model = dict(backbone=dict(arch='large-norm'))
