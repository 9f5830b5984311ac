"""Pretrained SOFT weights load strictly into detectors and segmentors."""
import json
import os

import pytest
import torch
from helpers.logs import logged_messages
from helpers.official_soft import official_state_dict
from helpers.process_settings import run_python
from mmengine.registry import init_default_scope

import mmsoft  # noqa: F401
from mmsoft.models import SOFT
from mmsoft.models.utils import resize_pos_embed

ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4], depths=[1, 1, 2, 1])


def classifier_checkpoint(path, img_size=224):
    """An mmpretrain ImageClassifier checkpoint, as a Runner saves it."""
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    model = MODELS.build(dict(
        type='ImageClassifier',
        backbone=dict(type='SOFT', arch=ARCH, img_size=img_size),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=64)))
    model.init_weights()
    torch.save(dict(state_dict=model.state_dict(), meta=dict(epoch=1)), path)
    return model


def backbone_cfg(path, **kwargs):
    return dict(type='SOFT', arch=ARCH, out_type='featmap', out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=str(path),
                              prefix='backbone.'), **kwargs)


def assert_same_backbone(backbone, source, resized_from=None):
    own = backbone.state_dict()
    for key, value in source.backbone.state_dict().items():
        if key.endswith('pos_embed') and resized_from is not None:
            extra = 1 if key == 'stages.3.pos_embed' else 0
            side = int((own[key].shape[1] - extra) ** 0.5)
            value = resize_pos_embed(value, (side, side), extra)
        torch.testing.assert_close(own[key], value, msg=key)


def test_pretrained_into_an_mmdet_retinanet_with_resized_pos_embeds(tmp_path):
    from mmdet.registry import MODELS
    source = classifier_checkpoint(tmp_path / 'cls.pth')
    init_default_scope('mmdet')
    detector = MODELS.build(dict(
        type='RetinaNet',
        backbone=backbone_cfg(tmp_path / 'cls.pth', img_size=320),
        neck=dict(type='FPN', in_channels=[16, 32, 32, 64], out_channels=32,
                  start_level=1, add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='RetinaHead', num_classes=3, in_channels=32, feat_channels=32,
            stacked_convs=1,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                  scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                  strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                            target_stds=[1.0] * 4),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0,
                          alpha=0.25, loss_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=1.0))))
    detector.init_weights()
    assert detector.backbone.stages[0].pos_embed.shape == (1, 80 * 80, 16)
    assert_same_backbone(detector.backbone, source, resized_from=224)


def test_pretrained_into_an_mmseg_upernet(tmp_path):
    from mmseg.registry import MODELS
    source = classifier_checkpoint(tmp_path / 'cls.pth')
    init_default_scope('mmseg')
    segmentor = MODELS.build(dict(
        type='EncoderDecoder',
        data_preprocessor=dict(type='SegDataPreProcessor'),
        backbone=backbone_cfg(tmp_path / 'cls.pth'),
        decode_head=dict(type='UPerHead', in_channels=[16, 32, 32, 64],
                         in_index=[0, 1, 2, 3], channels=16, num_classes=4,
                         pool_scales=(1, 2), norm_cfg=dict(type='BN'),
                         loss_decode=dict(type='CrossEntropyLoss'))))
    segmentor.init_weights()
    assert_same_backbone(segmentor.backbone, source)


def test_released_checkpoint_loads_into_a_backbone(tmp_path):
    path = tmp_path / 'released.pth'
    weights = official_state_dict(seed=7)
    torch.save(dict(model={f'module.{k}': v for k, v in weights.items()}), path)
    model = SOFT(arch='tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    torch.testing.assert_close(model.stages[2].blocks[1].attn.landmark_conv.weight,
                               weights['block3.1.att.mha.attn.Qlandmark_op.weight'])
    torch.testing.assert_close(model.stages[3].cls_token, weights['cls_token'])


