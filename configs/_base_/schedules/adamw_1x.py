# mmdet's 1x schedule (12 epochs, steps at 8 and 11, 500-iteration warm-up)
# with the optimizer of mmdet's PVT RetinaNet and the PVT paper's Mask R-CNN 1x:
# AdamW, lr 1e-4 for 8 GPUs x 2 images, weight decay 1e-4.
_base_ = ['mmdet::_base_/schedules/schedule_1x.py']

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, weight_decay=1e-4))
