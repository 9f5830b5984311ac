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
- :func:`work_split` / :func:`use_work_split`: whether the speed layer cuts
  CPU work into whole pieces on single-threaded workers
  (``MMSOFT_WORK_SPLIT``; :mod:`mmsoft.ops.fast.threads`).
- :func:`tile_elements` / :func:`use_tile_elements`: kernel entries per tile
  of the speed layer's kernel products (``MMSOFT_TILE_ELEMENTS``; by default
  sized from the CPU's L2 cache).

How the Newton iterate is evaluated is the route setting of
:mod:`.dispatch` (``MMSOFT_NEWTON_ROUTE``, :func:`~.dispatch.use_newton_route`),
the module that chooses the code.

Settings made with the ``use_*`` context managers hold for the current
thread (and asyncio task) only; the environment variables, read at each
call, are the process-wide defaults.
"""
import contextlib
import os
from contextvars import ContextVar
from typing import Iterator, Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

WORK_SPLIT_ENV = 'MMSOFT_WORK_SPLIT'
TILE_ENV = 'MMSOFT_TILE_ELEMENTS'

_FORCED_EXPORT: ContextVar[bool] = ContextVar('mmsoft_export_path', default=False)
_NEWTON_NODE: ContextVar[bool] = ContextVar('mmsoft_newton_node', default=False)
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
def tile_elements() -> Optional[int]:
    """Kernel entries per tile: :func:`use_tile_elements`'s setting, else
    ``$MMSOFT_TILE_ELEMENTS``, else None (the speed layer sizes tiles from
    the CPU's L2 cache, :func:`mmsoft.ops.fast.kernel_tiles.default_tile_elements`)."""
    elements = _TILE.get()
    if elements is not None:
        return elements
    env = os.environ.get(TILE_ENV, '').strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f'{TILE_ENV}={env!r}; use a positive number of entries.')
        return int(env)
    return None


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
