# SOFT-Tiny trained from scratch on scikit-learn's handwritten digits
# (1,438 training / 359 validation 8 x 8 scans, upscaled to 32 x 32), the
# whole pipeline without any download:
#   python tools/dataset_converters/prepare_digits.py data/digits
#   tools/dist_train.sh configs/soft_tiny_digits.py 2
_base_ = ['mmpretrain::_base_/default_runtime.py', './_base_/custom_imports.py']

data_root = 'data/digits'
max_epochs = 30

model = dict(
    type='ImageClassifier',
    backbone=dict(type='SOFT', arch='tiny', img_size=32),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=10, in_channels=512,
              loss=dict(type='CrossEntropyLoss')))
data_preprocessor = dict(num_classes=10, mean=[60.0] * 3, std=[95.0] * 3,
                         to_rgb=False)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(32, 32), interpolation='bilinear'),
    dict(type='RandomCrop', crop_size=32, padding=2),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(32, 32), interpolation='bilinear'),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=32,
    num_workers=0,
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='train',
                 pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=64,
    num_workers=0,
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='val',
                 pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=1.0),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0,
                       custom_keys={'.pos_embed': dict(decay_mult=0.0),
                                    '.cls_token': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, begin=0, end=2,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', by_epoch=True, begin=2, end=max_epochs,
         T_max=max_epochs - 2, eta_min=1e-5, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(type='CheckpointHook', interval=5, max_keep_ckpts=2))
randomness = dict(seed=0)
