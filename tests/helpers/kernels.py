"""Landmark kernels as SOFT's attention makes them, for the Newton tests."""
import torch

from mmsoft.ops import gaussian_kernel


def landmark_kernels(heads, m, seed=0, spread=0.5, duplicates=0):
    """Kernels of ``heads`` landmark sets in 32 dimensions, scaled as SOFT
    scales queries; ``duplicates`` landmarks repeat others exactly (a singular
    kernel, as coinciding landmarks give)."""
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    points = points * 32**-0.25 * spread
    if duplicates:
        points[:, -duplicates:] = points[:, :duplicates]
    return gaussian_kernel(points, points)
