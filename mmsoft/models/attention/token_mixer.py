"""The token-mixer contract: what the backbone gives a mixer and what it expects.

A token mixer is the attention of a SOFT block of stages 1-3: SOFT attention
or one of the peers it is compared with. The contract:

- Construction: ``embed_dims`` and ``num_heads`` always; the backbone also
  offers the hints of :data:`MIXER_HINTS` (``sr_ratio``, ``conv_size``,
  ``normalize``, ``inverse``), and :func:`build_token_mixer` passes a hint
  only when the mixer's constructor names it, so a mixer declares what it
  uses and never receives what it would ignore. Values in the mixer's own
  config win over the hints.
- Call: ``mixer(x, hw_shape)`` with tokens ``x`` of shape (B, N, C) laid out
  row by row on the grid ``hw_shape = (H, W)`` (``N = H * W``); it returns
  (B, N, C). A mixer that does not need the grid may ignore ``hw_shape``
  but still checks the tokens with :func:`check_tokens`.
"""
import inspect
from typing import Any, List, Optional, Tuple

from mmengine.model import BaseModule
from mmengine.registry import DefaultScope
from torch import Tensor

from mmsoft.registry import MODELS, build_model

MIXER_HINTS = ('sr_ratio', 'conv_size', 'normalize', 'inverse')
"""Optional constructor arguments the backbone offers every mixer."""


def check_tokens(x: Tensor, hw_shape: Tuple[int, int], embed_dims: int) -> None:
    """Check that tokens ``x`` of shape (B, N, C) lie on the grid ``hw_shape``.

    Raises:
        TypeError: ``x`` is not a tensor.
        ValueError: Wrong rank, channel count, or ``N != H * W``.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f'Expected tokens as a Tensor, got {type(x).__name__}.')
    if x.dim() != 3:
        raise ValueError(
            f'Expected tokens of shape (B, N, C), got {x.dim()}-D input of shape '
            f'{tuple(x.shape)}; flatten a (B, C, H, W) map with '
            'x.flatten(2).transpose(1, 2).')
    if x.shape[-1] != embed_dims:
        raise ValueError(f'Expected {embed_dims} channels per token, got '
                         f'{x.shape[-1]}.')
    height, width = hw_shape
    if x.shape[1] != height * width:
        raise ValueError(
            f'Got {x.shape[1]} tokens but hw_shape {tuple(hw_shape)} has '
            f'{height * width} positions; pass the grid the tokens come from.')


class TokenMixer(BaseModule):
    """Base of the token mixers: the two arguments every mixer takes.

    Subclasses implement ``forward(x, hw_shape)`` (see the module docstring)
    and call :meth:`check` on their input.

    Args:
        embed_dims (int): Channels C of the tokens.
        num_heads (int): Heads h; C must be divisible by h.
        init_cfg (dict, optional): Initialisation config. Defaults to None.
    """

    def __init__(self, embed_dims: int, num_heads: int,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads != 0:
            raise ValueError(
                f'embed_dims ({embed_dims}) must be divisible by num_heads '
                f'({num_heads}); change one of them.')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads

    def check(self, x: Tensor, hw_shape: Tuple[int, int]) -> None:
        """:func:`check_tokens` for this mixer's width."""
        check_tokens(x, hw_shape, self.embed_dims)


def token_mixer_names() -> List[str]:
    """The registered token mixers (every subclass of :class:`TokenMixer` in
    mmsoft's registry), in registration order."""
    return [name for name, cls in MODELS.module_dict.items()
            if isinstance(cls, type) and issubclass(cls, TokenMixer)]


def declared_arguments(cls: type) -> Tuple[str, ...]:
    """Names of the keyword arguments ``cls``'s constructor declares."""
    params = inspect.signature(cls.__init__).parameters.values()
    return tuple(p.name for p in params
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def build_token_mixer(cfg: dict, embed_dims: int, num_heads: int,
                      **hints: Any) -> BaseModule:
    """Build a token mixer, passing only the hints its constructor declares.

    Args:
        cfg (dict): Mixer config with a ``type`` registered in mmsoft (or
            the root registry); its other keys win over ``hints``.
        embed_dims (int): Channels C.
        num_heads (int): Heads.
        **hints: Any of :data:`MIXER_HINTS`; None values are not passed.

    Returns:
        BaseModule: The mixer.

    Examples:
        >>> from mmsoft.models.attention.token_mixer import build_token_mixer
        >>> mixer = build_token_mixer(dict(type='SoftmaxAttention2d'), 64, 2,
        ...                           sr_ratio=8, conv_size=9)
        >>> type(mixer).__name__
        'SoftmaxAttention2d'
    """
    unknown = set(hints) - set(MIXER_HINTS)
    if unknown:
        raise ValueError(f'Unknown token-mixer hints {sorted(unknown)}; the '
                         f'contract offers {MIXER_HINTS}.')
    mixer_type = cfg.get('type') if isinstance(cfg, dict) else None
    if mixer_type is None:
        raise ValueError(f'A token-mixer config needs a type, got {cfg!r}.')
    if isinstance(mixer_type, str):
        with DefaultScope.overwrite_default_scope('mmsoft'):
            cls = MODELS.get(mixer_type)
        if cls is None:
            raise KeyError(f'Token mixer {mixer_type!r} is not registered; '
                           'register it with mmsoft.registry.register_model or '
                           f'use one of {", ".join(token_mixer_names())}.')
    else:
        cls = mixer_type
    declared = declared_arguments(cls)
    passed = {name: value for name, value in hints.items()
              if value is not None and name in declared and name not in cfg}
    return build_model(cfg, embed_dims=embed_dims, num_heads=num_heads, **passed)
