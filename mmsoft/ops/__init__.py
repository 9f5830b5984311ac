"""Numerics of SOFT, in torch, without OpenMMLab imports.

The core defines every function once: the Gaussian kernel, the Newton
iterate and its reference loop (:mod:`.newton`), the exact solve, the
bottleneck inverse (:class:`InverseCfg`) and the attention functions, and
:mod:`.dispatch` chooses the code that evaluates them. The speed layer
:mod:`.fast` registers faster evaluations there; nothing in the core imports
it.
"""
from . import fast  # noqa: F401  (registers the speed layer at .dispatch)
from .bottleneck import (
    METHODS,
    NEWTON_VARIANTS,
    InverseCfg,
    InverseSlot,
    bottleneck_apply,
    bottleneck_inverse,
)
from .dispatch import (
    newton_apply,
    newton_inverse,
    newton_route,
    newton_route_names,
    use_newton_route,
)
from .exact import solve_apply, solve_inverse
from .execution import (
    export_path,
    exporting,
    in_graph,
    newton_node,
    tile_elements,
    use_newton_node,
    use_tile_elements,
    use_work_split,
    work_split,
)
from .gaussian_kernel import (
    gaussian_kernel,
    half_neg_squared_distance,
    squared_distance,
)
from .lowrank_attention import (
    exact_gaussian_attention,
    soft_lowrank_attention,
    soft_reference_attention,
)
from .newton import backoff_initial_scale, newton_iterate, newton_residual, regularised

__all__ = [
    'METHODS', 'NEWTON_VARIANTS', 'InverseCfg', 'InverseSlot', 'bottleneck_apply',
    'bottleneck_inverse', 'newton_apply', 'newton_inverse', 'newton_route',
    'newton_route_names', 'use_newton_route', 'solve_apply', 'solve_inverse',
    'export_path', 'exporting', 'in_graph', 'newton_node', 'use_newton_node',
    'work_split', 'use_work_split', 'tile_elements', 'use_tile_elements',
    'gaussian_kernel', 'half_neg_squared_distance', 'squared_distance',
    'soft_lowrank_attention', 'soft_reference_attention', 'exact_gaussian_attention',
    'newton_iterate', 'newton_residual', 'regularised', 'backoff_initial_scale',
]