def test_loads_that_do_not_fit_are_errors(tmp_path):
    classifier_checkpoint(tmp_path / 'cls.pth')
    wrong_prefix = SOFT(arch=ARCH, init_cfg=dict(
        type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'), prefix='detector.'))
    with pytest.raises(KeyError, match="No key of .*cls.pth starts with prefix "
                       "'detector.'"):
        wrong_prefix.init_weights()

    no_prefix = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained',
                                               checkpoint=str(tmp_path / 'cls.pth')))
    with pytest.raises(KeyError, match=r"No weight of .*matches SOFT.*prefix='backbone.'"):
        no_prefix.init_weights()

    partial = tmp_path / 'partial.pth'
    state = torch.load(tmp_path / 'cls.pth', weights_only=True)['state_dict']
    del state['backbone.stages.1.blocks.0.attn.q.weight']
    torch.save(dict(state_dict=state), partial)
    model = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained', checkpoint=str(partial),
                                          prefix='backbone.'))
    with pytest.raises(KeyError, match=r'lacks 1 weights .*stages\.1\.blocks\.0\.attn\.q\.weight'):
        model.init_weights()

    wider = dict(ARCH, embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4])
    model = SOFT(arch=wider, init_cfg=dict(
        type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'), prefix='backbone.'))
    with pytest.raises(ValueError, match=r'stages\.2\.blocks\.0\.attn\.q\.weight: checkpoint '
                       r'\(32, 32\) vs model \(48, 48\)'):
        model.init_weights()


DEEPER = dict(ARCH, depths=[1, 2, 2, 2])


def test_a_deeper_checkpoint_is_an_error_naming_the_extra_blocks(tmp_path):
    torch.manual_seed(0)
    deeper = SOFT(arch=DEEPER)
    torch.save(dict(state_dict=deeper.state_dict()), tmp_path / 'deeper.pth')
    model = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained',
                                          checkpoint=str(tmp_path / 'deeper.pth')))
    with pytest.raises(KeyError, match=r"deeper\.pth has \d+ weights that SOFT has "
                       r"no place for: \['stages\.1\.blocks\.1\..*another size"):
        model.init_weights()
    # Dropping them on purpose is an option.
    model = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained', allow_extra_weights=True,
                                          checkpoint=str(tmp_path / 'deeper.pth')))
    model.init_weights()
    torch.testing.assert_close(model.stages[1].blocks[0].attn.q.weight,
                               deeper.stages[1].blocks[0].attn.q.weight)


def test_a_deeper_released_checkpoint_is_an_error(tmp_path):
    path = tmp_path / 'released_small.pth'
    torch.save(dict(model=official_state_dict(arch=SOFT.arch_zoo['small'], seed=11)), path)
    model = SOFT(arch='tiny', init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(KeyError, match=r"no place for: \['stages\.1\.blocks\.2\..*another "
                       r'size'):
        model.init_weights()


def test_stages_that_are_not_built_are_not_extra(tmp_path):
    source = classifier_checkpoint(tmp_path / 'cls.pth')
    model = SOFT(arch=ARCH, out_type='featmap', out_indices=(0, 1),
                 init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'),
                               prefix='backbone.'))
    model.init_weights()
    torch.testing.assert_close(model.stages[1].blocks[0].attn.q.weight,
                               source.backbone.stages[1].blocks[0].attn.q.weight)


def test_a_weight_with_and_without_the_ddp_prefix_is_refused(tmp_path):
    torch.manual_seed(0)
    state = {f'module.{k}': v for k, v in SOFT(arch=ARCH).state_dict().items()}
    state['stages.3.cls_token'] = torch.zeros(1, 1, 64)
    torch.save(dict(state_dict=state), tmp_path / 'twice.pth')
    model = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained',
                                          checkpoint=str(tmp_path / 'twice.pth')))
    with pytest.raises(ValueError, match=r"twice\.pth holds weights twice, with "
                       r"and without the prefix 'module\.' \(1 of them\): "
                       r"'module\.stages\.3\.cls_token' and 'stages\.3\.cls_token'"):
        model.init_weights()


