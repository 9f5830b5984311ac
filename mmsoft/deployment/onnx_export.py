"""ONNX export of mmpretrain, mmdet and mmseg models with a SOFT backbone.

The graph holds the model from the preprocessed image batch (normalised,
padded, as the config's data preprocessor leaves it) to the raw outputs of
the head, with no post-processing:

- classifiers (mmpretrain): ``cls_score``, the logits (B, classes);
- single-stage detectors (mmdet, e.g. RetinaNet): ``cls_score_<l>`` and
  ``bbox_pred_<l>`` for every pyramid level ``l`` (the head's ``forward``;
  anchors, decoding and NMS stay outside, as in mmdeploy's split);
- two-stage detectors (Faster/Mask R-CNN): the neck's maps ``feat_<l>`` and
  the RPN's ``rpn_cls_score_<l>`` and ``rpn_bbox_pred_<l>``; the RoI head
  needs proposals chosen by NMS, a data-dependent step that is not exported;
- segmentors (mmseg): ``seg_logits`` of the decode head at its own stride
  (1/4 of the input for UperNet), before resizing to the image.

While exporting, SOFT takes its graph-friendly path
(:func:`mmsoft.ops.exporting`): the same function for every input size.
"""
import importlib
import os.path as osp
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import load_checkpoint
from torch import Tensor
from torch.export import Dim

from mmsoft.engine.atomic_local_backend import atomic_output
from mmsoft.models.backbones.soft import SOFT
from mmsoft.ops import use_newton_node

from .onnx_runtime import ort_session

MAX_DYNAMIC_SIDE = 8192
"""Largest height or width a ``dynamic`` export accepts."""


@dataclass
class ExportModel:
    """A model prepared for export.

    Attributes:
        module (nn.Module): Maps an image batch (B, C, H, W) to a flat tuple
            of tensors.
        task (str): ``'classifier'``, ``'detector'``, ``'two-stage detector'``
            or ``'segmentor'``.
        output_names (list[str]): One name per output.
        in_channels (int): Image channels.
        size_divisor (int): Inputs of the toolbox's pipeline are padded to a
            multiple of this (1 when the config does not pad).
        max_stride (int): Largest stride of any output map.
    """

    module: nn.Module
    task: str
    output_names: List[str]
    in_channels: int
    size_divisor: int
    max_stride: int


class _TensorOutputs(nn.Module):
    """The model's raw outputs for one task, as a flat tuple of tensors."""

    def __init__(self, model: nn.Module, task: str) -> None:
        super().__init__()
        self.model = model
        self.task = task

    def forward(self, images: Tensor) -> Tuple[Tensor, ...]:
        if self.task == 'two-stage detector':
            feats = self.model.extract_feat(images)
            scores, deltas = self.model.rpn_head(feats)[:2]
            return (*feats, *scores, *deltas)
        out = self.model(images, mode='tensor')
        if isinstance(out, Tensor):
            return (out, )
        return tuple(t for group in out for t in group)  # detectors: per level


