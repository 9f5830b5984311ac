"""The SOFT backbone: one class for mmpretrain, mmdet and mmseg."""
import copy
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from mmengine.registry import DefaultScope
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmsoft.ops import InverseCfg, InverseSlot, in_graph
from mmsoft.registry import MODELS, register_model

from ..attention.soft_attention import SOFTAttention
from ..utils.checkpoint_loading import load_pretrained
from ..utils.ckpt_convert import NEWTON_CODES, upgrade_state_dict
from ..utils.finite import finite_flag
from ..utils.init_summary import begin_init_log, end_init_log
from .arch_checks import (
    check_arguments,
    check_batch,
    check_stage_outputs,
    empty_outputs,
    half_precision_autocast,
)
from .soft_stages import ClassTokenStage, SOFTStage

_TINY = dict(embed_dims=[64, 128, 320, 512], num_heads=[2, 4, 10, 16],
             depths=[1, 2, 3, 2])
STAGE_KINDS = (SOFTStage, SOFTStage, SOFTStage, ClassTokenStage)
OUT_TYPES = ('cls_token', 'featmap')
MIN_INPUT_SIZE = 32
STRIDES = (4, 8, 16, 32)


def _shared_inverse(attn_cfg: dict, newton: Optional[str],
                    normalize: bool) -> Optional[InverseSlot]:
    """The inverse of every SOFT attention layer, resolved once: the Newton
    variant ``newton``, else the attention config's ``inverse`` (taken out of
    ``attn_cfg``), with the arch's SOFT-Norm setting; None for other mixers,
    for ``mode='exact'`` and for settings the layer will refuse with its own
    message."""
    mixer = attn_cfg.get('type')
    if isinstance(mixer, str):
        with DefaultScope.overwrite_default_scope('mmsoft'):
            mixer = MODELS.get(mixer)
    if not (isinstance(mixer, type) and issubclass(mixer, SOFTAttention)
            and attn_cfg.get('mode', 'lowrank') != 'exact'):
        return None
    settings = attn_cfg.get('inverse')
    if not isinstance(settings, (dict, InverseCfg, type(None))) or (
            isinstance(settings, dict) and 'normalize' in settings):
        return None
    attn_cfg.pop('inverse', None)
    if newton is not None:
        settings = InverseCfg.from_variant(newton)
    return InverseSlot(InverseCfg.build(settings, normalize=normalize))


def _half(size: int, times: int) -> int:
    """Side length after ``times`` stride-2, padding-1 3x3 convolutions."""
    for _ in range(times):
        size = (size + 1) // 2
    return size


