"""Numerics of SOFT: pure torch, no OpenMMLab imports."""
from .bottleneck import (
    METHODS,
    NEWTON_VARIANTS,
    InverseCfg,
    bottleneck_apply,
    bottleneck_inverse,
)
from .export_mode import export_path, exporting
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
    'export_path', 'exporting',
    'gaussian_kernel', 'half_neg_squared_distance', 'squared_distance',
    'newton_apply', 'newton_inverse', 'newton_iterate', 'newton_iterate_eig',
    'newton_residual', 'prefers_eig', 'regularised', 'backoff_initial_scale',
    'solve_apply', 'solve_inverse', 'METHODS', 'NEWTON_VARIANTS', 'InverseCfg',
    'bottleneck_apply', 'bottleneck_inverse', 'soft_lowrank_attention',
    'soft_reference_attention', 'exact_gaussian_attention'
]
