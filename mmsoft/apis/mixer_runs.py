"""Training runs that compare token mixers in one backbone (the papers' Table 1).

Each run trains a task's config with the backbone's ``attn_cfg`` swapped,
through ``tools/train.py`` in a process of its own, and leaves a
``result.json`` in its work dir: the final validation metric, the training
throughput read from mmengine's scalar log, and the peak resident memory of
the process. A run whose ``result.json`` exists is not repeated.
"""
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

from mmsoft.benchmark.cases import attention_cfg

MIXERS = ('soft', 'softmax-sdpa', 'spatial-reduction', 'performer',
          'nystromformer', 'focused-linear', 'agent')
"""The token mixers of the comparison, by their names in
:mod:`mmsoft.benchmark.cases` (the same names as in the benchmark)."""


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


def cfg_options(mixer: str, seed: int, schedule: Dict[str, object],
                extra: Optional[Dict[str, object]] = None) -> List[str]:
    """``--cfg-options`` items of one run: its mixer, seed and schedule."""
    options = {f'model.backbone.attn_cfg.{k}': v
               for k, v in attention_cfg(mixer).items()}
    options.update({'randomness.seed': seed, **schedule, **(extra or {})})
    return [f'{key}={value}' for key, value in options.items()]


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


def train_once(repo: Path, config: str, work_dir: Path, options: List[str],
               log_path: Path) -> float:
    """Run ``tools/train.py`` in a new process; return its peak RSS in MiB.

    Raises:
        RuntimeError: The training failed; the message names its log file.
    """
    cmd = [sys.executable, str(Path(repo) / 'tools' / 'train.py'), config,
           '--work-dir', str(work_dir), '--cfg-options', *options]
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=repo, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f'Training failed (exit {proc.returncode}); see {log_path}.')
    return usage.ru_maxrss / 1024  # KiB on Linux


def run_or_load(repo: Path, out_dir: Path, task: str, config: str, metric: str,
                batch_size: int, mixer: str, seed: int,
                schedule: Dict[str, object],
                extra: Optional[Dict[str, object]] = None) -> RunResult:
    """Train one (task, mixer, seed) unless its ``result.json`` exists.

    Args:
        repo (Path): Repository root (where ``tools/train.py`` lives).
        out_dir (Path): Root of all runs' work dirs.
        task (str): Task name.
        config (str): The task's config file.
        metric (str): Validation metric key, e.g. ``'accuracy/top1'``.
        batch_size (int): Training images per iteration.
        mixer (str): One of :data:`MIXERS`.
        seed (int): Random seed.
        schedule (dict): ``--cfg-options`` that set the run's length.
        extra (dict, optional): More ``--cfg-options`` for every run.
            Defaults to None.

    Returns:
        RunResult: Loaded from the work dir, or measured now and saved there.
    """
    work_dir = run_dir(out_dir, task, mixer, seed)
    done = work_dir / 'result.json'
    if done.exists():
        return RunResult(**json.loads(done.read_text()))
    work_dir.mkdir(parents=True, exist_ok=True)
    peak = train_once(repo, config, work_dir,
                      cfg_options(mixer, seed, schedule, extra),
                      work_dir / 'train.log')
    scalars = read_scalars(work_dir)
    result = RunResult(task, mixer, seed, final_metric(scalars, metric),
                       images_per_second(scalars, batch_size), peak)
    tmp = done.with_suffix('.tmp')
    tmp.write_text(json.dumps(asdict(result)))
    tmp.replace(done)  # a killed run never leaves a half-written result
    return result
