"""The SOFT backbone inside an mmpretrain classifier, and at detection size."""
import pytest
import torch
from mmengine.optim import OptimWrapper
from mmengine.registry import MODELS, DefaultScope

from mmsoft.models import SOFT

SMALL_ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                  depths=[1, 1, 2, 1])


def test_image_classifier_train_step_updates_every_backbone_weight():
    import mmpretrain.registry  # noqa: F401  (registers the mmpretrain scope)
    from mmpretrain.structures import DataSample
    cfg = dict(
        type='ImageClassifier',
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=3,
                               mean=[123.675, 116.28, 103.53],
                               std=[58.395, 57.12, 57.375], to_rgb=True),
        backbone=dict(type='SOFT', arch=SMALL_ARCH, drop_path_rate=0.1),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=64,
                  loss=dict(type='CrossEntropyLoss')))
    torch.manual_seed(0)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    model.init_weights()
    assert isinstance(model.backbone, SOFT)
    model.train()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    data = dict(inputs=[torch.randint(0, 256, (3, 64, 80), dtype=torch.uint8)
                        for _ in range(2)],
                data_samples=[DataSample().set_gt_label(i) for i in (0, 2)])
    losses = model.train_step(data, optim)
    assert torch.isfinite(losses['loss'])
    # A convolution bias right before a train-mode BatchNorm is cancelled by
    # the batch mean (the released layout keeps it), so it need not move.
    cancelled = {id(conv.bias) for seq in model.modules()
                 if isinstance(seq, torch.nn.Sequential)
                 for conv, bn in zip(seq, seq[1:])
                 if isinstance(conv, torch.nn.Conv2d)
                 and isinstance(bn, torch.nn.BatchNorm2d)}
    assert len(cancelled) == 6  # 3 stem convolutions, 3 downsampling ones
    for name, param in model.named_parameters():
        assert torch.isfinite(param).all(), name
        if id(param) not in cancelled:
            assert not torch.equal(param, before[name]), f'{name} was not updated'
    model.eval()
    (pred,) = model.val_step(dict(inputs=data['inputs'][:1],
                                  data_samples=data['data_samples'][:1]))
    assert pred.pred_score.shape == (3,)


@pytest.mark.slow
def test_featmap_at_detection_size():
    # 800 x 1333 with a small custom arch: the preset only changes channels.
    model = SOFT(arch=SMALL_ARCH, out_type='featmap',
                 out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        feats = model(torch.rand(1, 3, 800, 1333))
    assert [tuple(f.shape[2:]) for f in feats] == [(200, 334), (100, 167),
                                                   (50, 84), (25, 42)]
    assert all(torch.isfinite(f).all() for f in feats)


def test_feature_maps_are_contiguous_for_mmcv_roi_align():
    # mmcv's CPU RoIAlign reads its input as contiguous NCHW memory; a
    # channels-last view (what a transpose of the tokens gives) survives an
    # FPN's convolutions and gave Mask R-CNN's RoI heads scrambled features.
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align
    torch.manual_seed(0)
    model = SOFT(arch=SMALL_ARCH, out_type='featmap', out_indices=(0, 1, 2, 3)).eval()
    fpn_conv = torch.nn.Conv2d(16, 8, 3, padding=1)
    rois = torch.tensor([[0., 4, 6, 40, 50], [1., 10, 2, 60, 30]])
    with torch.no_grad():
        maps = model(torch.randn(2, 3, 64, 64))
        assert all(m.is_contiguous() for m in maps)
        level0 = fpn_conv(maps[0])
        ours = RoIAlign(7, spatial_scale=0.25, sampling_ratio=0, aligned=True)(level0, rois)
        reference = roi_align(level0, rois, 7, 0.25, 0, True)
    torch.testing.assert_close(ours, reference)
