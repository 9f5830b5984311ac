"""The ``m x m`` middle factor of SOFT's low-rank kernel, and the one object
that describes how it is computed.

SOFT approximates the kernel matrix by ``A1 P A1^T`` with ``A2 = k(K~, K~)``
the kernel between landmarks and ``P`` an approximate inverse of it
(SOFT-Norm: ``D^-1/2 pinv(A2) D^-1/2`` with ``D = diag(A2 1)``).
:class:`InverseCfg` says which inverse; :func:`bottleneck_apply` computes
``P @ rhs`` from it.
"""
import dataclasses
from typing import Optional, Union

from torch import Tensor

from .dispatch import newton_apply
from .exact import solve_apply
from .execution import exporting
from .newton import identity_like

METHODS = ('newton', 'solve')
NEWTON_VARIANTS = {
    'ridge': dict(reg=0.01, backoff=False),
    'backoff': dict(reg=0.0, backoff=True),
}
"""The two Newton inverses SOFT checkpoints were trained with.

``'ridge'``: ``P = A2 + 0.01 I``, ``alpha = 0.9 * 2 / (max row sum)^2`` per
matrix (the authors' plain SOFT code since July 2022, and mmsoft's default
for training). ``'backoff'``: no ridge, ``alpha = 2 / (max row sum)^2`` over
the heads of one image, halved while ``I - P V_0`` is not a contraction (the
code every released checkpoint comes from)."""


@dataclasses.dataclass(frozen=True)
class InverseCfg:
    """How SOFT inverts the landmark kernel ``A2``: one immutable description.

    The fields define the function; how a Newton iterate is evaluated (the
    same function up to rounding) is the route setting of
    :mod:`~mmsoft.ops.dispatch`, not part of it.

    Args:
        method (str): ``'newton'`` (``num_iters`` Newton-Raphson steps on
            ``P = A2 + reg I``, the models' inverse) or ``'solve'`` (the exact
            inverse of ``P``; a different function where the Newton steps
            have not converged, as at detection sizes). Defaults to
            ``'newton'``.
        num_iters (int): Newton iterations. Defaults to 20.
        reg (float): Ridge added to ``A2``'s diagonal. Defaults to 0.01.
        backoff (bool): Newton only: start from the released checkpoints'
            step (``2 / (max row sum)^2`` over the heads of one image, halved
            while ``I - P V_0`` is not a contraction) instead of
            ``0.9 * 2 / (max row sum)^2`` per matrix. Defaults to False.
        normalize (bool): SOFT-Norm: ``D^-1/2 pinv(A2) D^-1/2``. Defaults to
            False.

    Examples:
        >>> from mmsoft.ops import InverseCfg
        >>> cfg = InverseCfg.from_variant('backoff')
        >>> cfg.reg, cfg.backoff, cfg.variant
        (0.0, True, 'backoff')
        >>> InverseCfg(method='solve', backoff=True)
        Traceback (most recent call last):
        ...
        ValueError: backoff=True needs method='newton', got 'solve'.
    """

    method: str = 'newton'
    num_iters: int = 20
    reg: float = 0.01
    backoff: bool = False
    normalize: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f'Unknown inverse method {self.method!r}; use one of '
                             f'{METHODS} (how a Newton iterate is evaluated is the '
                             'route setting, mmsoft.ops.use_newton_route).')
        if self.method != 'newton' and self.backoff:
            raise ValueError(f"backoff=True needs method='newton', got "
                             f'{self.method!r}.')
        if not isinstance(self.num_iters, int) or self.num_iters < 0:
            raise ValueError(f'num_iters must be a non-negative int, got '
                             f'{self.num_iters!r}.')
        if self.reg < 0:
            raise ValueError(f'reg must be >= 0, got {self.reg}.')

    @classmethod
    def build(cls, cfg: Union['InverseCfg', dict, None] = None,
              **fields) -> 'InverseCfg':
        """An InverseCfg from a config dict (or one as is), with ``fields`` set.

        A ``variant`` key (``'ridge'`` or ``'backoff'``, see
        :data:`NEWTON_VARIANTS`) sets ``reg`` and ``backoff`` together.
        """
        if isinstance(cfg, cls):
            return dataclasses.replace(cfg, **fields)
        cfg = dict(cfg or {})
        if 'use_eig' in cfg:
            raise ValueError(
                f"use_eig={cfg['use_eig']!r} is gone: how the Newton iterate is "
                'evaluated is the one route setting, the same function either '
                "way; use mmsoft.ops.use_newton_route('eigh') (or 'loop') or "
                'MMSOFT_NEWTON_ROUTE=eigh, and drop use_eig from the inverse '
                'settings.')
        variant = cfg.pop('variant', None)
        if variant is not None:
            cfg = {**newton_variant(variant), **cfg}
        unknown = set(cfg) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f'Unknown inverse settings {sorted(unknown)}; allowed: '
                             f'{[f.name for f in dataclasses.fields(cls)]} and '
                             "'variant'.")
        return cls(**{**cfg, **fields})

    @classmethod
    def from_variant(cls, name: str, **fields) -> 'InverseCfg':
        """The Newton variant ``name`` of :data:`NEWTON_VARIANTS`."""
        return cls(**{**newton_variant(name), **fields})

    @property
    def variant(self) -> Optional[str]:
        """``'ridge'`` or ``'backoff'`` when the settings are one of
        :data:`NEWTON_VARIANTS` with 20 steps, else None."""
        if self.method != 'newton' or self.num_iters != 20:
            return None
        for name, settings in NEWTON_VARIANTS.items():
            if all(getattr(self, k) == v for k, v in settings.items()):
                return name
        return None

    def replace(self, **fields) -> 'InverseCfg':
        """A copy with ``fields`` changed."""
        return dataclasses.replace(self, **fields)


