"""Train one backbone with each token mixer and compare accuracy against cost.

The papers' Table 1 setting at a scale a CPU machine can run: SOFT-Tiny with
its stage 1-3 attention swapped (``model.backbone.attn_cfg``), everything
else fixed, trained from scratch through tools/train.py with the same recipe
and several seeds on
  digits  scikit-learn's digits, classification at 32 x 32 (data/digits from
          tools/dataset_converters/prepare_digits.py), top-1 accuracy;
  scenes  the digit scenes, UperNet segmentation at 96 x 96 (data/digit_scenes
          from tools/dataset_converters/prepare_digit_scenes.py), mIoU.
Each run trains in a process of its own (2 threads) and is skipped when its
result.json exists, so a stopped comparison resumes where it was. Parameters
and FLOPs (multiply-accumulates, Newton iterations included) are counted for
the whole model at the task's input size; training images/s from the logged
iteration times; peak memory is the training process's peak resident set.
Writes runs.csv, summary.md and mixers.png to --out-dir.

Examples:
  python tools/analysis/compare_mixers.py                     # full table
  python tools/analysis/compare_mixers.py --quick             # minutes
  python tools/analysis/compare_mixers.py --tasks digits --mixers soft agent \
      --seeds 0 1 --out-dir work_dirs/compare_mixers
"""
import argparse
import copy
import csv
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List

from mmengine.config import Config, DictAction

import mmsoft  # noqa: F401  (registers the mixers)
from mmsoft.apis.mixer_runs import MIXERS, RunResult, run_or_load
from mmsoft.benchmark.cases import attention_cfg
from mmsoft.utils.env import cpu_model
from mmsoft.utils.flops import measure_config

REPO = Path(__file__).resolve().parents[2]


def _digits_schedule(epochs: int) -> Dict[str, object]:
    if epochs < 3:  # two warm-up epochs, then the cosine decay
        raise ValueError(f'digits runs need at least 3 epochs, got {epochs}.')
    return {'train_cfg.max_epochs': epochs, 'train_cfg.val_interval': epochs,
            'param_scheduler.1.end': epochs, 'param_scheduler.1.T_max': epochs - 2,
            'default_hooks.checkpoint.interval': epochs}


def _scenes_schedule(epochs: int) -> Dict[str, object]:
    return {'train_cfg.max_epochs': epochs, 'train_cfg.val_interval': epochs,
            'param_scheduler.1.end': epochs,
            'default_hooks.checkpoint.interval': epochs,
            'model.backbone.init_cfg': None}


TASKS = {
    'digits': dict(config='configs/soft_tiny_digits.py', metric='accuracy/top1',
                   shape=(32, 32), schedule=_digits_schedule, full=8, quick=3,
                   seeds=(0, 1, 2)),
    'scenes': dict(config='configs/upernet_softnorm-tiny_96x96_10e_digit-scenes.py',
                   metric='mIoU', shape=(96, 96), schedule=_scenes_schedule,
                   full=2, quick=1, seeds=(0, 1)),
}
"""Each task: its config, metric, input size, run length in epochs of the
full and the ``--quick`` comparison, and the seeds of the full one."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--tasks', nargs='+', choices=list(TASKS),
                        default=list(TASKS))
    parser.add_argument('--mixers', nargs='+', choices=MIXERS, default=list(MIXERS))
    parser.add_argument('--seeds', type=int, nargs='+', default=None,
                        help="default the task's seeds (0 with --quick)")
    parser.add_argument('--length', type=int, default=None,
                        help='run length in epochs; default the full or quick one')
    parser.add_argument('--quick', action='store_true',
                        help='short runs and one seed: a smaller table in minutes')
    parser.add_argument('--config', nargs='+', action=DictAction, default={},
                        help='replace a task config, TASK=PATH')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='settings for every run, key=value (e.g. a data root)')
    parser.add_argument('--out-dir', default='work_dirs/compare_mixers')
    args = parser.parse_args(argv)
    unknown = set(args.config) - set(TASKS)
    if unknown:
        parser.error(f'--config names unknown tasks {sorted(unknown)}; '
                     f'tasks: {list(TASKS)}')
    return args


def cost(config: Config, attn_cfg: dict, shape) -> tuple:
    """Parameters and MACs of the whole model with ``attn_cfg``."""
    config = copy.deepcopy(config)
    config.model.backbone.attn_cfg = dict(attn_cfg)
    _, (_, params, macs, _) = measure_config(config, *shape)
    return params, macs


def summarise(results: List[RunResult], costs: Dict[tuple, tuple]) -> List[dict]:
    """One row per (task, mixer): cost and the metric's mean and spread."""
    rows = []
    for (task, mixer), (params, macs) in costs.items():
        runs = [r for r in results if (r.task, r.mixer) == (task, mixer)]
        metrics = [r.metric for r in runs]
        rows.append(dict(
            task=task, mixer=mixer, params_m=params / 1e6, gflops=macs / 1e9,
            metric_mean=statistics.mean(metrics),
            metric_std=statistics.stdev(metrics) if len(metrics) > 1 else 0.0,
            seeds=len(runs),
            images_per_s=statistics.median(r.images_per_s for r in runs),
            peak_rss_mib=max(r.peak_rss_mib for r in runs)))
    return rows


