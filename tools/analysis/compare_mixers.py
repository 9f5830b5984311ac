"""Train one backbone with each token mixer and compare accuracy against cost.

The papers' Table 1 setting at a scale a CPU machine can run: SOFT-Tiny with
its stage 1-3 attention swapped (``model.backbone.attn_cfg``), everything
else fixed, trained from scratch through tools/train.py with the same recipe
and several seeds on
  digits  scikit-learn's digits, classification at 32 x 32 (data/digits from
          tools/dataset_converters/prepare_digits.py), top-1 accuracy;
  scenes  the digit scenes, UperNet segmentation at 96 x 96 (data/digit_scenes
          from tools/dataset_converters/prepare_digit_scenes.py), mIoU.
Each run trains through tools/train.py in a process of its own (2 threads),
from a config written into its work dir (the task's config with the run's
mixer, seed and length), and is skipped when its result.json exists, so a
stopped comparison resumes where it was. Parameters
and FLOPs (multiply-accumulates, Newton iterations included) are counted for
the whole model at the task's input size; training images/s from the logged
iteration times; peak memory is the training process's peak resident set.
Writes runs.csv, summary.md and mixers.png to --out-dir; when they exist
(a finished comparison), pass --force to write them again.

Examples:
  python tools/analysis/compare_mixers.py                     # full table
  python tools/analysis/compare_mixers.py --quick             # minutes
  python tools/analysis/compare_mixers.py --tasks digits --mixers soft agent \
      --seeds 0 1 --out-dir work_dirs/compare_mixers
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

from mmengine.config import Config, DictAction

import mmsoft  # noqa: F401  (registers the mixers)
from mmsoft.benchmark.cases import PEERS, attention_cfg
from mmsoft.benchmark.report import write_csv
from mmsoft.utils import check_outputs_in
from mmsoft.utils.env import cpu_model
from mmsoft.utils.flops import measure_config

REPO = Path(__file__).resolve().parents[2]


def schedule(config: Config, epochs: int, scratch: bool = False) -> Dict[str, object]:
    """Config settings for a run of ``epochs``: the loop's length and
    validation, the checkpoint interval, and every epoch-based scheduler that
    reaches the config's end stretched to the new end (found by what it
    covers, not by its position in the list).

    Args:
        config (Config): The task's config.
        epochs (int): Run length.
        scratch (bool): Train the backbone from scratch (no ``init_cfg``).
            Defaults to False.

    Returns:
        dict: Top-level config keys and their new values.

    Raises:
        ValueError: ``epochs`` does not leave room after a warm-up.
    """
    end = config.train_cfg.max_epochs
    schedulers = []
    for sched in config.param_scheduler:
        sched = dict(sched)
        if sched.get('end') == end:
            begin = sched.get('begin', 0)
            if epochs <= begin:
                raise ValueError(f'runs need more than {begin} epochs (the warm-up), '
                                 f'got {epochs}.')
            sched['end'] = epochs
            if 'T_max' in sched:
                sched['T_max'] = epochs - begin
        schedulers.append(sched)
    settings = dict(
        train_cfg=dict(config.train_cfg, max_epochs=epochs, val_interval=epochs),
        param_scheduler=schedulers,
        default_hooks=dict(config.default_hooks,
                           checkpoint=dict(config.default_hooks.checkpoint,
                                           interval=epochs)))
    if scratch:
        settings['model'] = dict(backbone=dict(init_cfg=None))
    return settings


TASKS = {
    'digits': dict(config='configs/soft_tiny_digits.py', metric='accuracy/top1',
                   shape=(32, 32), scratch=False, full=8, quick=3, seeds=(0, 1, 2)),
    'scenes': dict(config='configs/upernet_softnorm-tiny_96x96_10e_digit-scenes.py',
                   metric='mIoU', shape=(96, 96), scratch=True, full=2, quick=1,
                   seeds=(0, 1)),
}
"""Each task: its config, metric, input size, whether its backbone trains
from scratch, run length in epochs of the full and the ``--quick``
comparison, and the seeds of the full one."""

MIXERS = ('soft', ) + tuple(p for p in PEERS if p != 'softmax-plain')
"""The token mixers compared, by their names in :mod:`mmsoft.benchmark.cases`
(the plain softmax is the same function as ``softmax-sdpa``)."""
OUTPUTS = ('runs.csv', 'summary.md', 'mixers.png')
"""What the tool writes to --out-dir besides the runs' work dirs."""


@dataclass(frozen=True)
class RunResult:
    """What one training run measured.

    Attributes:
        task (str): Task name.
        mixer (str): Mixer name, one of :data:`MIXERS`.
        seed (int): Random seed of the run.
        metric (float): Final validation metric.
        images_per_s (float): Training images per second (median over the
            logged iterations, data loading included).
        peak_rss_mib (float): Peak resident memory of the training process.
    """
    task: str
    mixer: str
    seed: int
    metric: float
    images_per_s: float
    peak_rss_mib: float


def run_dir(out_dir: Path, task: str, mixer: str, seed: int) -> Path:
    """The work dir of one run."""
    return Path(out_dir) / task / mixer / f'seed{seed}'