def newton_variant(name: str) -> dict:
    """The settings of :data:`NEWTON_VARIANTS` ``name``, with a clear error."""
    if name not in NEWTON_VARIANTS:
        raise ValueError(f'Unknown Newton variant {name!r}; use one of '
                         f'{tuple(NEWTON_VARIANTS)}.')
    return dict(NEWTON_VARIANTS[name])


DEFAULT_INVERSE = InverseCfg()


class InverseSlot:
    """The one :class:`InverseCfg` that several attention layers share.

    A SOFT backbone resolves its inverse once (the Newton variant, the
    attention config's settings, SOFT-Norm) into one slot and hands the slot
    to each of its SOFT attention layers, which read it at every call; taking
    a checkpoint's Newton variant is then one assignment, in the backbone.

    Args:
        cfg (InverseCfg): The inverse.
    """

    def __init__(self, cfg: InverseCfg) -> None:
        if not isinstance(cfg, InverseCfg):
            raise TypeError(f'An InverseSlot holds an InverseCfg, got {cfg!r}.')
        self.cfg = cfg

    def __repr__(self) -> str:
        return f'InverseSlot({self.cfg})'


def bottleneck_apply(a2: Tensor, rhs: Tensor,
                     inverse: InverseCfg = DEFAULT_INVERSE,
                     group: int = 1) -> Tensor:
    """The ``m x m`` middle factor ``P`` of the low-rank kernel times ``rhs``.

    Args:
        a2 (Tensor): Landmark kernel ``k(K~, K~)`` of shape (B, m, m).
        rhs (Tensor): Shape (B, m, k).
        inverse (InverseCfg): Which inverse. Defaults to ``InverseCfg()``.
        group (int): Consecutive matrices of the batch that belong to one
            image (its heads); the back-off step is shared within a group.
            Defaults to 1.

    Returns:
        Tensor: ``P @ rhs``, shape (B, m, k).
    """
    if exporting() and inverse.method == 'solve':
        raise ValueError(f"{inverse} cannot be exported (Cholesky has no ONNX "
                         "operator); use method='newton'.")
    if inverse.normalize:
        d_inv_sqrt = a2.sum(-1).rsqrt().unsqueeze(-1)
        rhs = d_inv_sqrt * rhs
    if inverse.method == 'newton':
        out = newton_apply(a2, rhs, num_iters=inverse.num_iters, reg=inverse.reg,
                           backoff=inverse.backoff, group=group)
    else:
        out = solve_apply(a2, rhs, reg=inverse.reg)
    return d_inv_sqrt * out if inverse.normalize else out


def bottleneck_inverse(a2: Tensor, inverse: InverseCfg = DEFAULT_INVERSE,
                       group: int = 1) -> Tensor:
    """The ``m x m`` middle factor ``P`` itself: :func:`bottleneck_apply` to ``I``.

    Same arguments (without ``rhs``); shape (B, m, m).
    """
    return bottleneck_apply(a2, identity_like(a2), inverse, group)
