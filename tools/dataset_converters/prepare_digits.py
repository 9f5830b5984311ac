"""Write scikit-learn's handwritten digits as an image-folder dataset.

The 1,797 8 x 8 scans ship inside scikit-learn, so no download is needed.
They are saved as PNGs in mmpretrain's CustomDataset layout with a fixed,
stratified 80/20 split, into a new or empty folder (one that holds the
dataset already is left as it is):

    OUT_DIR/train/<digit>/<index>.png   (1,438 images)
    OUT_DIR/val/<digit>/<index>.png     (359 images)

Example:
    python tools/dataset_converters/prepare_digits.py data/digits
"""
import argparse
import os
import os.path as osp
from pathlib import Path

import numpy as np
from PIL import Image


def split_indices(labels: np.ndarray, val_fraction: float = 0.2,
                  seed: int = 0) -> dict:
    """Stratified, seeded train/val split: a dict of index arrays."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        num_val = int(round(len(members) * val_fraction))
        val += members[:num_val].tolist()
        train += members[num_val:].tolist()
    return dict(train=np.sort(train), val=np.sort(val))


def prepare_digits(out_dir: str) -> dict:
    """Write the dataset; returns the number of images per split."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    counts = {}
    for split, indices in split_indices(digits.target).items():
        for index in indices:
            folder = Path(out_dir) / split / str(digits.target[index])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(images[index]).save(folder / f'{index:04d}.png')
        counts[split] = len(indices)
    return counts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('out_dir', nargs='?', default='data/digits',
                        help='output folder (default: data/digits)')
    args = parser.parse_args(argv)
    if osp.isdir(osp.join(args.out_dir, 'val', '9')):
        print(f'{args.out_dir} already holds the digits dataset.')
        return
    from mmsoft.utils import check_output_folder
    try:
        check_output_folder(args.out_dir)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if osp.isdir(args.out_dir) and os.listdir(args.out_dir):
        raise SystemExit(f'{args.out_dir} is not empty and does not hold the digits '
                         'dataset; choose a new or empty folder.')
    counts = prepare_digits(args.out_dir)
    print(f'Wrote {counts["train"]} training and {counts["val"]} validation '
          f'images to {args.out_dir}.')


if __name__ == '__main__':
    main()
