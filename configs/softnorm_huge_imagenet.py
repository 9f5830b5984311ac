# SOFT-Norm-Huge on ImageNet-1K: 8 GPUs x 32 images, lr 2.7e-4 for that total
# batch of 256 (the authors' setting), 300 epochs.
_base_ = ['./_base_/soft_imagenet_recipe.py']
model = dict(backbone=dict(arch='huge-norm'))
train_dataloader = dict(batch_size=32)
val_dataloader = dict(batch_size=32)
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr=2.7e-4))
auto_scale_lr = dict(base_batch_size=256)
# Warm-up from 1e-6 as in the recipe, then cosine to 5e-5.
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 2.7e-4, by_epoch=True, begin=0,
         end=10, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=5e-5, by_epoch=True, begin=10,
         end=300, T_max=290, convert_to_iter_based=True),
]
