"""The two stage kinds of the SOFT backbone.

A stage owns everything between two resolutions: its patch embedding, its
position embedding and its blocks (and, for the class-token stage, the class
token and the final norm), so the backbone runs them in a plain loop and
nothing outside a stage knows which one carries the class token. Both kinds
map a (B, C, H, W) map to ``(map, class_token)``: the (B, C', H', W') map of
the stage and the class token after the final norm, (B, C'), or None.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mmengine.model.weight_init import trunc_normal_
from torch import Tensor

from mmsoft.ops import InverseCfg

from ..utils.pos_embed import resize_pos_embed
from ..utils.token_maps import tokens_as_map
from .soft_blocks import ClassTokenBlock, ConvPatchEmbed, SOFTBlock


class _Stage(nn.Module):
    """What both kinds share: patch and position embedding, blocks, checkpointing.

    Args:
        in_channels (int): Channels of the input map.
        embed_dims (int): Channels C of the stage.
        grid_size (int): Side of the square grid the position embedding is
            defined for (resized to the actual grid on the fly).
        stem_channels (int, optional): Width of a three-convolution stem
            (the first stage); None for one stride-2 convolution.
        drop_rate (float): Dropout after adding position embeddings.
        with_cp (bool): Checkpoint every block while training.
    """

    num_extra_tokens = 0
    """Tokens before the grid in the position embedding (a class token slot)."""

    def __init__(self, in_channels: int, embed_dims: int, grid_size: int,
                 stem_channels: Optional[int], drop_rate: float,
                 with_cp: bool) -> None:
        super().__init__()
        self.embed_dims = embed_dims
        self.with_cp = with_cp
        self.patch_embed = ConvPatchEmbed(in_channels, embed_dims, stem_channels)
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.num_extra_tokens + grid_size**2, embed_dims))
        self.pos_drop = nn.Dropout(drop_rate)
        self.blocks = nn.ModuleList()

    @property
    def pos_grid(self) -> Tuple[int, int]:
        """The grid (side, side) of the stored position embedding."""
        side = int((self.pos_embed.shape[1] - self.num_extra_tokens) ** 0.5)
        return side, side

    def reset_embeddings(self) -> None:
        """Draw the embeddings as released (truncated normal, std 0.02)."""
        trunc_normal_(self.pos_embed, std=.02)

    def embedding_parameters(self) -> List[nn.Parameter]:
        """The parameters of the stage before its blocks (frozen with the stem)."""
        return [self.pos_embed]

    def run_blocks(self, x: Tensor, hw: Tuple[int, int]) -> Tensor:
        """Tokens through the blocks, checkpointed with ``with_cp``."""
        for block in self.blocks:
            if self.with_cp and x.requires_grad:
                x = cp.checkpoint(block, x, hw, use_reentrant=False)
            else:
                x = block(x, hw)
        return x

    @staticmethod
    def to_map(x: Tensor, hw: Tuple[int, int]) -> Tensor:
        """Tokens (B, H * W, C) as a (B, C, H, W) map: a channels-last view, no
        copy. The next stage's convolutions take it as it is; the backbone
        makes the maps it returns contiguous (:meth:`SOFT.forward`)."""
        return tokens_as_map(x, hw)


class SOFTStage(_Stage):
    """A stage of SOFT blocks (stages 1-3): embedding, position, post-norm blocks.

    Args:
        in_channels (int): Channels of the input map.
        embed_dims (int): Channels C of the stage.
        num_heads (int): Attention heads.
        grid_size (int): Side of the grid the position embedding is defined for.
        sr_ratio (int): Landmark sampling ratio (a token-mixer hint).
        conv_size (int): Value-convolution size (a token-mixer hint).
        drop_path_rates (Sequence[float]): One residual drop rate per block;
            their number is the depth.
        mlp_ratio (float): MLP hidden width over C. Defaults to 4.
        stem_channels (int, optional): Three-convolution stem width for the
            first stage. Defaults to None.
        drop_rate (float): Dropout after the position embedding. Defaults to 0.
        drop_path_mode (str): ``'dropout'`` or ``'droppath'``. Defaults to
            ``'dropout'``.
        attn_cfg (dict, optional): Token mixer config. Defaults to None
            (SOFT attention).
        normalize (bool): SOFT-Norm hint for the mixer. Defaults to False.
        inverse (dict | InverseCfg, optional): Inverse hint for the mixer.
            Defaults to None.
        with_cp (bool): Checkpoint every block. Defaults to False.
    """

    def __init__(self, in_channels: int, embed_dims: int, num_heads: int,
                 grid_size: int, sr_ratio: int, conv_size: int,
                 drop_path_rates: Sequence[float], mlp_ratio: float = 4.,
                 stem_channels: Optional[int] = None, drop_rate: float = 0.,
                 drop_path_mode: str = 'dropout', attn_cfg: Optional[dict] = None,
                 normalize: bool = False,
                 inverse: Union[dict, InverseCfg, None] = None,
                 with_cp: bool = False) -> None:
        super().__init__(in_channels, embed_dims, grid_size, stem_channels,
                         drop_rate, with_cp)
        for rate in drop_path_rates:
            self.blocks.append(SOFTBlock(embed_dims, num_heads, sr_ratio, conv_size,
                                         mlp_ratio, rate, drop_path_mode, attn_cfg,
                                         normalize=normalize, inverse=inverse))

    def forward(self, x: Tensor) -> Tuple[Tensor, None]:
        """A (B, C, H, W) map to this stage's map, and no class token."""
        x, hw = self.patch_embed(x)
        x = self.pos_drop(x + resize_pos_embed(self.pos_embed, hw))
        return self.to_map(self.run_blocks(x, hw), hw), None


class ClassTokenStage(_Stage):
    """The last stage: a class token, pre-norm softmax blocks and the final norm.

    Args:
        in_channels (int): Channels of the input map.
        embed_dims (int): Channels C of the stage.
        num_heads (int): Attention heads.
        grid_size (int): Side of the grid the position embedding is defined
            for (after its class-token slot).
        drop_path_rates (Sequence[float]): One stochastic-depth rate per block.
        mlp_ratio (float): MLP hidden width over C. Defaults to 4.
        drop_rate (float): Dropout after the position embedding. Defaults to 0.
        with_cp (bool): Checkpoint every block. Defaults to False.
    """

    num_extra_tokens = 1

    def __init__(self, in_channels: int, embed_dims: int, num_heads: int,
                 grid_size: int, drop_path_rates: Sequence[float],
                 mlp_ratio: float = 4., drop_rate: float = 0.,
                 with_cp: bool = False) -> None:
        super().__init__(in_channels, embed_dims, grid_size, None, drop_rate, with_cp)
        for rate in drop_path_rates:
            self.blocks.append(ClassTokenBlock(embed_dims, num_heads, mlp_ratio, rate))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.norm = nn.LayerNorm(embed_dims, eps=1e-6)

    def reset_embeddings(self) -> None:
        super().reset_embeddings()
        trunc_normal_(self.cls_token, std=.02)

    def embedding_parameters(self) -> List[nn.Parameter]:
        return [self.pos_embed, self.cls_token]

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        """A (B, C, H, W) map to this stage's map and the class token."""
        x, hw = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.pos_drop(x + resize_pos_embed(self.pos_embed, hw, 1))
        x = self.norm(self.run_blocks(x, hw))
        return self.to_map(x[:, 1:], hw), x[:, 0]