@register_model
class SOFT(BaseModule):
    """SOFT: softmax-free transformer backbone with linear-complexity attention.

    Four stages at strides 4, 8, 16 and 32, each a module
    (:mod:`.soft_stages`) that owns its patch embedding, position embedding
    and blocks. Stages 1-3 (:class:`SOFTStage`) use post-norm blocks with
    SOFT attention (landmark ratios 8, 4, 2 and value-convolution sizes
    9, 5, 3); stage 4 (:class:`ClassTokenStage`) prepends a class token and
    uses pre-norm softmax attention blocks and the final norm. Each stage
    adds learned position embeddings defined for ``img_size`` and resized
    bilinearly to the actual grid, so any input of at least 32 px works
    (training at batch 1 needs more than 32 px on one side: stage 4's
    BatchNorm needs more than one value per channel).
    Parameter names follow :mod:`mmsoft`'s layout (``stages.{i}.patch_embed``,
    ``.pos_embed``, ``.blocks.{j}``, ``stages.3.cls_token``,
    ``stages.3.norm``); checkpoints of the earlier layout (``patch_embeds.i``,
    ``pos_embeds.i``, ``stages.i.j``, ``cls_token``, ``norm``) are renamed
    on load, and ``tools/model_converters/soft2mmsoft.py`` converts released
    checkpoints.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'medium'``, ``'large'``,
            ``'huge'`` (or ``'t'``, ``'s'``, ``'m'``, ``'l'``, ``'h'``), each
            also as a SOFT-Norm twin with ``'-norm'`` appended
            (``'tiny-norm'``, ``'t-norm'``), or a dict with the keys
            ``embed_dims``, ``num_heads`` and ``depths`` (4 values each) and
            optionally ``sr_ratios`` (8, 4, 2, 1), ``conv_sizes`` (9, 5, 3),
            ``mlp_ratios`` (4, 4, 4, 4), ``stem_channels`` (32) and
            ``normalize`` (False). Defaults to ``'tiny'``.
        in_channels (int): Input channels. Defaults to 3.
        img_size (int): Square input size the position embeddings are
            defined for. Defaults to 224.
        out_type (str): ``'cls_token'``: a 1-tuple with the class token after
            the final norm, (B, C4), for classification; ``'featmap'``: NCHW
            maps of the stages in ``out_indices``, for dense prediction.
            Defaults to ``'cls_token'``.
        out_indices (int | Sequence[int]): Stages (0-3, negatives count from
            the end) whose maps ``'featmap'`` returns; stages after the last
            one are not built (no unused parameters under DDP). Must be -1 or
            3 with ``'cls_token'``. Stage k (0-3) maps an H x W input to
            ``h_k x w_k`` with ``h_k = ceil(H / 2**(k + 2))`` (every stride-2,
            padding-1 3x3 convolution rounds up), e.g. 511 x 511 gives 128,
            64, 32, 16 and 800 x 1333 gives 200 x 334, 100 x 167, 50 x 84,
            25 x 42. Defaults to -1.
        drop_rate (float): Dropout after adding position embeddings.
            Defaults to 0.
        drop_path_rate (float): Largest residual-branch drop rate, spread
            linearly over all blocks. Defaults to 0.
        drop_path_mode (str): In stages 1-3, ``'dropout'`` (element-wise, as
            released) or ``'droppath'`` (stochastic depth). Stage 4 always
            uses stochastic depth. Defaults to ``'dropout'``.
        attn_cfg (dict, optional): Token mixer of stages 1-3: any registered
            module following the contract of
            :mod:`mmsoft.models.attention.token_mixer`; it receives the hints
            ``sr_ratio``, ``conv_size``, ``normalize`` (True for SOFT-Norm
            archs) and ``inverse`` that its constructor declares. Defaults to
            ``dict(type='SOFTAttention')``.
        frozen_stages (int): -1 freezes nothing, 0 the stem (stage 1's patch
            and position embeddings), k in 1-4 the stem and stages 1..k
            (4 includes the class token and final norm). Frozen parts stay in
            eval mode. Defaults to -1.
        norm_eval (bool): Keep BatchNorm layers in eval mode while training.
            Defaults to False.
        with_cp (bool): Checkpoint every block to save activation memory.
            Defaults to False.
        check_finite (bool): Raise a ValueError naming the problem when the
            input holds NaN or Inf, and one naming the stage when a stage's
            output does although the input did not (an input too large for
            the arithmetic, such as 1e30, or NaN weights); one min/max
            reduction per stage. In eager mode only: skipped while exporting
            or under ``torch.compile``, where it would split the graph; the
            stage outputs are not checked under float16 autocast, where a
            gradient scaler skips an overflowing step. Defaults to True.
        newton (str, optional): The Newton inverse of the SOFT attention:
            ``'ridge'`` (``A2 + 0.01 I``, a step per head) or ``'backoff'``
            (the released checkpoints' inverse, see
            :data:`mmsoft.ops.NEWTON_VARIANTS`). The choice is stored in the
            state dict (``newton_variant``); with None the model starts with
            ``'ridge'`` and takes the variant a loaded checkpoint records
            (and logs it), so converted releases and models fine-tuned from
            them keep their inverse. Set it (or ``inverse`` in ``attn_cfg``)
            to override the checkpoint. Defaults to None.
        init_cfg (dict, optional): Initialisation; ``dict(type='Pretrained',
            checkpoint=..., prefix='backbone.')`` loads weights strictly,
            resizing position embeddings (``allow_extra_weights=True`` drops
            the blocks of a deeper checkpoint on purpose) and refusing
            weights with NaN or Inf, named in the error
            (``allow_non_finite=True`` loads them with a warning). A local
            path is read weights-only by mmsoft's loader. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmsoft.models import SOFT
        >>> model = SOFT(arch='tiny', out_type='featmap', out_indices=(0, 1, 2, 3))
        >>> feats = model(torch.rand(1, 3, 224, 224))
        >>> [tuple(f.shape) for f in feats]
        [(1, 64, 56, 56), (1, 128, 28, 28), (1, 320, 14, 14), (1, 512, 7, 7)]
        >>> SOFT(arch='tiny')(torch.rand(1, 3, 224, 224))[0].shape
        torch.Size([1, 512])
    """

    _version = 2  # 2: stages as modules; 1: parallel lists of embeddings and stages
    optional_state_keys = ('newton_variant', )  # absent from older checkpoints
    arch_zoo: Dict[str, dict] = {
        **dict.fromkeys(['t', 'tiny'], _TINY),
        **dict.fromkeys(['s', 'small'], {**_TINY, 'depths': [1, 3, 7, 4]}),
        **dict.fromkeys(['m', 'medium'], dict(
            embed_dims=[64, 128, 288, 512], num_heads=[2, 4, 9, 16],
            depths=[1, 3, 29, 5])),
        **dict.fromkeys(['l', 'large'], {**_TINY, 'depths': [1, 3, 40, 5]}),
        **dict.fromkeys(['h', 'huge'], dict(
            embed_dims=[64, 128, 352, 512], num_heads=[2, 4, 11, 16],
            depths=[1, 5, 49, 5])),
    }
    arch_defaults = dict(sr_ratios=[8, 4, 2, 1], conv_sizes=[9, 5, 3],
                         mlp_ratios=[4, 4, 4, 4], stem_channels=32,
                         normalize=False)
    required_keys = ('embed_dims', 'num_heads', 'depths')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 img_size: int = 224,
                 out_type: str = 'cls_token',
                 out_indices: Union[int, Sequence[int]] = -1,
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 drop_path_mode: str = 'dropout',
                 attn_cfg: Optional[dict] = None,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 check_finite: bool = True,
                 newton: Optional[str] = None,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self.parse_arch(arch)
        check_arguments(self.arch_settings, in_channels, img_size, drop_rate,
                        drop_path_rate)
        s = self.arch_settings
        self.embed_dims: List[int] = list(s['embed_dims'])
        self.depths: List[int] = list(s['depths'])
        self.in_channels = in_channels
        self.img_size = img_size
        if out_type not in OUT_TYPES:
            raise ValueError(f'Unknown out_type {out_type!r}; use one of {OUT_TYPES}.')
        self.out_type = out_type
        self.out_indices = self.parse_out_indices(out_indices, out_type)
        if not -1 <= frozen_stages <= 4:
            raise ValueError(f'frozen_stages must be in [-1, 4] (SOFT has 4 '
                             f'stages), got {frozen_stages}.')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        self.check_finite = check_finite

        attn_cfg = copy.deepcopy(attn_cfg) if attn_cfg else dict(type='SOFTAttention')
        if newton is not None and 'inverse' in attn_cfg:
            raise ValueError('Set the inverse once: newton= on SOFT or inverse= in '
                             'attn_cfg, not both.')
        # A choice in the config wins over the one a checkpoint records.
        self.newton_from_config = newton is not None or 'inverse' in attn_cfg
        self.inverse_slot = _shared_inverse(attn_cfg, newton, s['normalize'])
        dpr = torch.linspace(0, drop_path_rate, sum(self.depths)).tolist()
        # Only stages up to the last one used are built (no unused parameters).
        self.num_stages = 4 if out_type == 'cls_token' else max(self.out_indices) + 1
        self.stages = nn.ModuleList()
        channels = in_channels
        for i in range(self.num_stages):
            dims = self.embed_dims[i]
            common = dict(in_channels=channels, embed_dims=dims,
                          num_heads=s['num_heads'][i], grid_size=_half(img_size, 2 + i),
                          mlp_ratio=s['mlp_ratios'][i], drop_rate=drop_rate,
                          drop_path_rates=dpr[sum(self.depths[:i]):
                                              sum(self.depths[:i + 1])],
                          with_cp=with_cp)
            if STAGE_KINDS[i] is SOFTStage:
                stage = SOFTStage(
                    sr_ratio=s['sr_ratios'][i], conv_size=s['conv_sizes'][i],
                    stem_channels=s['stem_channels'] if i == 0 else None,
                    drop_path_mode=drop_path_mode, attn_cfg=attn_cfg,
                    normalize=s['normalize'], inverse=self.inverse_slot, **common)
            else:
                stage = STAGE_KINDS[i](**common)
            self.stages.append(stage)
            channels = dims
        if newton is not None and not self.soft_attentions:
            raise ValueError(f'newton={newton!r} sets the inverse of SOFT attention, '
                             f"but attn_cfg type {attn_cfg.get('type')!r} has none; "
                             'drop newton.')
        self.register_buffer('newton_variant',
                             torch.tensor(NEWTON_CODES.get(self.newton, -1)))
        self._freeze_stages()

    # ------------------------------------------------------------------ config
    @property
    def soft_attentions(self) -> List[SOFTAttention]:
        """The SOFT attention layers (none when a peer replaces them)."""
        return [m for m in self.modules() if isinstance(m, SOFTAttention)]

    @property
    def inverse(self) -> Optional[InverseCfg]:
        """The inverse all SOFT attention layers share, or None without SOFT
        attention."""
        return None if self.inverse_slot is None else self.inverse_slot.cfg

    @property
    def newton(self) -> Optional[str]:
        """``'ridge'`` or ``'backoff'``: the Newton variant of the SOFT
        attention layers, or None when they have none (another inverse, or
        no SOFT attention)."""
        return None if self.inverse is None else self.inverse.variant

    def use_newton(self, variant: str) -> None:
        """Switch the shared inverse of the SOFT attention layers to the
        Newton ``variant`` (one assignment: the layers read the slot)."""
        if self.inverse_slot is None:
            raise ValueError(f'use_newton({variant!r}): this SOFT has no SOFT '
                             'attention layers.')
        settings = InverseCfg.from_variant(variant)
        self.inverse_slot.cfg = self.inverse.replace(reg=settings.reg,
                                                     backoff=settings.backoff)
        self.newton_variant.fill_(NEWTON_CODES[variant])

    @classmethod
    def parse_arch(cls, arch: Union[str, dict]) -> dict:
        """Resolve a preset name or a custom dict into the full settings."""
        if isinstance(arch, str):
            name = arch.lower()
            normalize = name.endswith('-norm')
            base = name[:-len('-norm')] if normalize else name
            if base not in cls.arch_zoo:
                valid = sorted(cls.arch_zoo) + sorted(f'{k}-norm' for k in cls.arch_zoo)
                raise ValueError(f'Unknown SOFT arch {arch!r}; valid names: '
                                 f'{", ".join(valid)}, or a dict with keys '
                                 f'{cls.required_keys}.')
            return {**cls.arch_defaults, **cls.arch_zoo[base], 'normalize': normalize}
        if not isinstance(arch, dict):
            raise TypeError(f'arch must be a preset name or a dict, got '
                            f'{type(arch).__name__}.')
        missing = [key for key in cls.required_keys if key not in arch]
        if missing:
            raise ValueError(f'Custom SOFT arch is missing {missing}; it needs '
                             f'{cls.required_keys} (4 values each) and may set '
                             f'{tuple(cls.arch_defaults)}.')
        unknown = set(arch) - set(cls.required_keys) - set(cls.arch_defaults)
        if unknown:
            allowed = cls.required_keys + tuple(cls.arch_defaults)
            raise ValueError(f'Custom SOFT arch has unknown keys {sorted(unknown)}; '
                             f'allowed: {allowed}.')
        settings = {**cls.arch_defaults, **arch}
        for key, length in (('embed_dims', 4), ('num_heads', 4), ('depths', 4),
                            ('sr_ratios', 4), ('mlp_ratios', 4), ('conv_sizes', 3)):
            if len(settings[key]) != length:
                raise ValueError(f'arch[{key!r}] needs {length} values, got '
                                 f'{list(settings[key])}.')
        return settings

    @staticmethod
    def parse_out_indices(out_indices: Union[int, Sequence[int]],
                          out_type: str) -> Tuple[int, ...]:
        """Normalise ``out_indices`` to sorted stage numbers in 0-3."""
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        if not isinstance(out_indices, Sequence) or not out_indices:
            raise TypeError(f'out_indices must be an int or a non-empty sequence '
                            f'of ints, got {out_indices!r}.')
        result = []
        for index in out_indices:
            if not -4 <= index <= 3:
                raise ValueError(f'out_indices {index} is out of range: SOFT has 4 '
                                 'stages, so use 0-3 (or -4 to -1).')
            result.append(index % 4)
        if out_type == 'cls_token' and result != [3]:
            raise ValueError(f"out_type='cls_token' reads the class token of the last "
                             f"stage, so out_indices must be -1 or 3, got "
                             f"{list(out_indices)}; use out_type='featmap' for maps "
                             'of earlier stages.')
        return tuple(sorted(set(result)))

    @property
    def out_channels(self) -> List[int]:
        """Channels of each output, in output order."""
        return [self.embed_dims[i] for i in self.out_indices]

    @property
    def out_strides(self) -> List[int]:
        """Stride of each output map relative to the input, in output order."""
        return [self.stage_strides[i] for i in self.out_indices]

    # ---------------------------------------------------------------- geometry
    # What deployment and necks need to know about the shapes, published here
    # (as detectron2's Backbone.output_shape() and size_divisibility) so that
    # nobody recomputes them from the stages' internals.
    min_input_size = MIN_INPUT_SIZE
    """Smallest height and width the backbone accepts."""
    size_divisibility = 1
    """Inputs need no padding: every stage rounds its size up."""

    def output_shape(self) -> Dict[str, Dict[str, int]]:
        """``{'stage<i>': dict(channels, stride)}`` of each output, in order."""
        return {f'stage{i}': dict(channels=self.embed_dims[i], stride=STRIDES[i])
                for i in self.out_indices}

    @property
    def stage_strides(self) -> List[int]:
        """Stride of each built stage's map relative to the input."""
        return list(STRIDES[:self.num_stages])

    def stage_grids(self, height: int, width: int) -> List[Tuple[int, int]]:
        """Token grid ``(H, W)`` of each built stage for an input of that size."""
        return [(_half(height, 2 + i), _half(width, 2 + i))
                for i in range(self.num_stages)]

    def landmark_grids(self, height: int,
                       width: int) -> List[Optional[Tuple[int, int]]]:
        """Landmark grid of each built stage's SOFT attention for an input of
        that size (None for stages without it); see
        :meth:`SOFTAttention.landmark_grid`."""
        grids = []
        for stage, grid in zip(self.stages, self.stage_grids(height, width)):
            attn = next((m for m in stage.modules() if isinstance(m, SOFTAttention)),
                        None)
            grids.append(None if attn is None else attn.landmark_grid(*grid))
        return grids

    @property
    def max_landmarks(self) -> Optional[int]:
        """The cap on landmarks of the SOFT attention layers, or None."""
        caps = {m.max_landmarks for m in self.soft_attentions}
        return None if caps == {None} or not caps else min(c for c in caps if c)

    # ------------------------------------------------------------ init & modes
    def init_weights(self) -> None:
        """Load ``Pretrained`` weights strictly, or initialise as released."""
        if self.init_cfg is not None and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg['checkpoint'],
                            prefix=self.init_cfg.get('prefix'),
                            map_location=self.init_cfg.get('map_location', 'cpu'),
                            allow_extra_weights=self.init_cfg.get(
                                'allow_extra_weights', False),
                            allow_non_finite=self.init_cfg.get(
                                'allow_non_finite', False))
            self._is_init = True
            return
        begin_init_log(self)  # one summary line, not one per parameter
        super().init_weights()
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        for stage in self.stages:
            stage.reset_embeddings()
        end_init_log(self)

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        stem = self.stages[0]
        parts: List[Union[nn.Module, nn.Parameter]] = [stem.patch_embed, stem.pos_embed]
        parts += self.stages[:self.frozen_stages]
        for part in parts:
            if isinstance(part, nn.Parameter):
                part.requires_grad = False
            else:
                part.eval()
                for param in part.parameters():
                    param.requires_grad = False

    def train(self, mode: bool = True) -> 'SOFT':
        """Set train mode, keeping frozen stages and (with norm_eval) BN in eval."""
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """Layer-wise depth of a parameter, for layer-wise learning-rate decay.

        Depth 0 is the stem, blocks count from 1 in order, the embeddings of
        a later stage share the depth of the block before them, and the final
        norm (and anything outside the backbone) is the last depth.

        Args:
            param_name (str): Parameter name.
            prefix (str): Prefix of the backbone's parameters, such as
                ``'backbone.'``. Defaults to ``''``.

        Returns:
            tuple[int, int]: The depth and the number of depths.
        """
        num_layers = sum(self.depths[:self.num_stages]) + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        parts = param_name[len(prefix):].split('.')
        if parts[0] != 'stages' or len(parts) < 3 or parts[2] == 'norm':
            return num_layers - 1, num_layers
        before = sum(self.depths[:int(parts[1])])
        if parts[2] == 'blocks':
            return before + int(parts[3]) + 1, num_layers
        return before, num_layers  # embeddings (and class token) of the stage

    # ----------------------------------------------------------------- forward
    def check_input(self, x: Tensor) -> None:
        """Raise a ValueError or TypeError naming what is wrong with ``x``."""
        if not isinstance(x, Tensor):
            raise TypeError(f'SOFT expects a Tensor, got {type(x).__name__}.')
        if x.dim() != 4:
            raise ValueError(f'SOFT expects images of shape (B, C, H, W), got '
                             f'{x.dim()}-D input of shape {tuple(x.shape)}.')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'SOFT was built for {self.in_channels} input channels '
                             f'but got {x.shape[1]}; set in_channels={x.shape[1]} '
                             'or convert the images.')
        if min(x.shape[-2:]) < MIN_INPUT_SIZE:
            raise ValueError(f'Input of {x.shape[-2]} x {x.shape[-1]} px is smaller '
                             f'than the minimum {MIN_INPUT_SIZE} x {MIN_INPUT_SIZE} '
                             'px of SOFT; resize or pad the images.')
        if self.check_finite and not in_graph() and not bool(finite_flag(x)):
            bad = int((~torch.isfinite(x)).sum())
            raise ValueError(f'Input holds {bad} NaN or Inf values; clean the data '
                             'or pass check_finite=False to skip this check.')
        check_batch(self, x)  # dtype; batch 1 in training

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        """Images (B, C, H, W) to a tuple of outputs (see ``out_type``)."""
        self.check_input(x)
        if x.shape[0] == 0:
            return empty_outputs(self, x)
        images, outs, finite = x, [], []
        # Under float16 autocast a gradient scaler skips an overflowing step.
        check = (self.check_finite and not in_graph()
                 and not half_precision_autocast(x.device.type))
        for i, stage in enumerate(self.stages):
            x, cls_token = stage(x)
            if i in self.out_indices:
                # Contiguous NCHW, not the channels-last view between stages:
                # that view passes through convolutions (an FPN) unchanged,
                # and mmcv's CPU RoIAlign reads its input as contiguous NCHW,
                # so Mask R-CNN's RoI heads got scrambled features.
                outs.append(x.contiguous())
            if check:  # one reduction per stage, read once after the loop
                last_cls = self.out_type == 'cls_token' and cls_token is not None
                finite.append(finite_flag(cls_token if last_cls else x))
        if check:
            check_stage_outputs(finite, images)
        if self.out_type == 'cls_token':
            return (cls_token, )
        return tuple(outs)

    # ------------------------------------------------------------ checkpoints
    def _load_from_state_dict(self, state_dict: dict, prefix: str,
                              local_metadata: dict, strict: bool, missing_keys: list,
                              unexpected_keys: list, error_msgs: list) -> None:
        """Rename keys of the layout before version 2 (parallel lists), and take
        the Newton variant the checkpoint records (see ``newton``), on load."""
        if local_metadata.get('version') is None or local_metadata['version'] < 2:
            upgrade_state_dict(state_dict, prefix)
        key = prefix + 'newton_variant'
        recorded = state_dict.get(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)
        current = NEWTON_CODES.get(self.newton, -1)
        self.newton_variant.fill_(current)  # the buffer says what runs
        if recorded is None:
            if key in missing_keys:
                missing_keys.remove(key)  # checkpoints before the choice was stored
            return
        names = {code: name for name, code in NEWTON_CODES.items()}
        variant = names.get(int(recorded))
        if variant is None or variant == self.newton:
            if variant is not None:
                MMLogger.get_current_instance().info(
                    f'SOFT: Newton inverse {variant!r}, as the checkpoint records.')
            return
        logger = MMLogger.get_current_instance()
        if self.newton_from_config or not self.soft_attentions:
            logger.warning(f'SOFT: the checkpoint was made with the {variant!r} '
                           f'Newton inverse; keeping {self.newton!r} as the '
                           'config says.')
            return
        self.use_newton(variant)
        logger.info(f'SOFT: Newton inverse {variant!r} taken from the checkpoint.')
