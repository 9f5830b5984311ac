# ImageNet-1K recipe of the SOFT papers (300 epochs, AdamW, batch 1024) in
# mmpretrain terms. The per-size configs set the arch and, for the larger
# models, the batch size and learning rate the authors used.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
    './custom_imports.py',
]

model = dict(
    type='ImageClassifier',
    backbone=dict(type='SOFT', arch='tiny', drop_path_rate=0.1),
    neck=None,
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02, bias=0.)),
    # Mixup 0.8 / CutMix 1.0, one of the two per batch (switch prob 0.5).
    train_cfg=dict(augments=[
        dict(type='Mixup', alpha=0.8),
        dict(type='CutMix', alpha=1.0),
    ]),
)

# Data: the base pipeline already is the authors' (bicubic RandomResizedCrop
# 224 with scale 0.08-1, flip, RandAugment m9 mstd 0.5 increasing, random
# erasing 0.25; eval: bicubic resize 256 + centre crop 224). timm ignores the
# 0.4 colour jitter when RandAugment is on, so there is none here either.
# ImageNet in mmpretrain's layout under data/imagenet (train/, val/, meta/).
train_dataloader = dict(batch_size=128, num_workers=8)
val_dataloader = dict(batch_size=128, num_workers=8)
test_dataloader = val_dataloader

# lr 1e-3 for a total batch of 1024 (8 GPUs x 128), weight decay 0.05 except
# on norms, biases, position embeddings and the class token; clip grad 1.0.
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05, eps=1e-8,
                   betas=(0.9, 0.999)),
    clip_grad=dict(max_norm=1.0),
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        flat_decay_mult=0.0,
        custom_keys={
            '.pos_embed': dict(decay_mult=0.0),
            '.cls_token': dict(decay_mult=0.0),
        }),
)
# 10 warm-up epochs from 1e-6, then cosine to 5e-5 at epoch 300.
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=10,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=5e-5, by_epoch=True, begin=10,
         end=300, T_max=290, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)

# Model EMA with decay 0.99996 per iteration; FP32 training (no AMP).
custom_hooks = [dict(type='EMAHook', momentum=4e-5, priority='ABOVE_NORMAL')]
default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3))

# The learning rate scales linearly when the total batch differs from 1024.
auto_scale_lr = dict(base_batch_size=1024)

# Log to TensorBoard as well (needs `pip install tensorboard`):
# visualizer = dict(vis_backends=[dict(type='LocalVisBackend'),
#                                 dict(type='TensorboardVisBackend')])
