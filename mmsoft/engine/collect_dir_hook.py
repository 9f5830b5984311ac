"""Keep the result parts of a distributed evaluation in the work dir.

To gather a distributed evaluation's results, mmengine's metrics (with the
default ``collect_device='cpu'``) have every rank pickle its part into a
folder that rank 0 reads and removes; without a ``collect_dir`` that folder
is ``.dist_test/tmp*`` in the current directory, and a run killed while
evaluating leaves ``part_*.pkl`` files there, and ``.dist_test`` itself is
never removed. :class:`CollectInWorkDirHook` gives each evaluation a hidden
folder in the work dir instead, named like the temporaries of atomic writes
(:mod:`mmsoft.engine.atomic_local_backend`), so the next run or checkpoint
save in that work dir removes one left by a killed run.
"""
import os.path as osp
import shutil
from typing import List, Optional

from mmengine.dist import broadcast_object_list, get_dist_info
from mmengine.evaluator import BaseMetric
from mmengine.hooks import Hook

from .atomic_local_backend import remove_stale_temporaries, temporary_name

COLLECT_NAME = 'dist_results'
"""The collect folder is ``<work_dir>/.dist_results.tmp-<host>-<pid>-<random>``."""


class CollectInWorkDirHook(Hook):
    """Collect distributed evaluation results in the work dir, never in the cwd.

    Before each validation or test it sets ``collect_dir`` on the metrics
    that gather through files (``collect_device='cpu'``, no ``collect_dir``
    of their own) to a new hidden folder of the work dir, and afterwards
    removes the folder if mmengine has not. A single process gathers nothing
    and is left alone. ``tools/train.py`` and ``tools/test.py`` register it.

    Examples:
        >>> from mmsoft.engine import CollectInWorkDirHook
        >>> CollectInWorkDirHook().priority
        'VERY_LOW'
    """

    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self.folder: Optional[str] = None
        self.metrics: List[BaseMetric] = []

    def before_run(self, runner) -> None:
        """Remove collect folders (and other temporaries) of killed runs."""
        if get_dist_info()[0] == 0:
            remove_stale_temporaries(runner.work_dir)

    def before_val(self, runner) -> None:
        self._point_metrics(runner, runner.val_loop)

    def before_test(self, runner) -> None:
        self._point_metrics(runner, runner.test_loop)

    def after_val(self, runner) -> None:
        self._remove()

    def after_test(self, runner) -> None:
        self._remove()

    def _point_metrics(self, runner, loop) -> None:
        rank, world_size = get_dist_info()
        metrics = [m for m in getattr(getattr(loop, 'evaluator', None), 'metrics', [])
                   if m.collect_device == 'cpu' and m.collect_dir is None]
        if world_size == 1 or not metrics:
            return
        folder = [temporary_name(osp.join(runner.work_dir, COLLECT_NAME))
                  if rank == 0 else None]
        broadcast_object_list(folder, src=0)  # every rank writes its part there
        self.folder, self.metrics = folder[0], metrics
        for metric in metrics:
            metric.collect_dir = self.folder

    def _remove(self) -> None:
        if self.folder and get_dist_info()[0] == 0 and osp.isdir(self.folder):
            shutil.rmtree(self.folder)
        for metric in self.metrics:
            metric.collect_dir = None  # the next evaluation gets a new folder
        self.folder, self.metrics = None, []
