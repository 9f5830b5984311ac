"""Benchmarks of SOFT (optional: the tools in ``tools/analysis`` and
``tools/deployment`` use it; the library itself never imports it).

:mod:`.cases` (what is timed), :mod:`.timing` (how), :mod:`.report` (the
tables and plots), :mod:`.detection` (backbones at detection and
segmentation sizes against PVT-Tiny) and :mod:`.background_load` (busy
processes for timing under load).
"""
