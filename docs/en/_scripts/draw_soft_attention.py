"""Draw docs/soft_attention.png: SOFT attention's low-rank Gaussian kernel.

Run from the repository root: python docs/en/_scripts/draw_soft_attention.py
"""
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / 'soft_attention.png'
KERNEL = '#9ecae1'
INVERSE = '#fdae6b'


def box(ax, x, y, w, h, title, text, face='#eeeeee'):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle='round,pad=0.05',
                                facecolor=face, edgecolor='#333333', linewidth=1.2))
    ax.text(x + w / 2, y + h * 0.68, title, ha='center', va='center', fontsize=12,
            fontweight='bold')
    ax.text(x + w / 2, y + h * 0.3, text, ha='center', va='center', fontsize=10)


def arrow(ax, start, end):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle='-|>', mutation_scale=16,
                                 color='#444444', linewidth=1.5))


def matrix(ax, x, y, w, h, face, label, below, dashed=False):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor='#333333',
                           linewidth=1.4, linestyle='--' if dashed else '-'))
    ax.text(x + w / 2, y + h / 2, label, ha='center', va='center', fontsize=12.5)
    ax.text(x + w / 2, y - 0.3, below, ha='center', va='top', fontsize=9.5)


def main() -> None:
    fig, ax = plt.subplots(figsize=(13, 7))
    ax.set_xlim(0, 13)
    ax.set_ylim(0, 7)
    ax.axis('off')

    # How the landmarks are made.
    box(ax, 0.2, 5.3, 3.2, 1.3, r'tokens $X$', r'$N$ tokens of $C$ channels')
    box(ax, 4.6, 5.3, 3.6, 1.3, r'queries $Q = X W_q$',
        'the keys too: $k(Q, Q)$ is\nsymmetric positive semi-definite')
    box(ax, 9.4, 5.3, 3.4, 1.3, r'landmarks $\tilde{Q}$',
        r'strided $r \times r$ conv of $Q$,' '\n' r'$m = N / r^2$ tokens')
    arrow(ax, (3.45, 5.95), (4.55, 5.95))
    arrow(ax, (8.25, 5.95), (9.35, 5.95))

    # The kernel and its low-rank product.
    ax.text(6.5, 4.6, r'Gaussian kernel  $k(a, b) = \exp(-\|a - b\|^2 / 2)$'
            r'  instead of $\mathrm{softmax}(Q K^T)$', ha='center', va='center',
            fontsize=12)
    matrix(ax, 0.4, 0.9, 3.0, 3.0, '#f2f2f2', r'$S = k(Q, Q)$' '\n' r'$N \times N$',
           'never formed', dashed=True)
    ax.text(3.8, 2.4, '~', ha='center', va='center', fontsize=26)
    matrix(ax, 4.3, 0.9, 0.75, 3.0, KERNEL, r'$A_1$',
           r'$k(Q, \tilde{Q})$' '\n' r'$N \times m$')
    ax.text(5.4, 2.4, '.', ha='center', va='center', fontsize=26)
    matrix(ax, 5.75, 2.02, 0.75, 0.75, INVERSE, r'$A_2^{+}$',
           r'pinv of $k(\tilde{Q}, \tilde{Q})$, $m \times m$,' '\n'
           'by 20 Newton-Raphson steps')
    ax.text(6.85, 2.4, '.', ha='center', va='center', fontsize=26)
    matrix(ax, 7.2, 2.02, 3.0, 0.75, KERNEL, r'$A_1^T$', r'$m \times N$')
    ax.text(11.6, 2.4, 'output\n' r'$A_1 (A_2^{+} (A_1^T V))$' '\n\n'
            r'$O(N m)$ time' '\nand memory', ha='center', va='center', fontsize=12)
    fig.tight_layout()
    fig.savefig(OUT, dpi=100)
    print(f'wrote {OUT}')


if __name__ == '__main__':
    main()