def run_config(config: str, mixer: str, seed: int,
               schedule: Dict[str, object]) -> str:
    """The text of one run's config: the task's config with the run's token
    mixer, seed and schedule written over it (kept in the run's work dir)."""
    attn_cfg = attention_cfg(mixer)
    if 'attn_cfg' in Config.fromfile(config).model.backbone:
        attn_cfg = dict(_delete_=True, **attn_cfg)  # replace, not merge into
    backbone = dict(schedule.get('model', {}).get('backbone', {}), attn_cfg=attn_cfg)
    settings = dict(schedule, model=dict(backbone=backbone), randomness=dict(seed=seed))
    lines = [f'_base_ = [{str(Path(config).resolve())!r}]']
    lines += [f'{key} = {value!r}' for key, value in settings.items()]
    return '\n'.join(lines) + '\n'


def final_metric(scalars: List[dict], key: str) -> float:
    """The last logged value of ``key`` in mmengine's ``scalars.json`` lines."""
    values = [line[key] for line in scalars if key in line]
    if not values:
        raise RuntimeError(f'The run logged no {key!r}; the task config must '
                           'validate at the end of training.')
    return float(values[-1])


def images_per_second(scalars: List[dict], batch_size: int) -> float:
    """Training images per second from the logged seconds per iteration."""
    times = [line['time'] for line in scalars if 'time' in line and 'loss' in line]
    if not times:
        raise RuntimeError('The run logged no training iteration times.')
    return batch_size / statistics.median(times)


def read_scalars(work_dir: Path) -> List[dict]:
    """The lines of the newest ``<timestamp>/vis_data/scalars.json`` of a run."""
    logs = sorted(Path(work_dir).glob('*/vis_data/scalars.json'))
    if not logs:
        raise RuntimeError(f'No scalars.json under {work_dir}: did training start?')
    return [json.loads(line) for line in logs[-1].read_text().splitlines() if line]


def train_once(config: Path, work_dir: Path, options: Dict[str, object],
               log_path: Path) -> float:
    """Run ``tools/train.py`` in a new process; return its peak RSS in MiB.

    Raises:
        RuntimeError: The training failed; the message names its log file.
    """
    cmd = [sys.executable, str(REPO / 'tools' / 'train.py'), str(config),
           '--work-dir', str(work_dir)]
    if options:
        cmd += ['--cfg-options'] + [f'{k}={v}' for k, v in options.items()]
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f'Training failed (exit {proc.returncode}); see {log_path}.')
    return usage.ru_maxrss / 1024  # KiB on Linux


def run_or_load(out_dir: Path, task: str, config: str, metric: str,
                batch_size: int, mixer: str, seed: int,
                schedule: Dict[str, object],
                extra: Optional[Dict[str, object]] = None) -> RunResult:
    """Train one (task, mixer, seed) unless its ``result.json`` exists.

    Args:
        out_dir (Path): Root of all runs' work dirs.
        task (str): Task name.
        config (str): The task's config file.
        metric (str): Validation metric key, e.g. ``'accuracy/top1'``.
        batch_size (int): Training images per iteration.
        mixer (str): One of :data:`MIXERS`.
        seed (int): Random seed.
        schedule (dict): Config settings that set the run's length
            (:func:`schedule`).
        extra (dict, optional): ``--cfg-options`` for every run.
            Defaults to None.

    Returns:
        RunResult: Loaded from the work dir, or measured now and saved there.
    """
    work_dir = run_dir(out_dir, task, mixer, seed)
    done = work_dir / 'result.json'
    if done.exists():
        return RunResult(**json.loads(done.read_text()))
    work_dir.mkdir(parents=True, exist_ok=True)
    run = work_dir / 'run_config.py'
    run.write_text(run_config(config, mixer, seed, schedule))
    peak = train_once(run, work_dir, extra or {}, work_dir / 'train.log')
    scalars = read_scalars(work_dir)
    result = RunResult(task, mixer, seed, final_metric(scalars, metric),
                       images_per_second(scalars, batch_size), peak)
    tmp = done.with_suffix('.tmp')
    tmp.write_text(json.dumps(asdict(result)))
    tmp.replace(done)  # a killed run never leaves a half-written result
    return result


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
    parser.add_argument('--force', action='store_true',
                        help='replace runs.csv, summary.md and mixers.png in '
                        '--out-dir when they exist')
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
    try:
        check_outputs_in(args.out_dir, OUTPUTS, args.force)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results, costs = [], {}
    for task in args.tasks:
        spec = TASKS[task]
        config_path = args.config.get(task, str(REPO / spec['config']))
        length = args.length or spec['quick' if args.quick else 'full']
        config = Config.fromfile(config_path)
        runs_schedule = schedule(config, length, spec['scratch'])
        config.merge_from_dict({**runs_schedule, **args.cfg_options})
        batch = config.train_dataloader.batch_size
        seeds = args.seeds or ([0] if args.quick else list(spec['seeds']))
        for mixer in args.mixers:
            costs[task, mixer] = cost(config, attention_cfg(mixer), spec['shape'])
            for seed in seeds:
                result = run_or_load(out_dir, task, config_path, spec['metric'],
                                     batch, mixer, seed, runs_schedule,
                                     args.cfg_options)
                print(f'{task} {mixer} seed {seed}: {spec["metric"]} '
                      f'{result.metric:.4g}', flush=True)
                results.append(result)
    runs_file, summary_file, png_file = (out_dir / name for name in OUTPUTS)
    write_csv(runs_file, (asdict(r) for r in results))
    rows = summarise(results, costs)
    lines = [f'CPU: {cpu_model()}', ''] + markdown(rows)
    summary_file.write_text('\n'.join(lines))
    plot(rows, png_file)
    print('\n'.join(lines))
    return rows


if __name__ == '__main__':
    main()
