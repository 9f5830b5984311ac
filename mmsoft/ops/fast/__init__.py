"""The speed layer of SOFT's numerics: faster evaluations of the core's functions.

It plugs into :mod:`mmsoft.ops.dispatch` and changes no function: the
spectral Newton routes ``'eigh'`` and ``'tridiagonal'`` (:mod:`.spectral`,
with :mod:`.deflated` and SciPy's LAPACK through :mod:`.lapack`), the
``'auto'`` setting's measured choice between them and the loop
(:mod:`.route_choice`), and the kernel products in cache-sized tiles
(:mod:`.kernel_tiles`), all split into whole pieces over single-threaded
workers (:mod:`.threads`). The design page lists what it changes in a
process: the threads it starts and the one process-wide count it lowers
while it runs.
"""
from ..dispatch import (
    register_lowrank_products,
    register_newton_route,
    register_route_chooser,
)
from .kernel_tiles import PRODUCTS
from .route_choice import choose
from .spectral import EIGH, TRIDIAGONAL

register_newton_route(EIGH)
register_newton_route(TRIDIAGONAL)
register_route_chooser(choose)
register_lowrank_products(PRODUCTS)
