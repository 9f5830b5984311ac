# SOFT-Tiny on ImageNet-1K, 8 GPUs x 128 images, 300 epochs.
_base_ = ['./_base_/soft_imagenet_recipe.py']
model = dict(backbone=dict(arch='tiny'))
