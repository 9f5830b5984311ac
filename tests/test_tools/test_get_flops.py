"""tools/analysis/get_flops.py prints backbone and whole-model figures."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmsoft'], allow_failed_imports=False)
model = dict(
    type='ImageClassifier',
    backbone=dict(type='SOFT', arch='tiny'),
    head=dict(type='LinearClsHead', num_classes=1000, in_channels=512))
"""


def test_get_flops_prints_a_table(tmp_path):
    config = tmp_path / 'cls.py'
    config.write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools/analysis/get_flops.py'), str(config),
         '--shape', '224'], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = {line.split('|')[1].strip(): [float(v) for v in line.split('|')[2:5]]
            for line in result.stdout.splitlines()
            if line.startswith('| backbone') or line.startswith('| whole')}
    backbone, whole = rows['backbone'], rows['whole model']
    assert abs(whole[0] - 13.07) < 0.01                 # params (M)
    assert abs(whole[2] - 1.93) < 0.01                  # paper convention (G)
    assert whole[1] > whole[2]                          # Newton counted too
    assert abs(whole[1] - backbone[1] - 0.000512) < 2e-3  # the classifier head
    assert 'Input shape: 1 x 3 x 224 x 224' in result.stdout
