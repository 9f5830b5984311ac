"""Shared test setup: ``tests/`` is importable, so ``helpers`` resolves, and
every test starts from the same random state, so a tolerance that holds
once holds on every run."""
import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
