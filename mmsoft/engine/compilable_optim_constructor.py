"""An optimizer constructor whose parameter groups ``torch.compile`` can trace."""
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from torch import nn

from mmsoft.registry import OPTIM_WRAPPER_CONSTRUCTORS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class CompilableOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """mmengine's default constructor with plain-dict parameter groups.

    The default constructor leaves every parameter group as a ``ConfigDict``
    (its ``paramwise_cfg`` groups pass through the optimizer config), and
    ``torch.compile`` stops with an internal error when it traces an
    optimizer step over such groups, which mmengine's ``compile=True`` does
    (it compiles the whole ``train_step``). ``prepare_config`` selects this
    constructor for configs that set ``compile`` and name no constructor.
    Registered as ``'mmsoft.CompilableOptimWrapperConstructor'`` and, by
    :mod:`mmsoft.runtime`, under its plain name in mmengine's root registry.
    Same arguments as ``DefaultOptimWrapperConstructor``.
    """

    def __call__(self, model: nn.Module) -> OptimWrapper:
        wrapper = super().__call__(model)
        groups = wrapper.optimizer.param_groups
        groups[:] = [dict(group) for group in groups]
        return wrapper
