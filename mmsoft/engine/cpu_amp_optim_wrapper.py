"""Mixed precision on CPU: mmengine's AmpOptimWrapper only runs on accelerators."""
from contextlib import contextmanager
from typing import Iterator, Union

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mmsoft.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class CPUAmpOptimWrapper(OptimWrapper):
    """Run forward and loss under CPU autocast (bfloat16 by default).

    bfloat16 keeps float32's exponent range, so no loss scaling is needed.
    Registered as ``'mmsoft.CPUAmpOptimWrapper'`` and, by
    :mod:`mmsoft.runtime`, as ``'CPUAmpOptimWrapper'`` in mmengine's root
    registry, so every toolbox's configs find it by name.

    Args:
        dtype (str | torch.dtype): Autocast dtype. Defaults to
            ``'bfloat16'``.
        **kwargs: Arguments of :class:`mmengine.optim.OptimWrapper`.

    Examples:
        >>> import torch
        >>> from mmsoft.engine import CPUAmpOptimWrapper
        >>> model = torch.nn.Linear(4, 2)
        >>> wrapper = CPUAmpOptimWrapper(
        ...     optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        >>> with wrapper.optim_context(model):
        ...     out = model(torch.rand(3, 4))
        >>> out.dtype
        torch.bfloat16
        >>> # in a config:
        >>> optim_wrapper = dict(type='CPUAmpOptimWrapper',
        ...                      optimizer=dict(type='AdamW', lr=1e-3))
    """

    def __init__(self, dtype: Union[str, torch.dtype] = 'bfloat16', **kwargs) -> None:
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype

    @contextmanager
    def optim_context(self, model: nn.Module) -> Iterator[None]:
        with super().optim_context(model), torch.autocast(
                device_type='cpu', dtype=self.cast_dtype):
            yield
