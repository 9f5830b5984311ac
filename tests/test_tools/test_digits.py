"""tools/dataset_converters/prepare_digits.py: the download-free demo dataset."""
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers.tools import load_tool
from mmpretrain.datasets import CustomDataset
from PIL import Image
from sklearn.datasets import load_digits

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'dataset_converters' / 'prepare_digits.py'
prepare = load_tool(SCRIPT)


@pytest.fixture(scope='module')
def digits():
    return load_digits()


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp('digits') / 'data'
    result = subprocess.run([sys.executable, str(SCRIPT), str(root)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'Wrote 1438 training and 359 validation images' in result.stdout
    return root


def test_split_is_stratified_disjoint_and_complete(digits):
    split = prepare.split_indices(digits.target)
    train, val = set(split['train'].tolist()), set(split['val'].tolist())
    assert not train & val
    assert train | val == set(range(len(digits.target)))
    per_class = Counter(digits.target.tolist())
    val_per_class = Counter(digits.target[split['val']].tolist())
    for label, count in per_class.items():
        assert val_per_class[label] == round(0.2 * count)


def test_split_depends_only_on_the_seed(digits):
    first = prepare.split_indices(digits.target, seed=0)
    again = prepare.split_indices(digits.target, seed=0)
    other = prepare.split_indices(digits.target, seed=1)
    np.testing.assert_array_equal(first['val'], again['val'])
    assert not np.array_equal(first['val'], other['val'])


def test_files_hold_the_scans_in_the_custom_dataset_layout(written, digits):
    for split, count in (('train', 1438), ('val', 359)):
        files = sorted(written.glob(f'{split}/*/*.png'))
        assert len(files) == count
        assert {f.parent.name for f in files} == {str(d) for d in range(10)}
    # Each PNG is the scan, 0-16 stretched to 0-255, under its own label.
    for path in sorted(written.glob('val/*/*.png'))[::37]:
        index, label = int(path.stem), int(path.parent.name)
        assert digits.target[index] == label
        pixels = np.asarray(Image.open(path))
        assert pixels.shape == (8, 8) and pixels.dtype == np.uint8
        np.testing.assert_array_equal(
            pixels, np.round(digits.images[index] * 255 / 16).astype(np.uint8))


def test_mmpretrain_reads_it_with_ten_classes(written):
    dataset = CustomDataset(data_root=str(written), data_prefix='val',
                            pipeline=[])
    assert len(dataset) == 359
    assert dataset.CLASSES == tuple(str(d) for d in range(10))
    labels = Counter(dataset.get_gt_labels().tolist())
    assert sorted(labels) == list(range(10)) and min(labels.values()) >= 35


def test_a_second_run_keeps_the_existing_dataset(written):
    before = {p: p.stat().st_mtime_ns for p in written.glob('train/3/*.png')}
    result = subprocess.run([sys.executable, str(SCRIPT), str(written)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert 'already holds the digits dataset' in result.stdout
    assert {p: p.stat().st_mtime_ns for p in written.glob('train/3/*.png')} == before
