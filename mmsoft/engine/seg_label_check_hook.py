"""Stop at the first label map whose values the segmentor has no class for.

A label outside a segmentor's classes that is not its ignore index ends
training deep in the loss (``IndexError: Target 200 is out of bounds``)
without naming the file, and is silently left out of mIoU in evaluation.
:class:`SegLabelCheckHook` looks at every batch before the model does.
"""
from typing import Optional, Tuple

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper


class SegLabelCheckHook(Hook):
    """Check the label maps of each batch against the segmentor's classes.

    Before every train, val and test iteration, a label map (``gt_sem_seg``
    of a batch's data samples) holding a value that is neither one of the
    decode head's ``num_classes`` nor its ``ignore_index`` is an error
    naming the file (``seg_map_path``) and the values as written in it. A
    model without a ``decode_head`` (not an mmseg segmentor) is left alone.
    ``tools/train.py`` and ``tools/test.py`` register it.

    Examples:
        >>> from mmsoft.engine import SegLabelCheckHook
        >>> SegLabelCheckHook().priority
        'NORMAL'
    """

    def __init__(self) -> None:
        self._classes: Optional[Tuple[int, int]] = None

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check(runner, data_batch)

    def before_val_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check(runner, data_batch)

    def before_test_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._check(runner, data_batch)

    def _head_classes(self, runner) -> Tuple[int, int]:
        """(num_classes, ignore_index) of the decode head; (0, 0) without one."""
        if self._classes is None:
            model = runner.model.module if is_model_wrapper(runner.model) \
                else runner.model
            head = getattr(model, 'decode_head', None)
            self._classes = (int(getattr(head, 'num_classes', 0)),
                             int(getattr(head, 'ignore_index', 255)))
        return self._classes

    def _check(self, runner, data_batch) -> None:
        samples = data_batch.get('data_samples') if isinstance(data_batch, dict) \
            else None
        if not samples:
            return
        num_classes, ignore = self._head_classes(runner)
        if not num_classes:
            return
        for sample in samples:
            seg = getattr(sample, 'gt_sem_seg', None)
            if seg is None:
                continue
            labels = seg.data
            bad = (labels != ignore) & ((labels < 0) | (labels >= num_classes))
            if not bool(bad.any()):
                continue
            values = torch.unique(labels[bad]).tolist()
            reduced = bool(sample.metainfo.get('reduce_zero_label', False))
            written = [v + 1 for v in values] if reduced else values
            how = (' (reduce_zero_label subtracts 1 from the values in the file)'
                   if reduced else '')
            raise ValueError(
                f'Label map {sample.metainfo.get("seg_map_path", "(unnamed)")} holds '
                f'values {written[:10]} that are neither one of the {num_classes} '
                f'classes 0 to {num_classes - 1}{how} nor the ignore index {ignore}. '
                f'Fix the annotation, set those pixels to {ignore} to '
                "ignore them, or set the heads' num_classes to the dataset's "
                'classes.')
