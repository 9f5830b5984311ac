"""Save a picture of SOFT's attention for one query position (paper Fig. 3 style).

The weights come from the low-rank factors
(:func:`mmsoft.models.attention.diagnostics.attention_row`), so large images
never need the N x N matrix. An existing --out is replaced only with --force.

Examples:
    python tools/analysis/visualize_attention.py configs/soft_tiny_imagenet.py \
        soft_tiny.pth demo.jpg --stage 2 --block 0 --heads 0 1 --query 0.5 0.4
    python tools/analysis/visualize_attention.py CONFIG IMAGE --out attn.png
"""
import argparse
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import load_checkpoint
from PIL import Image

import mmsoft  # noqa: F401
from mmsoft.models.attention import SOFTAttention, attention_row
from mmsoft.utils import check_output_file


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='config whose model has a SOFT backbone')
    parser.add_argument('paths', nargs='+', metavar='[CHECKPOINT] IMAGE',
                        help='optional checkpoint, then the image')
    parser.add_argument('--stage', type=int, default=0, help='stage 0-2 (default 0)')
    parser.add_argument('--block', type=int, default=0, help='block in the stage')
    parser.add_argument('--heads', type=int, nargs='+', default=[0, 1],
                        help='heads to show (default 0 1)')
    parser.add_argument('--query', type=float, nargs=2, default=[0.5, 0.5],
                        metavar=('Y', 'X'),
                        help='query position as fractions of height and width')
    parser.add_argument('--size', type=int, default=224,
                        help='shorter image side fed to the model (default 224)')
    parser.add_argument('--out', default='attention.png',
                        help='output PNG (default attention.png)')
    parser.add_argument('--force', action='store_true',
                        help='replace the --out file when it exists')
    args = parser.parse_args(argv)
    if len(args.paths) > 2:
        parser.error('give at most a checkpoint and an image')
    return args


def load_image(path: str, size: int, mean: List[float], std: List[float]):
    image = Image.open(path).convert('RGB')
    scale = size / min(image.size)
    width, height = (max(32, round(s * scale)) for s in image.size)
    image = image.resize((width, height), Image.BICUBIC)
    array = np.asarray(image, dtype=np.float32)
    tensor = (torch.from_numpy(array) - torch.tensor(mean)) / torch.tensor(std)
    return array.astype(np.uint8), tensor.permute(2, 0, 1)[None]


def attention_maps(backbone, image: torch.Tensor, stage: int, block: int,
                   query: List[float]) -> torch.Tensor:
    """(h, H, W) weights of the chosen query in ``stages[stage].blocks[block]``."""
    attn = backbone.stages[stage].blocks[block].attn
    captured = {}
    handle = attn.register_forward_pre_hook(
        lambda module, inputs: captured.update(x=inputs[0], hw=inputs[1]))
    try:
        with torch.no_grad():
            backbone(image)
    finally:
        handle.remove()
    height, width = captured['hw']
    row = min(int(query[0] * height), height - 1)
    col = min(int(query[1] * width), width - 1)
    weights = attention_row(attn, captured['x'], captured['hw'], row * width + col)
    return weights[0].view(-1, height, width), (row + 0.5) / height, (col + 0.5) / width


def save_figure(image: np.ndarray, maps: torch.Tensor, heads: List[int],
                query_yx, out: str, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    height, width = image.shape[:2]
    fig, axes = plt.subplots(1, len(heads) + 1, figsize=(3.2 * (len(heads) + 1), 3.4))
    qy, qx = query_yx[0] * height, query_yx[1] * width
    axes[0].imshow(image)
    axes[0].set_title('input')
    for ax, head in zip(axes[1:], heads):
        up = F.interpolate(maps[head][None, None], size=(height, width),
                           mode='bilinear', align_corners=False)[0, 0]
        ax.imshow(image)
        ax.imshow(up.numpy(), cmap='jet', alpha=0.55)
        ax.set_title(f'head {head}')
    for ax in axes:
        ax.plot(qx, qy, marker='*', color='white', markersize=12,
                markeredgecolor='black')
        ax.axis('off')
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> Optional[str]:
    args = parse_args(argv)
    try:
        check_output_file(args.out, args.force, example='attention.png')
    except ValueError as error:
        raise SystemExit(str(error)) from None
    checkpoint = args.paths[0] if len(args.paths) == 2 else None
    cfg = Config.fromfile(args.config)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    cfg.model.backbone.pop('init_cfg', None)
    model = MODELS.build(cfg.model).eval()
    if checkpoint:
        load_checkpoint(model, checkpoint, map_location='cpu', strict=False)
    backbone = model.backbone
    soft_stages = [i for i, stage in enumerate(backbone.stages)
                   if isinstance(stage.blocks[0].attn, SOFTAttention)]
    if args.stage not in soft_stages:
        raise SystemExit(f'--stage must be one of {soft_stages} (a stage of SOFT '
                         f'attention), got {args.stage}.')
    blocks = backbone.stages[args.stage].blocks
    if not 0 <= args.block < len(blocks):
        raise SystemExit(f'--block must be below {len(blocks)}.')
    heads = blocks[args.block].attn.num_heads
    if any(not 0 <= h < heads for h in args.heads):
        raise SystemExit(f'--heads must be in 0..{heads - 1} for this layer.')
    preprocessor = (cfg.model.get('data_preprocessor')
                    or cfg.get('data_preprocessor', {}))
    mean = preprocessor.get('mean', [123.675, 116.28, 103.53])
    std = preprocessor.get('std', [58.395, 57.12, 57.375])
    image, tensor = load_image(args.paths[-1], args.size, mean, std)
    maps, qy, qx = attention_maps(backbone, tensor, args.stage, args.block,
                                  args.query)
    title = (f'{Path(args.config).stem}: stage {args.stage + 1}, block {args.block}, '
             f'query at ({args.query[0]:.2f}, {args.query[1]:.2f})')
    save_figure(image, maps, args.heads, (qy, qx), args.out, title)
    print(f'Saved {args.out}.')
    return args.out


if __name__ == '__main__':
    main()
