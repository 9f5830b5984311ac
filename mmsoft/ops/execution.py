"""Execution settings of SOFT's numerics, in one place.

Every layer asks this module how to run instead of testing for export,
compilation or tracing itself. None of these settings changes the function
a model computes, only how it is evaluated (up to float rounding):

- :func:`exporting` / :func:`export_path`: the graph-friendly path. The
  default evaluation makes Python-side choices from tensor shapes (the
  Newton iterate through a spectral decomposition from about 100 landmarks
  on CPU, the kernel in cache-sized tiles without autograd, chunks above a
  kernel size, a shortcut when position embeddings already have the input's
  size). A graph export (ONNX, ``torch.export``, TorchScript tracing) would
  freeze each choice at the example input's size, and ``eigh`` has no ONNX
  operator. While :func:`exporting` is true the numerics take one path for
  every size: the Newton iteration as ``2 x num_iters`` matrix products, the
  kernel in one piece, no chunks, embeddings always resized.
- :func:`in_graph`: exporting or compiling, where a data-dependent Python
  check would break or freeze the graph.
- :func:`newton_node` / :func:`use_newton_node`: while exporting, write each
  Newton inverse as one ONNX node of mmsoft's own
  (``ai.onnx.contrib::SOFTNewtonApply``, run by :mod:`mmsoft.deployment`)
  instead of ``2 x num_iters`` standard matrix products.
- :func:`newton_route` / :func:`use_newton_route`: how the Newton iterate is
  evaluated (``MMSOFT_NEWTON_ROUTE``; :mod:`.newton_routes` measures the
  default per machine).
- :func:`work_split` / :func:`use_work_split`: whether CPU work is cut into
  whole pieces on single-threaded workers (``MMSOFT_WORK_SPLIT``;
  :mod:`.thread_split`).
- :func:`tile_elements` / :func:`use_tile_elements`: kernel entries per tile
  of the evaluation without autograd (``MMSOFT_TILE_ELEMENTS``; by default
  sized from the CPU's L2 cache).

Settings made with the ``use_*`` context managers hold for the current
thread (and asyncio task) only; the environment variables, read at each
call, are the process-wide defaults.
"""
import contextlib
import functools
import os
from contextvars import ContextVar
from typing import Iterator, Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

NEWTON_ROUTES = ('auto', 'loop', 'eigh', 'tridiagonal')
"""Settings of :func:`newton_route`: ``'auto'`` (the measured choice of
:mod:`.newton_routes`), ``'loop'`` (the ``2 T`` matrix products), ``'eigh'``
and ``'tridiagonal'`` (:mod:`.newton_spectral`)."""
NEWTON_ROUTE_ENV = 'MMSOFT_NEWTON_ROUTE'
WORK_SPLIT_ENV = 'MMSOFT_WORK_SPLIT'
TILE_ENV = 'MMSOFT_TILE_ELEMENTS'

_FORCED_EXPORT: ContextVar[bool] = ContextVar('mmsoft_export_path', default=False)
_NEWTON_NODE: ContextVar[bool] = ContextVar('mmsoft_newton_node', default=False)
_ROUTE: ContextVar[Optional[str]] = ContextVar('mmsoft_newton_route', default=None)
_SPLIT: ContextVar[Optional[bool]] = ContextVar('mmsoft_work_split', default=None)
_TILE: ContextVar[Optional[int]] = ContextVar('mmsoft_tile_elements', default=None)


# ------------------------------------------------------------------ graphs
def exporting() -> bool:
    """True while exporting a graph or inside :func:`export_path`.

    Exporting means ``torch.onnx.export`` (either exporter), ``torch.export``
    or ``torch.jit.trace``.
    """
    return (_FORCED_EXPORT.get() or torch.onnx.is_in_onnx_export()
            or torch.jit.is_tracing() or torch.compiler.is_exporting())


def compiling() -> bool:
    """True while ``torch.compile`` (dynamo) traces the code."""
    return torch.compiler.is_compiling()


def in_graph() -> bool:
    """Exporting or compiling: no data-dependent Python branch may run."""
    return exporting() or compiling()


def eager_cpu(x: torch.Tensor) -> bool:
    """Whether ``x`` is a CPU tensor seen by plain eager code (no compiling,
    tracing, scripting or ``TorchDispatchMode``, whose state is per thread),
    the only place where work may move to other threads."""
    return (x.device.type == 'cpu' and not in_graph() and not torch.jit.is_scripting()
            and _get_current_dispatch_mode() is None)


@contextlib.contextmanager
def export_path(enabled: bool = True) -> Iterator[None]:
    """Use the graph-friendly path in eager mode too (the documented switch).

    Args:
        enabled (bool): Force the path on (True) or leave the choice to
            :func:`exporting`'s automatic checks (False). Defaults to True.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import export_path, exporting
        >>> with export_path():
        ...     print(exporting())
        True
        >>> exporting()
        False
    """
    token = _FORCED_EXPORT.set(bool(enabled))
    try:
        yield
    finally:
        _FORCED_EXPORT.reset(token)


def newton_node() -> bool:
    """Whether an export writes each Newton inverse as one custom node."""
    return _NEWTON_NODE.get()


