# What the digit-scene configs (*_digit-scenes.py) take from the SOFT-Norm-Tiny
# digits classifier of configs/softnorm_tiny_digits.py: its checkpoint (where
# `tools/dist_train.sh configs/softnorm_tiny_digits.py 2` writes its last
# epoch) and its pixel normalisation (grey scans: mean 60, std 95, no channel
# swap), so the pretrained features see what they were trained on. Start from
# another checkpoint with
#   --cfg-options model.backbone.init_cfg.checkpoint=PATH
# or from scratch with
#   --cfg-options model.backbone.init_cfg=None
pretrained = 'work_dirs/softnorm_tiny_digits/epoch_30.pth'
pixel_norm = dict(mean=[60.0] * 3, std=[95.0] * 3, bgr_to_rgb=False)
