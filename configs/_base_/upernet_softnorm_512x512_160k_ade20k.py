# UperNet on ADE20K, 512 x 512 crops, 160k iterations, with a SOFT-Norm
# backbone, for every size. The SOFT authors published no segmentation
# settings; these are mmseg's Swin UperNet ones (AdamW lr 6e-5, weight decay
# 0.01 except on norms and position embeddings, linear warm-up 1500 iterations
# then poly, 8 GPUs x 2), from mmseg's own bases: its UperNet, ADE20K data,
# runtime and 160k schedule. A size config sets `model.backbone.arch`, the
# checkpoint (`model.backbone.init_cfg.checkpoint`) and the heads'
# `in_channels` from `soft_channels` and `soft_channels_s16`.
_base_ = [
    './models/upernet_softnorm.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/default_runtime.py',
    './schedules/adamw_poly_160k.py',
]

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    decode_head=dict(num_classes=150),
    auxiliary_head=dict(num_classes=150))
# 8 GPUs x 2 images.
train_dataloader = dict(batch_size=2)
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
