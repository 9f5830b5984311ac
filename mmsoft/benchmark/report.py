"""Reporting of benchmark rows: the printed table, the summary and the plot."""
import csv
import math
import statistics
from pathlib import Path
from typing import Dict, Iterable, List, Optional


def write_csv(path: Path, rows: Iterable[Dict],
              columns: Optional[List[str]] = None) -> None:
    """Write ``rows`` to ``path`` as CSV with a header line.

    Args:
        path (Path): The file, created or replaced.
        rows (Iterable[dict]): One dict per line.
        columns (list[str], optional): The columns, in order. Defaults to
            None: every key of the rows, in the order they first appear (a
            row without one leaves its cell empty).
    """
    rows = list(rows)
    columns = columns or list(dict.fromkeys(key for row in rows for key in row))
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def format_row(row: Dict) -> str:
    cells = [f'{row["kind"]:<10}', f'{row["variant"]:<22}', f'{row["size"]:>5}']
    for key in ('forward_s', 'fwd_bwd_s', 'forward_img_s', 'fwd_bwd_img_s',
                'forward_mib', 'fwd_bwd_mib'):
        value = row.get(key)
        cells.append(f'{key}={value:.4g}' if isinstance(value, float) else '')
    return ' | '.join(c for c in cells if c)


def loglog_slope(xs: List[float], ys: List[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum(
        (a - mx)**2 for a in lx)


def summarise(rows: List[Dict], peak: float) -> List[str]:
    lines = [f'fp32 matmul peak: {peak:.1f} GFLOP/s']
    by = {(r['kind'], r['variant'], r['size']): r for r in rows}
    for (kind, variant, size), fast in by.items():
        ref = by.get((kind, f'{variant}-reference', size))
        if kind == 'backbone' and variant.endswith(' soft') and ref:
            arch = variant.split()[0]
            lines.append(
                f'SOFT-{arch} {size} batch: forward {fast["forward_img_s"]:.1f} img/s '
                f'({fast["forward_img_s"] / ref["forward_img_s"]:.2f}x reference), '
                f'fwd+bwd {fast["fwd_bwd_img_s"]:.1f} img/s '
                f'({fast["fwd_bwd_img_s"] / ref["fwd_bwd_img_s"]:.2f}x reference)')
    for kind in ('attention', 'backbone'):
        variants = dict.fromkeys(r['variant'] for r in rows if r['kind'] == kind)
        for variant in variants:
            pts = sorted((r for r in rows
                          if r['kind'] == kind and r['variant'] == variant),
                         key=lambda r: r['tokens'])
            if len(pts) < 2:
                continue
            xs = [p['tokens'] for p in pts]
            text = f'{kind} {variant}: log-log slope of fwd+bwd time vs N ' \
                   f'{loglog_slope(xs, [p["fwd_bwd_s"] for p in pts]):.2f}'
            if 'fwd_bwd_mib' in pts[0]:
                mem = [max(p['fwd_bwd_mib'], 1e-3) for p in pts]
                text += f', of memory {loglog_slope(xs, mem):.2f}'
            lines.append(text)
    biggest = max((r['size'] for r in rows if r['kind'] == 'attention'), default=None)
    chunked = by.get(('attention', 'soft-chunked', biggest))
    reference = by.get(('attention', 'soft-reference', biggest))
    if chunked and reference and 'fwd_bwd_mib' in chunked:
        lines.append(f'attention at {biggest} px: chunked fwd+bwd peak '
                     f'{chunked["fwd_bwd_mib"]:.0f} MiB vs reference '
                     f'{reference["fwd_bwd_mib"]:.0f} MiB')
    return lines


PLOT_TITLES = {'attention': 'Attention at stage-1 width (C=64, 2 heads, r=8)',
               'backbone': 'Whole backbones'}


def plot(rows: List[Dict], path: Path) -> None:
    """Forward+backward time (and memory) against tokens, one row of panels
    per suite with more than one size."""
    import matplotlib  # a test requirement, needed only for the plot
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt  # after choosing the backend
    keys = [k for k in ('fwd_bwd_s', 'fwd_bwd_mib') if any(k in r for r in rows)]
    keys = keys or ['fwd_bwd_s']
    kinds = [k for k in PLOT_TITLES
             if len({r['size'] for r in rows if r['kind'] == k}) > 1]
    kinds = kinds or ['attention']
    fig, axes = plt.subplots(len(kinds), len(keys), squeeze=False,
                             figsize=(6 * len(keys), 4.5 * len(kinds)))
    for kind, row_axes in zip(kinds, axes):
        points = [r for r in rows if r['kind'] == kind]
        for ax, key in zip(row_axes, keys):
            for variant in dict.fromkeys(r['variant'] for r in points):
                pts = sorted((r['tokens'], r.get(key)) for r in points
                             if r['variant'] == variant and r.get(key) is not None)
                if pts:
                    ax.plot(*zip(*pts), marker='o', label=variant)
            ax.set_xscale('log')
            ax.set_yscale('log')
            ax.set_xlabel('stage-1 tokens N')
            unit = 'seconds' if key.endswith('_s') else 'MiB'
            ax.set_ylabel(f'forward+backward {unit}')
            ax.set_title(PLOT_TITLES[kind], fontsize=10)
            ax.grid(True, which='both', alpha=0.3)
        if points:
            row_axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)

