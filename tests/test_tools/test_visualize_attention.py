"""tools/analysis/visualize_attention.py saves a picture from a checkpoint."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
default_scope = 'mmpretrain'
model = dict(
    type='ImageClassifier',
    data_preprocessor=dict(mean=[120.0] * 3, std=[60.0] * 3),
    backbone=dict(type='SOFT', arch=dict(embed_dims=[16, 32, 32, 64],
                                         num_heads=[2, 2, 2, 4],
                                         depths=[1, 1, 1, 1])),
    head=dict(type='LinearClsHead', num_classes=3, in_channels=64))
"""


def test_visualize_attention_writes_a_png(tmp_path):
    config = tmp_path / 'model.py'
    config.write_text(CONFIG)
    image = tmp_path / 'image.png'
    Image.fromarray(np.random.default_rng(0).integers(
        0, 255, (90, 120, 3), dtype=np.uint8)).save(image)
    checkpoint = tmp_path / 'model.pth'
    torch.save(dict(state_dict={}), checkpoint)
    out = tmp_path / 'attention.png'
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/visualize_attention.py'),
         str(config), str(checkpoint), str(image), '--size', '64', '--heads', '0', '1',
         '--stage', '1', '--out', str(out)], capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert Image.open(out).size[0] > 200


def test_visualize_attention_rejects_a_missing_head(tmp_path):
    config = tmp_path / 'model.py'
    config.write_text(CONFIG)
    image = tmp_path / 'image.png'
    Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8)).save(image)
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/visualize_attention.py'),
         str(config), str(image), '--heads', '5'], capture_output=True, text=True,
        timeout=300)
    assert result.returncode != 0 and '--heads must be in 0..1' in result.stderr
