"""Shared test setup: ``tests/`` is importable, so ``helpers`` resolves;
every test starts from the same random state, so a tolerance that holds
once holds on every run; and what a test's runners register globally ends
with the test."""
import logging
import random

import numpy as np
import pytest
import torch
from mmengine.utils import ManagerMixin


@pytest.fixture(autouse=True)
def _seeded():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def _managed_classes():
    classes, stack = [], [ManagerMixin]
    while stack:
        cls = stack.pop()
        classes.append(cls)
        stack.extend(cls.__subclasses__())
    return classes


@pytest.fixture(autouse=True)
def _own_runner_instances():
    """Drop the visualizers, message hubs and loggers a test created.

    A runner finds them by its experiment name, a timestamp to the second,
    so the next test's runner could pick up this one's, still writing into
    this test's (removed) work dir and holding its logged scalars.
    """
    before = {cls: set(cls._instance_dict) for cls in _managed_classes()}
    yield
    for cls in _managed_classes():
        for name in set(cls._instance_dict) - before.get(cls, set()):
            instance = cls._instance_dict.pop(name)
            for handler in getattr(instance, 'handlers', []):
                if isinstance(handler, logging.FileHandler):
                    handler.close()


@pytest.fixture(autouse=True, scope='session')
def _route_cache(tmp_path_factory):
    """No test reads a table of Newton routes the user kept: the kept table's
    folder is an empty one of the session's (tools run as subprocesses
    inherit it), so the 'auto' route is measured in each process."""
    import os
    os.environ['MMSOFT_CACHE_DIR'] = str(tmp_path_factory.mktemp('mmsoft_cache'))
    yield