@contextlib.contextmanager
def use_newton_node(enabled: bool = True) -> Iterator[None]:
    """Export Newton inverses as the custom node ``SOFTNewtonApply`` (this
    thread); see :func:`mmsoft.deployment.export_module`.

    Args:
        enabled (bool): Write the node (True) or the standard matrix
            products (False). Defaults to True.
    """
    token = _NEWTON_NODE.set(bool(enabled))
    try:
        yield
    finally:
        _NEWTON_NODE.reset(token)


# ------------------------------------------------------------ Newton route
def _check_route(route: str, source: str) -> str:
    if route not in NEWTON_ROUTES:
        raise ValueError(f'{source}={route!r} is not a Newton route; use one of '
                         f'{NEWTON_ROUTES}.')
    return route


def newton_route() -> str:
    """The Newton route in force: :func:`use_newton_route`'s, else
    ``$MMSOFT_NEWTON_ROUTE``, else ``'auto'``; one of :data:`NEWTON_ROUTES`."""
    route = _ROUTE.get()
    if route is not None:
        return route
    env = os.environ.get(NEWTON_ROUTE_ENV, '').strip()
    return _check_route(env, NEWTON_ROUTE_ENV) if env else 'auto'


@contextlib.contextmanager
def use_newton_route(route: str) -> Iterator[None]:
    """Evaluate Newton iterates by ``route`` inside the block (this thread).

    A route other than ``'auto'`` is used for every size and device it can
    run on: ``'eigh'`` and ``'tridiagonal'`` need a CPU tensor outside an
    export (``'tridiagonal'`` also SciPy), ``'loop'`` runs everywhere.

    Args:
        route (str): One of :data:`NEWTON_ROUTES`.

    Examples:
        >>> import torch
        >>> from mmsoft.ops import newton_inverse, use_newton_route
        >>> with use_newton_route('loop'):
        ...     v = newton_inverse(torch.eye(3) * 2, reg=0.0)
    """
    token = _ROUTE.set(_check_route(route, 'route'))
    try:
        yield
    finally:
        _ROUTE.reset(token)


# -------------------------------------------------------------- work split
def work_split() -> bool:
    """Whether CPU work is split over single-threaded workers:
    :func:`use_work_split`'s setting, else ``$MMSOFT_WORK_SPLIT`` (``0`` turns
    it off), else on."""
    enabled = _SPLIT.get()
    if enabled is not None:
        return enabled
    env = os.environ.get(WORK_SPLIT_ENV, '').strip()
    if env not in ('', '0', '1'):
        raise ValueError(f'{WORK_SPLIT_ENV}={env!r}; use 1 (split, the default) or 0.')
    return env != '0'


@contextlib.contextmanager
def use_work_split(enabled: bool) -> Iterator[None]:
    """Split CPU work over single-threaded workers inside the block, or not
    (this thread).

    Args:
        enabled (bool): Split (the default behaviour) or let every torch
            operation use the intra-op threads itself.
    """
    token = _SPLIT.set(bool(enabled))
    try:
        yield
    finally:
        _SPLIT.reset(token)


# ------------------------------------------------------------- kernel tiles
L2_TILES = 4
"""A kernel tile holds this many times the per-core L2 cache, in float32.
Measured on 2 cores, SOFT's three stage shapes at 800 x 1344: with 2 MiB L2
(AVX-512 Xeon) 8 MiB tiles were fastest, with 512 KiB L2 (AMD EPYC, Zen 3)
1-2 MiB tiles, 1.25x faster than 8 MiB ones."""
DEFAULT_L2 = 2 << 20


@functools.lru_cache(maxsize=None)
def l2_cache_bytes() -> int:
    """The per-core L2 cache of CPU 0 from Linux's sysfs, else
    :data:`DEFAULT_L2`."""
    root = '/sys/devices/system/cpu/cpu0/cache'
    try:
        for index in sorted(os.listdir(root)):
            with open(os.path.join(root, index, 'level')) as f:
                if f.read().strip() != '2':
                    continue
            with open(os.path.join(root, index, 'size')) as f:
                size = f.read().strip().upper()
            scale = {'K': 1 << 10, 'M': 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip('KM')) * scale
    except (OSError, ValueError):
        pass
    return DEFAULT_L2


def tile_elements() -> int:
    """Kernel entries per tile: :func:`use_tile_elements`'s setting, else
    ``$MMSOFT_TILE_ELEMENTS``, else :data:`L2_TILES` times the L2 cache (in
    float32 entries)."""
    elements = _TILE.get()
    if elements is not None:
        return elements
    env = os.environ.get(TILE_ENV, '').strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f'{TILE_ENV}={env!r}; use a positive number of entries.')
        return int(env)
    return L2_TILES * l2_cache_bytes() // 4


@contextlib.contextmanager
def use_tile_elements(elements: int) -> Iterator[None]:
    """Evaluate kernels in tiles of ``elements`` entries inside the block
    (this thread).

    Args:
        elements (int): Kernel entries per tile (at least one row is taken).
    """
    if int(elements) < 1:
        raise ValueError(f'elements must be positive, got {elements}.')
    token = _TILE.set(int(elements))
    try:
        yield
    finally:
        _TILE.reset(token)
