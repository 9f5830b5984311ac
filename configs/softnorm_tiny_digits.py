# SOFT-Norm-Tiny trained from scratch on scikit-learn's handwritten digits,
# the same recipe as configs/soft_tiny_digits.py. Its checkpoint is the
# pretrained backbone of the digit-scene detection and segmentation configs
# (*_digit-scenes.py): the SOFT papers use SOFT-Norm for dense tasks, and so
# these inherit the COCO and ADE20K SOFT-Norm configs unchanged in backbone.
#   python tools/dataset_converters/prepare_digits.py data/digits
#   tools/dist_train.sh configs/softnorm_tiny_digits.py 2
_base_ = ['./soft_tiny_digits.py']

model = dict(backbone=dict(arch='tiny-norm'))
