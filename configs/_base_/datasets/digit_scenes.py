# The digit scenes: scikit-learn's digit scans composed onto grey canvases by
# tools/dataset_converters/prepare_digit_scenes.py, one folder with mmdet's
# COCO layout and mmseg's label maps over the same images. The preparer reads
# the canvas and both class lists from this file, so its files and the
# dataset bases that inherit it (digit_scenes_detection.py,
# digit_scenes_instance.py, digit_scenes_segmentation.py) always agree.
canvas = (96, 96)  # (height, width): the preparer's default --canvas
# COCO categories, in order (category_id 1 is '0').
classes = tuple(str(d) for d in range(10))
# Label maps: 0 is the background, 1 + d the digit d.
seg_classes = ('background', ) + classes