def markdown(rows: List[dict]) -> List[str]:
    """The summary as Markdown tables, one per task."""
    lines = []
    for task in dict.fromkeys(r['task'] for r in rows):
        lines += [f'**{task}** ({TASKS[task]["metric"]}, '
                  f'{"x".join(map(str, TASKS[task]["shape"]))} px)', '',
                  '| mixer | params (M) | FLOPs (G) | metric, mean +- std (seeds) '
                  '| train images/s | peak RSS (MiB) |',
                  '|---|---|---|---|---|---|']
        for r in (r for r in rows if r['task'] == task):
            lines.append(
                f"| {r['mixer']} | {r['params_m']:.2f} | {r['gflops']:.3f} | "
                f"{r['metric_mean']:.2f} +- {r['metric_std']:.2f} ({r['seeds']}) | "
                f"{r['images_per_s']:.1f} | {r['peak_rss_mib']:.0f} |")
        lines.append('')
    return lines


def plot(rows: List[dict], path: Path) -> None:
    """Metric against FLOPs per task, with the spread over seeds as error bars."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    tasks = list(dict.fromkeys(r['task'] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2),
                             squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in rows if r['task'] == task):
            ax.errorbar(r['gflops'], r['metric_mean'], yerr=r['metric_std'],
                        fmt='o', capsize=3, label=r['mixer'])
            ax.annotate(r['mixer'], (r['gflops'], r['metric_mean']),
                        textcoords='offset points', xytext=(4, 4), fontsize=8)
        ax.set_xlabel('FLOPs of the whole model (G multiply-adds)')
        ax.set_ylabel(TASKS[task]['metric'])
        ax.set_title(f'SOFT-Tiny backbone, {task}')
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results, costs = [], {}
    for task in args.tasks:
        spec = TASKS[task]
        config_path = args.config.get(task, str(REPO / spec['config']))
        length = args.length or spec['quick' if args.quick else 'full']
        schedule = spec['schedule'](length)
        config = Config.fromfile(config_path)
        config.merge_from_dict({**schedule, **args.cfg_options})
        batch = config.train_dataloader.batch_size
        seeds = args.seeds or ([0] if args.quick else list(spec['seeds']))
        for mixer in args.mixers:
            costs[task, mixer] = cost(config, attention_cfg(mixer), spec['shape'])
            for seed in seeds:
                result = run_or_load(REPO, out_dir, task, config_path, spec['metric'],
                                     batch, mixer, seed, schedule, args.cfg_options)
                print(f'{task} {mixer} seed {seed}: {spec["metric"]} '
                      f'{result.metric:.4g}', flush=True)
                results.append(result)
    with open(out_dir / 'runs.csv', 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    rows = summarise(results, costs)
    lines = [f'CPU: {cpu_model()}', ''] + markdown(rows)
    (out_dir / 'summary.md').write_text('\n'.join(lines))
    plot(rows, out_dir / 'mixers.png')
    print('\n'.join(lines))
    return rows


if __name__ == '__main__':
    main()
