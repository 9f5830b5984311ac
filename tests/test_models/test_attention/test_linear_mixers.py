"""Focused linear and agent attention against plain transcriptions of their papers."""
import pytest
import torch
import torch.nn.functional as F

from mmsoft.models import SOFT, AgentAttention, FocusedLinearAttention

MIXERS = [FocusedLinearAttention, AgentAttention]
TINY_ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                 depths=[1, 1, 1, 1])


def tokens(height=5, width=7, channels=16, batch=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, height * width, channels, generator=gen)


def heads(module, x):
    """Per-head projections as plain (h, N, d) lists per image."""
    q = module.q(x)
    k, v = module.kv(x).chunk(2, dim=-1)
    h = module.num_heads
    split = [t.view(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3) for t in (q, k, v)]
    return split


def plain_dwc(module, v, hw):
    """DWC of the values, laid out as the C channels on the grid, per head."""
    batch, h, n, d = v.shape
    v_map = v.permute(0, 1, 3, 2).reshape(batch, h * d, *hw)
    out = F.conv2d(v_map, module.dwc.weight, module.dwc.bias,
                   padding=module.dwc.padding, groups=h * d)
    return out.view(batch, h, d, n).permute(0, 1, 3, 2)


def merge(module, out):
    batch, h, n, d = out.shape
    return module.proj(out.permute(0, 2, 1, 3).reshape(batch, n, h * d))


def plain_focused(module, x, hw, p):
    """Eq. 2, 5-7 of arXiv 2308.00442 with the N x N similarity written out."""
    q, k, v = heads(module, x)

    def phi(t):  # Eq. 5-6, one token at a time
        rows = []
        for vec in F.relu(t).reshape(-1, t.shape[-1]):
            powered = vec ** p
            norm = powered.norm()
            rows.append(powered * (vec.norm() / norm) if norm > 0 else powered)
        return torch.stack(rows).view_as(t)

    sim = phi(q) @ phi(k).transpose(-2, -1)                   # (B, h, N, N)
    total = sim.sum(-1, keepdim=True)
    # Eq. 2; a query whose features are all zero attends to nothing.
    out = torch.where(total > 0, sim / total, torch.zeros_like(sim)) @ v
    return merge(module, out + plain_dwc(module, v, hw))      # Eq. 7


def plain_agent(module, x, hw):
    """Eq. 3-4 of arXiv 2312.08874: two explicit softmax attentions."""
    q, k, v = heads(module, x)
    batch, h, n, d = q.shape
    s = module.agent_grid
    agents = torch.empty(batch, h, s * s, d, dtype=x.dtype)
    grid = q.permute(0, 1, 3, 2).reshape(batch, h, d, *hw)
    for i in range(s):  # adaptive average pooling, cell by cell
        rows = slice((i * hw[0]) // s, -((-(i + 1) * hw[0]) // s))
        for j in range(s):
            cols = slice((j * hw[1]) // s, -((-(j + 1) * hw[1]) // s))
            agents[:, :, i * s + j] = grid[..., rows, cols].mean((-2, -1))
    b1 = F.interpolate(module.agent_bias, size=hw, mode='bilinear').flatten(2)
    b2 = F.interpolate(module.query_bias, size=hw, mode='bilinear').flatten(2)
    scale = d ** -0.5
    agent_values = torch.softmax(agents @ k.transpose(-2, -1) * scale + b1, -1) @ v
    out = torch.softmax(q @ agents.transpose(-2, -1) * scale + b2.transpose(-2, -1),
                        -1) @ agent_values
    return merge(module, out + plain_dwc(module, v, hw))


@pytest.mark.parametrize('power', [1., 3.])
def test_focused_linear_equals_the_papers_equations(power):
    torch.manual_seed(0)
    attn = FocusedLinearAttention(16, 2, focusing_factor=power).double()
    x = tokens().double()
    torch.testing.assert_close(attn(x, (5, 7)), plain_focused(attn, x, (5, 7), power))


def test_focused_map_keeps_the_norm_and_sharpens():
    x = torch.tensor([[3., 1., -2.]])
    out = FocusedLinearAttention(3, 1).forward.__globals__['focused_map'](x, 3.)
    torch.testing.assert_close(out.norm(), F.relu(x).norm())
    # A larger power moves the direction towards the largest entry.
    assert out[0, 0] / out[0, 1] > x[0, 0] / x[0, 1]
    assert out[0, 2] == 0


@pytest.mark.parametrize('hw', [(5, 7), (9, 11), (2, 3)])
def test_agent_equals_the_papers_equations(hw):
    torch.manual_seed(0)
    attn = AgentAttention(16, 2, agent_grid=3, bias_grid=4).double()
    x = tokens(*hw).double()
    torch.testing.assert_close(attn(x, hw), plain_agent(attn, x, hw))


@pytest.mark.parametrize('mixer', MIXERS)
@pytest.mark.parametrize('hw', [(1, 1), (3, 5), (13, 6)])
def test_shape_at_odd_sizes_and_no_batch_coupling(mixer, hw):
    torch.manual_seed(0)
    attn = mixer(16, 2).eval()
    x = tokens(*hw, batch=3)
    out = attn(x, hw)
    assert out.shape == x.shape and torch.isfinite(out).all()
    other = x.clone()
    other[1:] = torch.randn_like(other[1:]) * 5
    torch.testing.assert_close(attn(other, hw)[0], out[0])


@pytest.mark.parametrize('mixer', MIXERS)
def test_gradient_reaches_every_parameter_in_the_backbone(mixer):
    torch.manual_seed(0)
    model = SOFT(arch=TINY_ARCH, attn_cfg=dict(type=mixer.__name__))
    assert isinstance(model.stages[0].blocks[0].attn, mixer)
    (out,) = model(torch.rand(2, 3, 45, 61))
    # A random projection: the sum of a LayerNorm output carries no gradient.
    (out * torch.randn_like(out)).sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    mixers = [m for m in model.modules() if isinstance(m, mixer)]
    assert len(mixers) == 3
    for module in mixers:
        for name, param in module.named_parameters():
            assert param.grad.abs().sum() > 0, name


@pytest.mark.parametrize('mixer', MIXERS)
def test_parameters_within_five_percent_of_soft_tiny(mixer):
    def count(attn_cfg):
        model = SOFT(arch='tiny', attn_cfg=attn_cfg)
        return sum(p.numel() for p in model.parameters())

    soft = count(None)
    assert abs(count(dict(type=mixer.__name__)) - soft) / soft < 0.05


@pytest.mark.parametrize('kwargs, match', [
    (dict(focusing_factor=0), 'focusing_factor must be positive'),
    (dict(dwc_size=4), 'dwc_size must be a positive odd number'),
])
def test_focused_linear_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FocusedLinearAttention(16, 2, **kwargs)


@pytest.mark.parametrize('kwargs, match', [
    (dict(agent_grid=0), 'agent_grid must be >= 1'),
    (dict(bias_grid=0), 'bias_grid must be >= 1'),
    (dict(dwc_size=2), 'dwc_size must be a positive odd number'),
])
def test_agent_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AgentAttention(16, 2, **kwargs)