def load_model(config: str, checkpoint: Optional[str] = None,
               cfg_options: Optional[dict] = None) -> ExportModel:
    """Build a config's model in eval mode on CPU, with weights if given.

    Args:
        config (str): An mmpretrain, mmdet or mmseg config whose backbone is
            SOFT.
        checkpoint (str, optional): Weights to load; None keeps torch's
            default initialisation (for trying the export). Defaults to None.
        cfg_options (dict, optional): Config overrides. Defaults to None.

    Returns:
        ExportModel: The model and what the export needs to know about it.

    Raises:
        FileNotFoundError: The config or checkpoint does not exist.
        ValueError: The backbone is not SOFT, or the toolbox is unknown.
    """
    if not osp.isfile(config):
        raise FileNotFoundError(f'Config {config!r} does not exist; pass a config '
                                'file such as configs/soft_tiny_imagenet.py.')
    if checkpoint is not None and not osp.isfile(checkpoint):
        raise FileNotFoundError(f'Checkpoint {checkpoint!r} does not exist.')
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope')
    if scope not in [t[0] for t in TASKS]:
        raise ValueError(f'{config} has default_scope {scope!r}; the export serves '
                         f'{[t[0] for t in TASKS]} configs.')
    init_default_scope(scope)
    model_cfg = cfg.model.copy()
    model_cfg.get('backbone', {}).pop('init_cfg', None)  # weights come from checkpoint
    model = MODELS.build(model_cfg)
    if not isinstance(getattr(model, 'backbone', None), SOFT):
        name = type(getattr(model, 'backbone', model)).__name__
        raise ValueError(f'{config} has a {name} backbone; this export serves '
                         'models with a SOFT backbone.')
    if checkpoint is not None:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=True,
                        logger='silent')
    model.eval()
    task = task_of(model)
    if task == 'detector' and getattr(model, 'rpn_head', None) is not None:
        task = 'two-stage detector'
    names, max_stride = _outputs(model, task)
    preprocessor = cfg.model.get('data_preprocessor') or {}
    divisor = (preprocessor.get('pad_size_divisor') or preprocessor.get('size_divisor')
               or 1)
    return ExportModel(_TensorOutputs(model, task).eval(), task, names,
                       model.backbone.in_channels, int(divisor), max_stride)


TASKS = (
    ('mmpretrain', 'mmpretrain.models.classifiers', 'BaseClassifier', 'classifier'),
    ('mmdet', 'mmdet.models.detectors', 'BaseDetector', 'detector'),
    ('mmseg', 'mmseg.models.segmentors', 'BaseSegmentor', 'segmentor'))
"""``(scope, module, base class, task)`` of each toolbox the export serves."""


def task_of(model: nn.Module) -> str:
    """``'classifier'``, ``'detector'`` or ``'segmentor'``, from the model's
    base class in its toolbox."""
    for _, module, base, task in TASKS:
        try:
            cls = getattr(importlib.import_module(module), base)
        except (ImportError, AttributeError):
            continue
        if isinstance(model, cls):
            return task
    raise ValueError(f'{type(model).__name__} is not a classifier, detector or '
                     'segmentor of mmpretrain, mmdet or mmseg.')


def _outputs(model: nn.Module, task: str) -> Tuple[List[str], int]:
    """Output names and the largest output stride of a built model."""
    backbone_stride = max(model.backbone.out_strides)
    if task == 'classifier':
        return ['cls_score'], backbone_stride
    if task == 'segmentor':
        return ['seg_logits'], backbone_stride
    head = model.rpn_head if task == 'two-stage detector' else model.bbox_head
    strides = [s[0] if isinstance(s, (tuple, list)) else s
               for s in head.prior_generator.strides]
    levels = range(len(strides))
    if task == 'two-stage detector':
        names = ([f'feat_{i}' for i in levels] + [f'rpn_cls_score_{i}' for i in levels]
                 + [f'rpn_bbox_pred_{i}' for i in levels])
    else:
        names = [f'cls_score_{i}' for i in levels] + [f'bbox_pred_{i}' for i in levels]
    return names, max(strides + [backbone_stride])


def min_dynamic_side(export_model: ExportModel) -> int:
    """Smallest height or width that a ``dynamic`` export serves.

    Every map in the graph keeps at least two cells per side (the exporter
    would fix a side of 1 as a constant), and every SOFT stage has at least
    two landmark rows and columns (so the single-landmark branch for tiny
    maps never applies); rounded up to the config's size divisor.
    """
    backbone = export_model.module.model.backbone
    side = max(backbone.min_input_size, export_model.max_stride + 1)

    def fits(size: int) -> bool:
        return (all(min(g) >= 2 for g in backbone.stage_grids(size, size)) and
                all(min(g) >= 2 for g in backbone.landmark_grids(size, size) if g))

    while not fits(side) or side % export_model.size_divisor:
        side += 1
    return side


