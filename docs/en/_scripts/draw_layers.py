"""Draw docs/en/layers.png: the layers of the mmsoft package.

Run from the repository root: python docs/en/_scripts/draw_layers.py
"""
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / 'layers.png'

# (x, y, width, height, title, lines, face colour)
BOXES = {
    'tools': (0.3, 8.45, 8.4, 1.3, 'tools/', [
        'train.py, test.py, dist_*.sh, slurm_*.sh (import mmsoft.runtime)',
        'analysis/  deployment/  model_converters/  dataset_converters/'], '#e8e8e8'),
    'configs': (9.0, 8.45, 4.7, 1.3, 'configs/', [
        "inherit mmpretrain::, mmdet::, mmseg:: bases",
        "custom_imports: 'mmsoft' (+ 'mmsoft.runtime')"], '#e8e8e8'),
    'runtime': (0.5, 5.85, 3.0, 1.7, 'mmsoft.runtime', [
        'process-wide changes:', 'weights-only loading,', 'atomic writes, CPU AMP,',
        'compile names'], '#fde2c8'),
    'apis': (3.7, 5.85, 2.2, 1.7, 'mmsoft.apis', [
        'config for the', 'machine, launch,', 'work-dir lock,', 'dataset checks'],
        '#fde2c8'),
    'utils': (6.1, 5.85, 2.2, 1.7, 'mmsoft.utils', [
        'collect_env,', 'FLOP counter,', 'weights-only', 'checkpoint loader'],
        '#fde2c8'),
    'deployment': (8.5, 5.85, 2.3, 1.7, 'mmsoft.deployment', [
        'ONNX export,', 'SOFTNewtonApply', 'in ONNX Runtime'], '#fde2c8'),
    'benchmark': (11.0, 5.85, 2.3, 1.7, 'mmsoft.benchmark', [
        'optional:', 'cases, timing,', 'reports, load'], '#f3f3f3'),
    'registry': (0.8, 3.05, 3.4, 1.6, 'mmsoft/registry.py', [
        "registries of scope 'mmsoft';", 'SOFT and the token mixers',
        "in mmengine's root MODELS"], '#cfe3f7'),
    'models': (4.75, 3.05, 4.1, 1.6, 'mmsoft.models', [
        'SOFT backbone, stages, blocks;', 'token mixers (SOFTAttention, peers);',
        'strict pretrained loading'], '#cfe3f7'),
    'engine': (9.4, 3.05, 3.8, 1.6, 'mmsoft.engine', [
        'hooks, CPUAmpOptimWrapper,', 'compile constructor, atomic backend',
        '(registered; the runtime applies)'], '#dde9f5'),
    'ops': (0.8, 0.95, 6.9, 1.55,
            'mmsoft.ops: the core (torch only)', [
                'gaussian_kernel  newton (reference loop, starts)  exact',
                'bottleneck (InverseCfg)  lowrank_attention  execution',
                'dispatch: Newton routes, one route setting, slots'], '#b9d6f2'),
    'fast': (8.2, 0.95, 5.0, 1.55,
             'mmsoft.ops.fast: the speed layer', [
                 'spectral routes (eigh, tridiagonal), deflated,',
                 'lapack (SciPy), route_choice (measured, in memory),',
                 'kernel_tiles, threads (work split)'], '#d6e6f5'),
}
# Arrows (start, end) read "imports".
ARROWS = [((4.5, 8.45), (4.5, 8.07)),     # tools -> the opt-in modules
          ((6.75, 5.67), (6.75, 5.2)),    # opt-in modules -> import mmsoft
          ((13.4, 8.45), (13.4, 5.2)),    # configs -> import mmsoft
          ((4.75, 3.85), (4.2, 3.85)),      # models -> registry
          ((9.4, 3.85), (8.85, 3.85)),      # engine -> models
          ((6.8, 3.05), (6.8, 2.55)),       # models -> ops
          ((8.2, 1.72), (7.75, 1.72))]      # fast -> ops: registers at dispatch


def region(ax, xy, width, height, colour, label, label_y):
    ax.add_patch(FancyBboxPatch(xy, width, height, boxstyle='round,pad=0.05',
                                facecolor='none', edgecolor=colour, linewidth=2,
                                linestyle='--'))
    ax.text(xy[0] + 0.2, label_y, label, color=colour, fontsize=12,
            fontweight='bold', va='center')


def main() -> None:
    fig, ax = plt.subplots(figsize=(14, 10))
    ax.set_xlim(0, 14)
    ax.set_ylim(0, 10)
    ax.axis('off')
    region(ax, (0.3, 5.72), 13.15, 2.3, '#b05f00',
           'opt-in: imported by the tools, or named in a config', 7.78)
    region(ax, (0.45, 0.65), 13.1, 4.5, '#2b6cb0',
           'import mmsoft: registers names, changes nothing else', 4.9)
    for x, y, w, h, title, lines, face in BOXES.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle='round,pad=0.04',
                                    facecolor=face, edgecolor='#333333', linewidth=1.2))
        ax.text(x + w / 2, y + h - 0.3, title, ha='center', va='center', fontsize=11.5,
                fontweight='bold', family='monospace')
        for i, line in enumerate(lines):
            ax.text(x + w / 2, y + h - 0.64 - 0.3 * i, line, ha='center',
                    va='center', fontsize=9.5)
    for start, end in ARROWS:
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle='-|>', mutation_scale=16,
                                     color='#444444', linewidth=1.5))
    ax.text(7.0, 0.25, 'Below: torch, SciPy, threadpoolctl. Beside: mmengine, mmcv, '
            'mmpretrain (mmdet and mmseg only through configs). Arrows: imports; '
            'the speed layer registers itself at the core\'s dispatch point.',
            ha='center', va='center', fontsize=10, color='#444444')
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f'wrote {OUT}')


if __name__ == '__main__':
    main()
