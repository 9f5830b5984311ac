"""Matrices for the numerics tests, and how far apart two results are."""
import torch

from mmsoft.ops import gaussian_kernel


def landmark_kernels(heads, m, seed=0, spread=0.5, duplicates=0, dtype=torch.float64):
    """Kernels of ``heads`` landmark sets in 32 dimensions, scaled as SOFT
    scales queries; a smaller ``spread`` gives closer landmarks and worse
    conditioning; ``duplicates`` landmarks repeat others exactly (a singular
    kernel, as coinciding landmarks give)."""
    gen = torch.Generator().manual_seed(seed)
    points = torch.randn(heads, m, 32, generator=gen, dtype=torch.float64)
    points = points * 32**-0.25 * spread
    if duplicates:
        points[:, -duplicates:] = points[:, :duplicates]
    return gaussian_kernel(points, points).to(dtype)


def random_spd(batch, size, dtype=torch.float64, seed=0):
    """Well-conditioned symmetric positive definite matrices."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(batch, size, size, generator=gen, dtype=dtype)
    return base @ base.transpose(-2, -1) / size + 0.5 * torch.eye(size, dtype=dtype)


def relative(x, ref):
    """``||x - ref|| / ||ref||`` (Frobenius, over the whole tensor)."""
    return float((x.detach() - ref).norm() / ref.norm())
