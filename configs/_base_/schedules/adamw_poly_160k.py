# mmseg's 160k-iteration schedule with the optimizer and learning rate of
# mmseg's Swin UperNet: AdamW, lr 6e-5 for 8 GPUs x 2 images, weight decay
# 0.01 except on norms, position embeddings and the class token, linear
# warm-up over 1500 iterations, then poly decay.
_base_ = ['mmseg::_base_/schedules/schedule_160k.py']

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        custom_keys={
            'norm': dict(decay_mult=0.),
            '.pos_embed': dict(decay_mult=0.),
            '.cls_token': dict(decay_mult=0.),
        }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000,
         by_epoch=False),
]
