"""Where a call's time goes, by kind of work, and how close it runs to the
machine's matrix-product peak.

One call is profiled with torch's profiler; every operation the calling
thread runs is put in one kind, by the nearest marker around it (mmsoft's
regions ``mmsoft::newton`` and ``mmsoft::kernel``, its autograd functions
and operators, forward and backward) or else by its own name, and its self
time (the wall time of the calling thread, waiting for mmsoft's split
workers included) is added to that kind. The multiply-accumulates of the
same call come from :class:`mmsoft.utils.flops.FlopCounter`.
"""
from typing import Callable, Dict, Optional

from torch.profiler import ProfilerActivity, profile, record_function

from mmsoft.ops.regions import current_region
from mmsoft.utils.flops import FlopCounter

KINDS = ('inverse', 'attention products', 'convolutions', 'linear layers',
         'norms and element-wise', 'copies', 'other')
"""The kinds of work, in the order the tables print them. ``'inverse'`` is
the Newton iterate (every route); ``'attention products'`` are SOFT's
kernel products and landmark kernel, and a softmax attention's products."""

_MARKERS = (
    ('inverse', ('_NewtonApply', 'mmsoft::newton')),
    ('attention products', ('_LowRank', 'mmsoft::kernel')),
)
_NAMES = (
    ('convolutions', ('conv',)),
    ('linear layers', ('addmm', 'aten::mm', 'aten::linear', 'aten::matmul')),
    ('attention products', ('bmm', 'scaled_dot_product', 'aten::_softmax')),
    ('copies', ('copy_', 'contiguous', 'clone', 'aten::cat', '_to_copy',
                'aten::stack', 'aten::to')),
)


_ROOT = 'mmsoft.benchmark::call'


def kind_of(name: str, marker: Optional[str]) -> str:
    """The kind of an operation called ``name`` under the marker ``marker``
    (the nearest enclosing event that names one of :data:`_MARKERS`)."""
    if marker is not None:
        return marker
    for kind, parts in _NAMES:
        if any(part in name for part in parts):
            return kind
    return 'norms and element-wise' if name.startswith('aten::') else 'other'


def _marker(name: str) -> Optional[str]:
    for kind, parts in _MARKERS:
        if any(part in name for part in parts):
            return kind
    return None


def time_by_kind(call: Callable[[], None]) -> Dict[str, float]:
    """Seconds of one ``call`` by kind of work (:data:`KINDS`), from the
    calling thread's profile (``'other'`` holds the time between operations
    too: Python, the module calls); ``'total'`` is their sum."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(_ROOT):
            call()
    events = prof.events()
    root = next(e for e in events if e.name == _ROOT)
    seconds = dict.fromkeys(KINDS, 0.0)
    for event in events:
        if event.thread != root.thread:  # a split worker: its caller waits
            continue
        marker, parent = None, event
        while parent is not None and marker is None:
            marker = _marker(parent.name)
            parent = parent.cpu_parent
        kind = 'other' if event is root else kind_of(event.name, marker)
        seconds[kind] += event.self_cpu_time_total / 1e6
    seconds['total'] = sum(seconds[k] for k in KINDS)
    return seconds


def macs_by_kind(call: Callable[[], None]) -> Dict[str, int]:
    """Multiply-accumulates of one ``call`` by kind (each ``exp`` counts
    one): the Newton region's as ``'inverse'``, the kernel region's as
    ``'attention products'``, the rest by operator; ``'total'`` too."""

    class ByKind(FlopCounter):
        def __init__(self) -> None:
            super().__init__()
            self.kinds: Dict[str, int] = dict.fromkeys(KINDS, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = self.total
            out = super().__torch_dispatch__(func, types, args, kwargs)
            region = current_region()
            marker = _marker(f'mmsoft::{region}') if region else None
            self.kinds[kind_of(f'aten::{func._overloadpacket.__name__}', marker)] += (
                self.total - before)
            return out

    with ByKind() as counter:
        call()
    return {**counter.kinds, 'total': counter.total}
