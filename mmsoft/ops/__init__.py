"""Numerics of SOFT: pure torch, no OpenMMLab imports."""
from .gaussian_kernel import gaussian_kernel, squared_distance
from .inverse import (
    newton_inverse,
    newton_iterate,
    newton_iterate_eig,
    newton_residual,
    solve_inverse,
)
from .soft_attention import (
    bottleneck_inverse,
    exact_gaussian_attention,
    soft_lowrank_attention,
    soft_reference_attention,
)

__all__ = [
    'gaussian_kernel', 'squared_distance', 'newton_inverse', 'newton_iterate',
    'newton_iterate_eig', 'newton_residual', 'solve_inverse', 'bottleneck_inverse',
    'soft_lowrank_attention', 'soft_reference_attention', 'exact_gaussian_attention'
]