def test_keys_of_both_layouts_for_one_weight_are_refused(tmp_path):
    torch.manual_seed(0)
    state = SOFT(arch=ARCH).state_dict()
    state['norm.weight'] = torch.zeros(64)   # the layout before version 2
    torch.save(dict(state_dict=state), tmp_path / 'mixed.pth')
    model = SOFT(arch=ARCH, init_cfg=dict(type='Pretrained',
                                          checkpoint=str(tmp_path / 'mixed.pth')))
    with pytest.raises(ValueError, match=r"mixed\.pth holds keys of both SOFT layouts "
                       r"for the same weight: 'norm\.weight' and "
                       r"'stages\.3\.norm\.weight'"):
        model.init_weights()


class RunsSystem:
    """Pickles into ``os.system(command)``, run by a full unpickling only."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command, ))


@pytest.mark.parametrize('runtime', [False, True])
def test_pickled_code_gets_the_safe_message_with_or_without_the_runtime(tmp_path,
                                                                        runtime):
    marker, path = tmp_path / 'marker', tmp_path / 'evil.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(1)),
                    payload=RunsSystem(f'touch {marker}')), path)
    message, unchanged = json.loads(run_python(f"""
        import pickle
        import {'mmsoft.runtime' if runtime else 'mmsoft'}
        from mmsoft.models import SOFT
        before = snapshot()
        model = SOFT(arch={ARCH!r}, init_cfg=dict(type='Pretrained',
                                                  checkpoint={str(path)!r}))
        try:
            model.init_weights()
            message = 'loaded'
        except pickle.UnpicklingError as err:
            message = str(err)
        print(json.dumps([message, snapshot() == before]))
    """))
    assert message.startswith(f'Refused to load checkpoint {path}: it holds objects '
                              'that a weights-only load does not allow, which can '
                              'run code; nothing in it was run.'), message
    for advice in ('will likely succeed', 'weights_only', 'Please use'):
        assert advice not in message
    assert unchanged   # no process-wide setting was changed to load it
    assert not marker.exists()


def test_non_finite_weights_are_named_and_refused_unless_allowed(tmp_path):
    source = classifier_checkpoint(tmp_path / 'cls.pth')
    state = torch.load(tmp_path / 'cls.pth', weights_only=True)['state_dict']
    state['backbone.stages.2.blocks.1.mlp.fc2.weight'][0, 0] = float('inf')
    state['backbone.stages.0.pos_embed'][0, :2] = float('nan')
    state['head.fc.weight'][:] = float('nan')   # not taken by the backbone
    torch.save(dict(state_dict=state), tmp_path / 'diverged.pth')
    model = SOFT(**{k: v for k, v in backbone_cfg(tmp_path / 'diverged.pth').items()
                    if k != 'type'})
    before = model.stages[0].pos_embed.detach().clone()
    with pytest.raises(ValueError, match=r'diverged\.pth holds weights with NaN or Inf '
                       r'\(2 of \d+\): stages\.0\.pos_embed \(32 NaN, 0 Inf of '
                       r'50176\), stages\.2\.blocks\.1\.mlp\.fc2\.weight \(0 NaN, 1 Inf '
                       r'of 4096\)\. .*set init_cfg\.allow_non_finite=True'):
        model.init_weights()
    assert torch.equal(model.stages[0].pos_embed, before)   # nothing was loaded
    model = SOFT(**{k: v for k, v in backbone_cfg(tmp_path / 'diverged.pth').items()
                    if k != 'type'})
    model.init_cfg['allow_non_finite'] = True
    with logged_messages() as logged:
        model.init_weights()
    assert any('holds weights with NaN or Inf (2 of' in m for m in logged), logged
    assert model.stages[2].blocks[1].mlp.fc2.weight.isinf().sum() == 1
    torch.testing.assert_close(model.stages[1].blocks[0].attn.q.weight,
                               source.backbone.stages[1].blocks[0].attn.q.weight)
