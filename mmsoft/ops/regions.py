"""Named regions of the numerics, so that counters can attribute their cost.

The FLOP counter (:mod:`mmsoft.utils.flops`) reads the innermost region of
the work it sees; while torch's profiler runs, a region is also a profiler
range ``mmsoft::<name>``, so a profile attributes the time spent inside it
(also waiting for the split's workers) to it.
"""
import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional

import torch

from .execution import compiling

_REGION: ContextVar[Optional[str]] = ContextVar('mmsoft_region', default=None)


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """Mark the work done inside the block as belonging to ``name``.

    Args:
        name (str): Region name, e.g. ``'newton'``. Not marked under
            ``torch.compile``.
    """
    if compiling():  # ContextVar.set would split the graph
        yield
        return
    token = _REGION.set(name)
    profiled = (torch.profiler.record_function(f'mmsoft::{name}')
                if torch.autograd._profiler_enabled() else contextlib.nullcontext())
    try:
        with profiled:
            yield
    finally:
        _REGION.reset(token)


def current_region() -> Optional[str]:
    """The innermost active region's name, or None."""
    return _REGION.get()