def check_request(export_model: ExportModel, shape: Sequence[int],
                  dynamic: bool) -> None:
    """Raise a ValueError naming the problem when the export cannot be made.

    Args:
        export_model (ExportModel): From :func:`load_model`.
        shape (Sequence[int]): (H, W) of the example input.
        dynamic (bool): Whether the export should serve other sizes too.
    """
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f'--shape takes two positive numbers H W, got {list(shape)}.')
    height, width = shape
    backbone = export_model.module.model.backbone
    if min(shape) < backbone.min_input_size:
        raise ValueError(f'--shape {height} {width} is below the '
                         f'{backbone.min_input_size} px minimum of SOFT; use a '
                         'larger input.')
    divisor = export_model.size_divisor
    if height % divisor or width % divisor:
        fit = [-(-s // divisor) * divisor for s in shape]
        raise ValueError(
            f'--shape {height} {width} is not divisible by {divisor}, the size divisor '
            "of this config's data preprocessor: the model only ever sees padded "
            f'inputs; use --shape {fit[0]} {fit[1]}.')
    if not dynamic:
        return
    if backbone.max_landmarks is not None:
        raise ValueError(
            f'--dynamic cannot serve this model: its attention caps the landmarks '
            f'(max_landmarks={backbone.max_landmarks}), and the capped grid is chosen '
            'in Python '
            'from the input size, so the graph would hold the grid of --shape for '
            'every size. Export once per input size without --dynamic.')
    pooled = sorted({str(m.output_size) for m in export_model.module.modules()
                     if isinstance(m, nn.AdaptiveAvgPool2d)
                     and m.output_size not in (1, (1, 1))})
    if pooled:
        raise ValueError(
            f'--dynamic cannot serve this model: it pools adaptively to '
            f'{", ".join(pooled)} cells (e.g. UperNet\'s pyramid pooling), which the '
            'exporter turns into index tables for the example size, so the file '
            'fails at other sizes. Export without --dynamic at each input size.')
    low = min_dynamic_side(export_model)
    if min(shape) < low:
        raise ValueError(f'--dynamic serves sides from {low} px for this model; '
                         f'export at a --shape of at least {low} x {low}.')


def example_input(export_model: ExportModel, shape: Sequence[int],
                  batch: int = 1, seed: int = 0) -> Tensor:
    """A seeded random image batch of the given (H, W)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, export_model.in_channels, *shape, generator=generator)


def export_onnx(export_model: ExportModel, shape: Sequence[int], out: str,
                dynamic: bool = False, opset: int = 18,
                newton_node: bool = False) -> str:
    """Export to an ONNX file; nothing is written when the export fails.

    With ``dynamic`` the batch, height and width are symbolic (sides from
    :func:`min_dynamic_side` to :data:`MAX_DYNAMIC_SIDE`); the example batch
    is then 2. ``torch.export`` checks every shape-dependent decision of the
    model against that range and the export stops when one would hold only
    for the example size.

    Args:
        export_model (ExportModel): From :func:`load_model`.
        shape (Sequence[int]): (H, W) of the example input.
        out (str): The ONNX file to write.
        dynamic (bool): Symbolic batch and image size. Defaults to False.
        opset (int): ONNX opset version (18 or later). Defaults to 18.
        newton_node (bool): Write each Newton inverse as one node
            ``SOFTNewtonApply`` (see :mod:`.onnx_runtime`). Defaults to False.

    Returns:
        str: ``out``.
    """
    check_request(export_model, shape, dynamic)
    if opset < 18:
        raise ValueError(f'--opset {opset} is too old for torch.onnx\'s exporter; '
                         'use 18 or later.')
    images = example_input(export_model, shape, batch=2 if dynamic else 1)
    dynamic_shapes = None
    if dynamic:
        low = min_dynamic_side(export_model)
        dynamic_shapes = ({
            0: Dim('batch', min=1, max=1024),
            2: Dim('height', min=low, max=MAX_DYNAMIC_SIDE),
            3: Dim('width', min=low, max=MAX_DYNAMIC_SIDE)}, )
    return export_module(export_model.module, images, out, export_model.output_names,
                         dynamic_shapes, opset, newton_node)


def export_module(module: nn.Module, images: Tensor, out: str,
                  output_names: Optional[List[str]] = None,
                  dynamic_shapes: Optional[tuple] = None, opset: int = 18,
                  newton_node: bool = False) -> str:
    """``torch.export`` a module of one image input, then write it as ONNX.

    The file appears only once complete (written aside, then renamed), with
    the mode a plain ``open()`` gives (``0o666`` less the umask), as
    checkpoints.

    Args:
        module (nn.Module): Maps images to a tensor or a tuple of tensors.
        images (Tensor): The example input.
        out (str): The ONNX file to write.
        output_names (list[str], optional): Names of the outputs.
            Defaults to None (the exporter's).
        dynamic_shapes (tuple, optional): ``torch.export`` dynamic shapes of
            the one input. Defaults to None (static).
        opset (int): ONNX opset version. Defaults to 18.
        newton_node (bool): Write each Newton inverse as one node
            ``ai.onnx.contrib::SOFTNewtonApply``, which
            :func:`~.onnx_runtime.ort_session` runs with mmsoft's own
            implementation, instead of ``2 x num_iters`` standard matrix
            products. Defaults to False.

    Returns:
        str: ``out``.

    Raises:
        ValueError: A shape-dependent decision of the model holds only for
            some of the dynamic sizes.
    """
    with torch.no_grad(), use_newton_node(newton_node):
        try:
            program = torch.export.export(module, (images, ),
                                          dynamic_shapes=dynamic_shapes, strict=False)
        except torch._dynamo.exc.UserError as error:
            raise ValueError(
                f'--dynamic cannot serve this model: a shape-dependent decision '
                f'holds only for some sizes ({error}). Export without --dynamic '
                'at each input size.') from error
        onnx_program = torch.onnx.export(
            program, (images, ), dynamo=True, opset_version=opset,
            input_names=['images'], output_names=output_names, verbose=False)
    with atomic_output(out) as partial:
        onnx_program.save(partial, external_data=False)
    return out


def relative_difference(actual: Sequence[Tensor], expected: Sequence[Tensor]) -> float:
    """Largest ``max|a - e| / max|e|`` over pairs of outputs."""
    worst = 0.0
    for a, e in zip(actual, expected):
        if a.shape != e.shape:
            raise AssertionError(f'ONNX output of shape {tuple(a.shape)} where torch '
                                 f'gives {tuple(e.shape)}.')
        scale = e.abs().max().clamp_min(1e-12)
        worst = max(worst, float((a - e).abs().max() / scale))
    return worst


def verify_onnx(export_model: ExportModel, path: str,
                shapes: Sequence[Sequence[int]], batch: int = 1) -> Dict[tuple, float]:
    """Run ONNX Runtime and torch (eager, default path) on the same inputs.

    Args:
        export_model (ExportModel): The model that was exported.
        path (str): The ONNX file.
        shapes (Sequence[Sequence[int]]): Input sizes (H, W) to compare at.
        batch (int): Images per input. Defaults to 1.

    Returns:
        dict: ``{(H, W): largest relative difference}`` over all outputs.
    """
    session = ort_session(path)
    results = {}
    for shape in shapes:
        images = example_input(export_model, shape, batch=batch, seed=1)
        with torch.no_grad():
            expected = export_model.module(images)
        actual = session.run(None, {session.get_inputs()[0].name: images.numpy()})
        results[tuple(shape)] = relative_difference(
            [torch.from_numpy(a) for a in actual], expected)
    return results
