"""Whether the graph-friendly path of the numerics is in force.

The default evaluation makes Python-side choices from tensor shapes: the
Newton iterate through one eigendecomposition from 96 landmarks on CPU, the
kernel in cache-sized tiles without autograd, chunks above a kernel size, a
shortcut when position embeddings already have the input's size. A graph
export (ONNX, ``torch.export``, TorchScript tracing) would freeze each choice
at the example input's size, and ``eigh`` has no ONNX operator. While
:func:`exporting` is true the numerics take one path for every size instead:
the Newton iteration as 2 x ``num_iters`` matrix products, the kernel in one
piece, no chunks, embeddings always resized. It computes the same function
(the Newton iterate equals its eigendecomposition form up to float32 rounding,
below 1e-5 relative through SOFT-Tiny at detection sizes).
"""
import contextlib
from contextvars import ContextVar
from typing import Iterator

import torch

_FORCED: ContextVar[bool] = ContextVar('mmsoft_export_path', default=False)


def exporting() -> bool:
    """True while exporting a graph or inside :func:`export_path`.

    Exporting means ``torch.onnx.export`` (either exporter), ``torch.export``
    or ``torch.jit.trace``.
    """
    return (_FORCED.get() or torch.onnx.is_in_onnx_export() or torch.jit.is_tracing()
            or torch.compiler.is_exporting())


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
    token = _FORCED.set(bool(enabled))
    try:
        yield
    finally:
        _FORCED.reset(token)
