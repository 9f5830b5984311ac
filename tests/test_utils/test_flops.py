"""The FLOP counter sees every product, including the Newton iterations."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from mmengine.analysis import FlopAnalyzer, get_model_complexity_info

from mmsoft.models import SOFT, SOFTAttention
from mmsoft.ops import newton_inverse, use_newton_route, use_tile_elements
from mmsoft.utils.flops import FlopCounter, count_flops

PAPER_GFLOPS = dict(tiny=1.9, small=3.3, medium=7.2, large=11.0, huge=16.3)


def test_counts_matmul_conv_and_exp_exactly():
    with FlopCounter() as counter:
        torch.ones(2, 3) @ torch.ones(3, 4)                      # 24
        torch.bmm(torch.ones(5, 2, 3), torch.ones(5, 3, 4))      # 120
        F.linear(torch.ones(7, 3), torch.ones(4, 3), torch.ones(4))  # 84
        F.conv2d(torch.ones(1, 4, 8, 8), torch.ones(6, 2, 3, 3), padding=1,
                 groups=2)                                       # 64*6*18
        torch.exp(torch.ones(10))                                # 10
    assert counter.total == 24 + 120 + 84 + 64 * 6 * 18 + 10


def test_newton_iterations_are_counted_and_attributed():
    a = torch.eye(8).expand(3, 8, 8).contiguous()
    with FlopCounter() as counter:
        newton_inverse(a, num_iters=5)
    # two m^3 products per iteration per matrix, then V_T applied to I
    assert counter.region_counts['newton'] == 5 * 3 * 2 * 8**3
    assert counter.total == counter.region_counts['newton'] + 3 * 8**3


def test_in_place_products_and_exponentials_are_counted():
    with FlopCounter() as counter:
        torch.zeros(5, 2, 4).baddbmm_(torch.ones(5, 2, 3), torch.ones(5, 3, 4))
        torch.zeros(2, 4).addmm_(torch.ones(2, 3), torch.ones(3, 4))
        torch.ones(10).exp_()
    assert counter.total == 120 + 24 + 10


# A forced spectral route and small tiles change how a CPU runs the forward,
# not the count.
@pytest.mark.parametrize('setting', [
    contextlib.nullcontext, lambda: use_newton_route('eigh'),
    lambda: use_tile_elements(4096)], ids=['default', 'eigh', 'small-tiles'])
def test_attention_count_follows_its_complexity(setting):
    attn = SOFTAttention(64, 2, sr_ratio=8, conv_size=9).eval()
    x = torch.rand(1, 56 * 56, 64)
    with setting():
        counter = count_flops(attn, x, (56, 56))
    n, m, d, h, c = 56 * 56, 49, 32, 2, 64
    projections = 3 * n * c * c
    landmarks = h * m * d * d * 64
    kernels = h * (n * m + m * m) * (d + 2)          # augmented distance products
    lowrank = h * (n * m * d * 2 + m * m * d)        # A1^T V, P(.), A1(.)
    v_conv = h * n * d * 81
    newton = h * 20 * 2 * m**3
    exps = h * (n * m + m * m)
    expected = projections + landmarks + kernels + lowrank + v_conv + newton + exps
    assert counter.region_counts['newton'] == newton
    assert counter.total == expected


@pytest.mark.parametrize('arch', [
    'tiny', *(pytest.param(a, marks=pytest.mark.slow)  # 10-25 s each on 2 cores
              for a in ('small', 'medium', 'large', 'huge'))])
def test_preset_flops_match_the_paper(arch):
    model = SOFT(arch=arch)
    counter = count_flops(model, torch.rand(1, 3, 224, 224))
    head = model.embed_dims[3] * 1000
    # The paper's figures leave the Newton iterations out.
    gflops = (counter.total - counter.region_counts['newton'] + head) / 1e9
    assert abs(gflops - PAPER_GFLOPS[arch]) / PAPER_GFLOPS[arch] < 0.10, gflops


def test_kernel_spread_over_tiles_is_computed_once_per_pass(monkeypatch):
    import mmsoft.ops.lowrank_attention as ops
    n, m, d = 64, 8, 4
    q, k, v = torch.rand(1, n, d), torch.rand(1, m, d), torch.rand(1, n, d)

    def kernel_macs(tile_elements):
        monkeypatch.setenv('MMSOFT_TILE_ELEMENTS', str(tile_elements))
        with torch.no_grad(), FlopCounter() as counter:
            ops.soft_lowrank_attention(q, k, v, ops.InverseCfg(method='solve'))
        return counter.total

    # Several tiles recompute the N x m kernel (products and exponentials).
    assert kernel_macs(m * 16) - kernel_macs(10**9) == n * m * (d + 2) + n * m


SMALL_ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                  depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1])


@pytest.mark.parametrize('size', [224, 512])
def test_mmengine_counter_counts_soft_and_misses_what_the_docs_say(size):
    # What mmdet's, mmseg's and mmpretrain's get_flops.py call; it traces the
    # model with torch.jit, which takes the graph-friendly path count_flops counts.
    model = SOFT(arch=SMALL_ARCH).eval()
    x = torch.rand(1, 3, size, size)
    info = get_model_complexity_info(model, inputs=(x, ), show_table=False,
                                     show_arch=False)
    by_op = FlopAnalyzer(model, (x, )).by_operator()
    assert info['flops'] == sum(by_op.values()) > 0
    # Norms and the position-embedding resize are counted by mmengine only.
    assert set(by_op) == {'conv', 'linear', 'matmul', 'batch_norm', 'layer_norm',
                          'upsample_bilinear2d'}

    ours = count_flops(model, x)
    # Inside the Newton inverse's autograd Function, one opaque node to a JIT
    # trace: the iterations and the product of V_T with the m x d right side
    # (h m^2 d = m^2 C per layer, m landmarks from each stage's grid).
    grids = [size // 4 // 2**i for i in range(3)]
    inverse_applied = sum(
        depth * (grid // sr)**4 * dims for grid, sr, depth, dims in zip(
            grids, SMALL_ARCH['sr_ratios'], SMALL_ARCH['depths'],
            SMALL_ARCH['embed_dims']))
    exps = sum(v for k, v in ours.counts.items() if k.startswith('exp'))
    softmax_attention = sum(v for k, v in ours.counts.items()
                            if 'scaled_dot_product' in k)
    assert exps > 0 and softmax_attention > 0
    assert by_op['conv'] + by_op['linear'] + by_op['matmul'] == (
        ours.total - ours.region_counts['newton'] - inverse_applied - exps
        - softmax_attention)
