"""Mixed precision, extreme activations and anomaly detection on real train steps."""
import math

import pytest
import torch
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import init_default_scope

import mmsoft.runtime  # noqa: F401
from mmsoft.apis import prepare_config
from mmsoft.models import SOFT, SOFTAttention
from mmsoft.models.attention.diagnostics import inverse_residual

ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4], depths=[1, 1, 2, 1])


def classifier(scope='mmpretrain'):
    from mmpretrain.registry import MODELS
    init_default_scope(scope)
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='ImageClassifier',
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=3),
        backbone=dict(type='SOFT', arch=ARCH),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=64)))
    model.init_weights()
    return model


def classification_batch():
    from mmpretrain.structures import DataSample
    inputs = [torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8) for _ in range(2)]
    samples = [DataSample().set_gt_label(i) for i in range(2)]
    return dict(inputs=inputs, data_samples=samples)


def detector():
    from mmdet.registry import MODELS
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='RetinaNet',
        data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.7, 116.3, 103.5],
                               std=[58.4, 57.1, 57.4], bgr_to_rgb=True,
                               pad_size_divisor=32),
        backbone=dict(type='SOFT', arch=ARCH, out_type='featmap',
                      out_indices=(1, 2, 3)),
        neck=dict(type='FPN', in_channels=[32, 32, 64], out_channels=32,
                  start_level=0, add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='RetinaHead', num_classes=2, in_channels=32, feat_channels=32,
            stacked_convs=1,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                  scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                  strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                            target_stds=[1.0] * 4),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0,
                          alpha=0.25, loss_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        train_cfg=dict(
            assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                          min_pos_iou=0, ignore_iof_thr=-1),
            sampler=dict(type='PseudoSampler'), allowed_border=-1, pos_weight=-1,
            debug=False)))
    model.init_weights()
    return model


def detection_batch():
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData
    samples = []
    for _ in range(2):
        sample = DetDataSample(metainfo=dict(img_shape=(96, 128), ori_shape=(96, 128),
                                             pad_shape=(96, 128), scale_factor=(1, 1)))
        sample.gt_instances = InstanceData(
            bboxes=torch.tensor([[10., 12., 50., 42.], [60., 40., 110., 85.]]),
            labels=torch.tensor([0, 1]))
        samples.append(sample)
    inputs = [torch.randint(0, 255, (3, 96, 128), dtype=torch.uint8) for _ in range(2)]
    return dict(inputs=inputs, data_samples=samples)


@pytest.mark.parametrize('build,batch', [(classifier, classification_batch),
                                         (detector, detection_batch)])
def test_amp_train_step_in_bfloat16_on_cpu(build, batch):
    cfg = Config(dict(optim_wrapper=dict(
        type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4),
        clip_grad=dict(max_norm=1.0))))
    prepare_config(cfg, amp=True)
    assert cfg.optim_wrapper.type == 'CPUAmpOptimWrapper'
    model = build()
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    losses = model.train_step(batch(), wrapper)
    for hook in hooks:
        hook.remove()
    assert torch.bfloat16 in seen  # autocast was on
    for name, value in losses.items():
        assert math.isfinite(float(value)), name
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.isfinite(param.grad).all(), name


def test_anomaly_detection_finds_nothing_in_a_train_step():
    model = classifier()
    wrapper = build_optim_wrapper(model, dict(optimizer=dict(type='AdamW', lr=1e-4)))
    with torch.autograd.detect_anomaly():
        losses = model.train_step(classification_batch(), wrapper)
    assert all(math.isfinite(float(v)) for v in losses.values())


@pytest.mark.parametrize('where', ['input', 'query'])
def test_large_activations_stay_finite_and_report_the_residual(where):
    torch.manual_seed(0)
    attn = SOFTAttention(32, 2, sr_ratio=2, conv_size=3)
    x = torch.randn(2, 16 * 16, 32)
    if where == 'input':
        x = x * 100
    else:
        with torch.no_grad():
            attn.q.weight.mul_(100)
    x.requires_grad_()
    out = attn(x, (16, 16))
    out.square().mean().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    residual = inverse_residual(attn, x, (16, 16))
    assert residual.shape == (2, 2) and torch.isfinite(residual).all()
    assert residual.max() < 1e-3


def test_backbone_with_scaled_input_is_finite():
    model = SOFT(arch=ARCH).eval()
    (out,) = model(torch.rand(1, 3, 64, 64) * 1e4)
    assert torch.isfinite(out).all()
