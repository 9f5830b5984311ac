"""Named regions of the numerics, so that counters can attribute their cost."""
import contextlib
from contextvars import ContextVar
from typing import Iterator, Optional

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
    try:
        yield
    finally:
        _REGION.reset(token)


def current_region() -> Optional[str]:
    """The innermost active region's name, or None."""
    return _REGION.get()
