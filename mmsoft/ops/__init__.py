"""Numerics of SOFT: pure torch, no OpenMMLab imports."""
from .bottleneck import (
    METHODS,
    NEWTON_VARIANTS,
    InverseCfg,
    InverseSlot,
    bottleneck_apply,
    bottleneck_inverse,
)
from .execution import (
    NEWTON_ROUTES,
    export_path,
    exporting,
    in_graph,
    newton_node,
    newton_route,
    tile_elements,
    use_newton_node,
    use_newton_route,
    use_tile_elements,
    use_work_split,
    work_split,
)
from .gaussian_kernel import (
    gaussian_kernel,
    half_neg_squared_distance,
    squared_distance,
)
from .inverse import (
    backoff_initial_scale,
    newton_apply,
    newton_inverse,
    newton_iterate,
    newton_iterate_eig,
    newton_residual,
    prefers_eig,
    regularised,
    solve_apply,
    solve_inverse,
)
from .lowrank_attention import (
    exact_gaussian_attention,
    soft_lowrank_attention,
    soft_reference_attention,
)

__all__ = [
    'export_path', 'exporting', 'in_graph', 'NEWTON_ROUTES', 'newton_route',
    'newton_node', 'use_newton_node',
    'use_newton_route', 'work_split', 'use_work_split', 'tile_elements',
    'use_tile_elements',
    'gaussian_kernel', 'half_neg_squared_distance', 'squared_distance',
    'newton_apply', 'newton_inverse', 'newton_iterate', 'newton_iterate_eig',
    'newton_residual', 'prefers_eig', 'regularised', 'backoff_initial_scale',
    'solve_apply', 'solve_inverse', 'METHODS', 'NEWTON_VARIANTS', 'InverseCfg',
    'InverseSlot',
    'bottleneck_apply', 'bottleneck_inverse', 'soft_lowrank_attention',
    'soft_reference_attention', 'exact_gaussian_attention'
]
