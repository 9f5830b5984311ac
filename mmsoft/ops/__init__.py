"""Numerics of SOFT: pure torch, no OpenMMLab imports."""
