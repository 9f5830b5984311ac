"""Building blocks of the SOFT backbone: patch embeddings and the two block kinds."""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn.bricks import DropPath
from torch import Tensor

from mmsoft.ops import InverseCfg

from ..attention.peers import SoftmaxAttention2d
from ..attention.token_mixer import build_token_mixer


class ConvPatchEmbed(nn.Module):
    """Strided 3x3 convolutions with BatchNorm and ReLU that embed a feature map.

    The first stage uses a three-convolution stem (stride 4 in all); later
    stages one stride-2 convolution. Each stride-2 convolution has padding 1,
    so a side of length ``s`` becomes ``ceil(s / 2)``. The layout of ``proj``
    (conv, BN, ReLU, ...) is the released checkpoints'.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        stem_channels (int, optional): Width of the stem's first two
            convolutions; None for a single convolution. Defaults to None.
    """

    def __init__(self, in_channels: int, out_channels: int,
                 stem_channels: int = None) -> None:
        super().__init__()
        if stem_channels is None:
            plan = [(in_channels, out_channels, 2)]
        else:
            plan = [(in_channels, stem_channels, 2), (stem_channels, stem_channels, 1),
                    (stem_channels, out_channels, 2)]
        layers: List[nn.Module] = []
        for cin, cout, stride in plan:
            layers += [nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout),
                       nn.ReLU(inplace=True)]
        # Channels-last weights: with a channels-last input the convolutions
        # then read and write channels-last, with no reordering copy.
        self.proj = nn.Sequential(*layers).to(memory_format=torch.channels_last)
        self.num_halvings = sum(1 for *_, stride in plan if stride == 2)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        """Embed (B, C, H, W) maps into tokens (B, H' * W', C') and (H', W').

        The convolutions run channels-last (the input is made so, a no-op for
        the maps between stages, which are channels-last views), so the
        tokens are a contiguous view of their output: every later operation
        reads rows of C' channels in order.
        """
        x = self.proj(x.contiguous(memory_format=torch.channels_last))
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


class SOFTMlp(nn.Module):
    """Two linears around a GELU.

    Args:
        embed_dims (int): Channels in and out.
        hidden_dims (int): Hidden channels.
        approximate (str): GELU approximation, ``'tanh'`` (SOFT blocks) or
            ``'none'`` (exact, stage-4 blocks). Defaults to ``'none'``.
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 approximate: str = 'none') -> None:
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class SOFTBlock(nn.Module):
    """Post-norm block of stages 1-3: ``x = LN(x + drop(attn(x)))``, then the MLP.

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        sr_ratio (int): Landmark sampling ratio.
        conv_size (int): Kernel of the value convolution.
        mlp_ratio (float): MLP hidden width over C. Defaults to 4.
        drop_path_rate (float): Rate of the residual-branch drop.
            Defaults to 0.
        drop_path_mode (str): ``'dropout'`` drops elements, as the released
            models do; ``'droppath'`` drops whole samples (stochastic depth).
            Defaults to ``'dropout'``.
        attn_cfg (dict): Config of the token mixer, built by
            :func:`~mmsoft.models.attention.token_mixer.build_token_mixer`
            with ``embed_dims``, ``num_heads`` and the hints below that the
            mixer declares. Defaults to ``dict(type='SOFTAttention')``.
        normalize (bool): Hint: SOFT-Norm. Defaults to False.
        inverse (dict | InverseCfg, optional): Hint: the bottleneck inverse.
            Defaults to None (the mixer's default).
    """

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int,
                 conv_size: int, mlp_ratio: float = 4., drop_path_rate: float = 0.,
                 drop_path_mode: str = 'dropout', attn_cfg: Optional[dict] = None,
                 normalize: bool = False,
                 inverse: Union[dict, InverseCfg, None] = None) -> None:
        super().__init__()
        attn_cfg = dict(type='SOFTAttention') if attn_cfg is None else attn_cfg
        self.attn = build_token_mixer(attn_cfg, embed_dims, num_heads,
                                      sr_ratio=sr_ratio, conv_size=conv_size,
                                      normalize=normalize, inverse=inverse)
        self.norm1 = nn.LayerNorm(embed_dims, eps=1e-5)
        self.mlp = SOFTMlp(embed_dims, int(embed_dims * mlp_ratio), 'tanh')
        self.norm2 = nn.LayerNorm(embed_dims, eps=1e-5)
        if drop_path_mode == 'dropout':
            self.drop_path = nn.Dropout(drop_path_rate)
        elif drop_path_mode == 'droppath':
            self.drop_path = DropPath(drop_path_rate)
        else:
            raise ValueError(f"Unknown drop_path_mode {drop_path_mode!r}; use "
                             "'dropout' or 'droppath'.")

    def forward(self, x: Tensor, hw_shape: Tuple[int, int]) -> Tensor:
        x = self.norm1(x + self.drop_path(self.attn(x, hw_shape)))
        return self.norm2(x + self.drop_path(self.mlp(x)))


class ClassTokenBlock(nn.Module):
    """Pre-norm softmax block of stage 4 (tokens include the class token).

    Args:
        embed_dims (int): Channels C.
        num_heads (int): Attention heads.
        mlp_ratio (float): MLP hidden width over C. Defaults to 4.
        drop_path_rate (float): Stochastic depth rate. Defaults to 0.
    """

    def __init__(self, embed_dims: int, num_heads: int, mlp_ratio: float = 4.,
                 drop_path_rate: float = 0.) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dims, eps=1e-6)
        self.attn = SoftmaxAttention2d(embed_dims, num_heads)
        self.norm2 = nn.LayerNorm(embed_dims, eps=1e-6)
        self.mlp = SOFTMlp(embed_dims, int(embed_dims * mlp_ratio), 'none')
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: Tensor, hw_shape: Tuple[int, int] = None) -> Tensor:
        x = x + self.drop_path(self.attn.attend(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))
