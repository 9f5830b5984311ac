"""Shared test setup: ``tests/`` is importable, so ``helpers`` resolves."""
