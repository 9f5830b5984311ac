"""Checkpoints written before the stages became modules still load."""
import re
from collections import OrderedDict

import torch
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint

import mmsoft  # noqa: F401
from mmsoft.models import SOFT

ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4], depths=[1, 2, 1, 1])


def version1_keys(state):
    """The layout mmsoft wrote before (parallel lists, class token at the top),
    spelled out here independently of the package's key table."""
    old = OrderedDict()
    for key, value in state.items():
        if key == 'newton_variant':
            continue  # recorded only since the back-off inverse exists
        stage, tail = re.match(r'stages\.(\d)\.(.+)$', key).groups()
        if tail.startswith('patch_embed.'):
            key = f'patch_embeds.{stage}.{tail[len("patch_embed."):]}'
        elif tail == 'pos_embed':
            key = f'pos_embeds.{stage}'
        elif tail.startswith('blocks.'):
            key = f'stages.{stage}.{tail[len("blocks."):]}'
        else:  # the class token and the final norm sat at the top
            key = tail
        old[key] = value
    old._metadata = OrderedDict({'': dict(version=1)})
    return old


def saved_model(seed=0, **kwargs):
    torch.manual_seed(seed)
    model = SOFT(arch=ARCH, **kwargs)
    model.init_weights()
    return model.eval()


def test_the_old_layout_is_what_the_test_claims():
    old = version1_keys(saved_model().state_dict())
    assert {'patch_embeds.0.proj.0.weight', 'pos_embeds.3', 'stages.1.1.attn.q.weight',
            'stages.3.0.attn.kv.weight', 'cls_token', 'norm.weight'} <= set(old)
    assert not any(re.match(r'stages\.\d\.(blocks|patch_embed|pos_embed)', k)
                   for k in old)


def test_old_state_dict_loads_strictly_and_gives_the_same_outputs(tmp_path):
    source = saved_model(seed=1)
    x = torch.rand(2, 3, 64, 80)
    with torch.no_grad():
        expected = source(x)[0]
    path = tmp_path / 'old.pth'
    torch.save(dict(state_dict=version1_keys(source.state_dict()),
                    meta=dict(epoch=3)), path)
    # torch's strict load (metadata says version 1).
    model = saved_model(seed=2)
    model.load_state_dict(torch.load(path, weights_only=True)['state_dict'])
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], expected)
    # mmengine's loader, as load_from and --resume use it.
    model = saved_model(seed=3)
    load_checkpoint(model, str(path), map_location='cpu', strict=True)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], expected)
    # Without metadata (a state dict rebuilt by hand) the keys are still renamed.
    bare = dict(version1_keys(source.state_dict()))
    model = saved_model(seed=4)
    model.load_state_dict(bare)
    with torch.no_grad():
        torch.testing.assert_close(model(x)[0], expected)


def test_old_classifier_checkpoint_fine_tunes_a_dense_backbone(tmp_path):
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    classifier = MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='SOFT', arch=ARCH),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=64)))
    classifier.init_weights()
    state = version1_keys(classifier.backbone.state_dict())
    full = OrderedDict((f'backbone.{k}', v) for k, v in state.items())
    full['head.fc.weight'] = classifier.head.fc.weight.detach()
    full['head.fc.bias'] = classifier.head.fc.bias.detach()
    path = tmp_path / 'old_cls.pth'
    torch.save(dict(state_dict=full), path)
    dense = SOFT(arch=ARCH, out_type='featmap', out_indices=(0, 1, 2, 3), img_size=128,
                 init_cfg=dict(type='Pretrained', checkpoint=str(path),
                               prefix='backbone.'))
    dense.init_weights()
    torch.testing.assert_close(dense.stages[3].cls_token,
                               classifier.backbone.stages[3].cls_token)
    torch.testing.assert_close(dense.stages[1].blocks[1].attn.q.weight,
                               classifier.backbone.stages[1].blocks[1].attn.q.weight)
    assert dense.stages[0].pos_embed.shape == (1, 32 * 32, 16)  # resized from 56
