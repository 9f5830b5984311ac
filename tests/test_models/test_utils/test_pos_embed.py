"""Position-embedding resizing: traceable, and square grids only."""
import warnings

import pytest
import torch
from torch.jit import TracerWarning

from mmsoft.models.utils import resize_pos_embed


def test_a_trace_resizes_to_each_inputs_grid():
    pos_embed = torch.rand(1, 1 + 4 * 4, 8)

    def add(x):
        return x + resize_pos_embed(pos_embed, x.shape[1:3], 1)[:, 1:].unflatten(
            1, x.shape[1:3])

    with warnings.catch_warnings():
        warnings.simplefilter('error', TracerWarning)  # nothing frozen silently
        traced = torch.jit.trace(add, torch.rand(1, 4, 4, 8))
    x = torch.rand(1, 6, 10, 8)
    assert torch.equal(traced(x), add(x))


def test_a_grid_that_is_not_square_is_refused():
    with pytest.raises(ValueError, match='with 1 extra tokens do not hold a square'):
        resize_pos_embed(torch.rand(1, 1 + 12, 8), (3, 4), 1)
