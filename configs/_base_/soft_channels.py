# Output channels of the four SOFT stages (strides 4, 8, 16, 32) of each size,
# the same for SOFT and SOFT-Norm (SOFT.arch_zoo), for the neck or decode head:
#   neck=dict(in_channels={{_base_.soft_channels.tiny}})
# and the stride-16 stage alone, for heads that read only it (UperNet's
# auxiliary FCN head):
#   auxiliary_head=dict(in_channels={{_base_.soft_channels_s16.tiny}})
soft_channels = dict(
    tiny=[64, 128, 320, 512],
    small=[64, 128, 320, 512],
    medium=[64, 128, 288, 512],
    large=[64, 128, 320, 512],
    huge=[64, 128, 352, 512])
soft_channels_s16 = {size: channels[2] for size, channels in soft_channels.items()}
