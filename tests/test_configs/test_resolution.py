"""Every config resolves to the settings it resolved to before its bases were
split into ``_base_/models``, ``_base_/datasets`` and ``_base_/schedules``,
except for the changes listed in ``INTENDED``.

``resolved_settings.json`` holds those earlier settings: mmengine's
``Config.fromfile(...).to_dict()`` of each config, flattened by
:func:`flatten`. A config that ``like`` names another is stored as that
config's settings with ``differs`` set and ``without`` removed.
"""
import json
from fnmatch import fnmatch
from pathlib import Path

import pytest
from mmengine.config import Config

CONFIG_DIR = Path(__file__).resolve().parents[2] / 'configs'
RECORD = json.loads(
    Path(__file__).with_name('resolved_settings.json').read_text())['configs']
REMOVED = object()
DIGITS = [str(d) for d in range(10)]
NORM = {'mean': [60.0] * 3, 'std': [95.0] * 3, 'bgr_to_rgb': False}

# (configs, key, new value or REMOVED, why): the differences the new layout
# means to make. The ``_scope_`` markers went with the mmseg Swin config's
# optimizer and schedule, which mmseg's own bases now give; they named the
# scope that every one of these configs sets as its ``default_scope``.
INTENDED = [
    ('*', 'custom_imports.imports', ['mmsoft', 'mmsoft.runtime'],
     'every config imports mmsoft.runtime as well'),
    ('upernet_*', 'checkpoint_file', REMOVED,
     "the Swin checkpoint of mmseg's Swin config; no SOFT config reads it"),
    ('upernet_*', 'optim_wrapper._scope_', REMOVED, "mmseg, the default scope"),
    ('upernet_*_ade20k.py', 'param_scheduler[0]._scope_', REMOVED,
     'mmseg, the default scope'),
    ('upernet_*_ade20k.py', 'param_scheduler[1]._scope_', REMOVED,
     'mmseg, the default scope'),
    ('*_digit-scenes.py', 'seg_classes', ['background'] + DIGITS,
     'read from _base_/datasets/digit_scenes.py'),
    *[('*_digit-scenes.py', f'pixel_norm.{key}', value,
       'read from _base_/digits_classifier.py') for key, value in NORM.items()],
    ('upernet_*_digit-scenes.py', 'classes', DIGITS,
     'read from _base_/datasets/digit_scenes.py'),
    # The top-level data_preprocessor of an mmseg config is used only where
    # the model has none; the digit-scene one now repeats the model's instead
    # of holding the ADE20K values.
    *[('upernet_*_digit-scenes.py', f'data_preprocessor.{key}', value,
       "the model's data preprocessor")
      for key, value in dict(NORM, size=[96, 96]).items()],
]


def flatten(value, prefix: str = '') -> dict:
    """Dotted keys to leaves.

    Dicts are entered by key; lists holding dicts or lists by index, with
    their length under ``key[]``; other lists, scalars and empty dicts are
    leaves. Give it JSON data (tuples become lists).
    """
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(flatten(item, f'{prefix}.{key}' if prefix else key))
        return flat
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        flat = {f'{prefix}[]': len(value)}
        for index, item in enumerate(value):
            flat.update(flatten(item, f'{prefix}[{index}]'))
        return flat
    return {prefix: value}


def recorded(name: str) -> dict:
    entry = RECORD[name]
    if 'settings' in entry:
        return dict(entry['settings'])
    settings = recorded(entry['like'])
    for key in entry.get('without', []):
        del settings[key]
    settings.update(entry.get('differs', {}))
    return settings


def expected(name: str) -> dict:
    settings = recorded(name)
    for pattern, key, value, _why in INTENDED:
        if fnmatch(name, pattern):
            if value is REMOVED:
                del settings[key]
            else:
                settings[key] = value
    return settings


def resolved(name: str) -> dict:
    cfg = Config.fromfile(CONFIG_DIR / name)
    return flatten(json.loads(json.dumps(cfg.to_dict())))


@pytest.mark.parametrize('name', sorted(RECORD))
def test_config_resolves_as_before(name):
    actual, want = resolved(name), expected(name)
    differing = {key: (want.get(key, '<absent>'), actual.get(key, '<absent>'))
                 for key in sorted(actual.keys() | want.keys())
                 if actual.get(key, REMOVED) != want.get(key, REMOVED)}
    assert not differing, f'{name}: (expected, resolved) {differing}'


def test_every_config_was_recorded():
    assert set(RECORD) == {p.name for p in CONFIG_DIR.glob('*.py')}
