"""An independent, plain forward of the released SOFT classifier.

Written from the specification on the released state-dict keys, with
``torch.nn.functional`` only and no mmsoft code, so that converted
checkpoints can be checked against it. Also makes random released-format
state dicts.
"""
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F

TINY = dict(embed_dims=[64, 128, 320, 512], num_heads=[2, 4, 10, 16],
            depths=[1, 2, 3, 2])
SR_RATIOS = [8, 4, 2]
CONV_SIZES = [9, 5, 3]


def official_state_dict(arch=TINY, num_classes=1000, img_size=224, seed=0):
    """Random weights with the released key layout and shapes."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=0.05):
        return torch.randn(*shape, generator=gen) * scale

    sd = OrderedDict()
    dims, heads, depths = arch['embed_dims'], arch['num_heads'], arch['depths']

    def conv_bn(prefix, conv_idx, cin, cout):
        sd[f'{prefix}.{conv_idx}.weight'] = rand(cout, cin, 3, 3, scale=0.2)
        sd[f'{prefix}.{conv_idx}.bias'] = rand(cout)
        bn = f'{prefix}.{conv_idx + 1}'
        sd[f'{bn}.weight'] = 1 + rand(cout)
        sd[f'{bn}.bias'] = rand(cout)
        sd[f'{bn}.running_mean'] = rand(cout, scale=0.1)
        sd[f'{bn}.running_var'] = 1 + rand(cout, scale=0.1).abs()
        sd[f'{bn}.num_batches_tracked'] = torch.tensor(100)

    def linear(prefix, cin, cout):
        sd[f'{prefix}.weight'] = rand(cout, cin, scale=cin**-0.5)
        sd[f'{prefix}.bias'] = rand(cout)

    def layer_norm(prefix, c):
        sd[f'{prefix}.weight'] = 1 + rand(c)
        sd[f'{prefix}.bias'] = rand(c)

    grid = img_size // 4
    for i in range(4):
        extra = 1 if i == 3 else 0
        sd[f'pos_embed{i + 1}'] = rand(1, extra + (grid >> i)**2, dims[i])
    sd['cls_token'] = rand(1, 1, dims[3])
    conv_bn('patch_embed1.proj', 0, 3, 32)
    conv_bn('patch_embed1.proj', 3, 32, 32)
    conv_bn('patch_embed1.proj', 6, 32, dims[0])
    for i in range(1, 4):
        conv_bn(f'patch_embed{i + 1}.proj', 0, dims[i - 1], dims[i])
    for s in range(3):
        c, h = dims[s], heads[s]
        d, r, k = c // h, SR_RATIOS[s], CONV_SIZES[s]
        for b in range(depths[s]):
            p = f'block{s + 1}.{b}.att'
            linear(f'{p}.mha.W_q', c, c)
            linear(f'{p}.mha.W_v', c, c)
            sd[f'{p}.mha.attn.Qlandmark_op.weight'] = rand(d, d, r, r,
                                                            scale=1 / r / d**0.5)
            layer_norm(f'{p}.mha.attn.Qnorm_act.0', d)
            sd[f'{p}.mha.attn.conv.weight'] = rand(h, 1, k, k, scale=1 / k)
            linear(f'{p}.mha.ff', c, c)
            layer_norm(f'{p}.norm1', c)
            linear(f'{p}.ff1', c, 4 * c)
            linear(f'{p}.ff2', 4 * c, c)
            layer_norm(f'{p}.norm2', c)
    c = dims[3]
    for b in range(depths[3]):
        p = f'block4.{b}'
        layer_norm(f'{p}.norm1', c)
        linear(f'{p}.attn.q', c, c)
        linear(f'{p}.attn.kv', c, 2 * c)
        linear(f'{p}.attn.proj', c, c)
        layer_norm(f'{p}.norm2', c)
        linear(f'{p}.mlp.fc1', c, 4 * c)
        linear(f'{p}.mlp.fc2', 4 * c, c)
    layer_norm('norm', c)
    linear('head', c, num_classes)
    return sd


def _conv_bn_relu(x, sd, prefix, conv_idx, stride):
    x = F.conv2d(x, sd[f'{prefix}.{conv_idx}.weight'], sd[f'{prefix}.{conv_idx}.bias'],
                 stride=stride, padding=1)
    bn = f'{prefix}.{conv_idx + 1}'
    x = F.batch_norm(x, sd[f'{bn}.running_mean'], sd[f'{bn}.running_var'],
                     sd[f'{bn}.weight'], sd[f'{bn}.bias'], False, 0.0, 1e-5)
    return F.relu(x)


def _pos(sd, name, hw, extra):
    pe = sd[name]
    cls, grid = pe[:, :extra], pe[:, extra:]
    side = int(math.sqrt(grid.shape[1]))
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=hw, mode='bilinear', align_corners=False)
    return torch.cat([cls, grid.flatten(2).transpose(1, 2)], 1)


def _ln(x, sd, prefix, eps):
    return F.layer_norm(x, x.shape[-1:], sd[f'{prefix}.weight'], sd[f'{prefix}.bias'],
                        eps)


def released_newton_inv(mats):
    """The back-off Newton inverse of the released code, for one image.

    ``mats`` holds the landmark kernels of all heads of one image, (h, m, m).
    alpha = 2 / (largest row sum over all heads)^2; while the largest column
    sum of |I - A V0| over all heads exceeds 1.01 (at most 10 times) alpha is
    halved and V0 = alpha A recomputed; then 20 steps V <- 2V - V A V, no ridge.
    """
    eye = torch.eye(mats.shape[-1], dtype=mats.dtype)
    alpha = 2 / mats.sum(-1).max() ** 2
    v = alpha * mats
    pnorm = (eye - mats @ v).abs().sum(-2).max()
    halvings = 0
    while pnorm > 1.01 and halvings < 10:
        alpha = alpha / 2
        v = alpha * mats
        pnorm = (eye - mats @ v).abs().sum(-2).max()
        halvings += 1
    for _ in range(20):
        v = 2 * v - v @ mats @ v
    return v


def ridge_newton_inv(a2):
    """mmsoft's default: per head, alpha = 0.9 * 2 / (max row sum)^2 on A + 0.01 I."""
    pm = a2 + 0.01 * torch.eye(len(a2), dtype=a2.dtype)
    inv = 0.9 * 2 / a2.sum(-1).max() ** 2 * pm
    for _ in range(20):
        inv = 2 * inv - inv @ pm @ inv
    return inv


def _soft_attention(x, sd, p, hw, heads, r, normalize=False, newton='ridge'):
    """One image's SOFT attention, head by head, as the spec states it."""
    n, c = x.shape
    d = c // heads
    q = F.linear(x, sd[f'{p}.W_q.weight'], sd[f'{p}.W_q.bias'])
    v = F.linear(x, sd[f'{p}.W_v.weight'], sd[f'{p}.W_v.bias'])
    q = q.view(n, heads, d).permute(1, 0, 2) / d**0.25        # (h, N, d)
    v = v.view(n, heads, d).permute(1, 0, 2)
    a1s, a2s = [], []
    for i in range(heads):
        qm = q[i].t().reshape(1, d, *hw)
        lm = F.conv2d(qm, sd[f'{p}.attn.Qlandmark_op.weight'], stride=r)
        lm = lm.reshape(d, -1).t()
        lm = F.gelu(_ln(lm, sd, f'{p}.attn.Qnorm_act.0', 1e-5))
        a1s.append(torch.exp(-((q[i][:, None] - lm[None]) ** 2).sum(-1) / 2))
        a2s.append(torch.exp(-((lm[:, None] - lm[None]) ** 2).sum(-1) / 2))
    if newton == 'backoff':
        invs = list(released_newton_inv(torch.stack(a2s)))
    else:
        invs = [ridge_newton_inv(a2) for a2 in a2s]
    outs = []
    for i in range(heads):
        inv = invs[i]
        if normalize:
            dn = a2s[i].sum(-1) ** -0.5
            inv = dn[:, None] * inv * dn[None]
        outs.append(a1s[i] @ inv @ (a1s[i].t() @ v[i]))
    out = torch.stack(outs)                                     # (h, N, d)
    vm = v.permute(2, 0, 1).reshape(d, heads, *hw)              # (B * d, h, H, W)
    w = sd[f'{p}.attn.conv.weight']
    vc = F.conv2d(vm, w, padding=w.shape[-1] // 2, groups=heads)
    out = out + vc.reshape(d, heads, n).permute(1, 2, 0)
    out = out.permute(1, 0, 2).reshape(n, c)
    return F.linear(out, sd[f'{p}.ff.weight'], sd[f'{p}.ff.bias'])


def official_forward(sd, img, arch=TINY, normalize=False, newton='ridge'):
    """Logits of the released model for one batch of images (eval mode).

    ``normalize``: SOFT-Norm's attention. ``newton``: ``'backoff'`` for the
    inverse of the released code (image by image), ``'ridge'`` for mmsoft's
    default.
    """
    heads = arch['num_heads']
    logits = []
    for image in img:
        x = image[None]
        x = _conv_bn_relu(x, sd, 'patch_embed1.proj', 0, 2)
        x = _conv_bn_relu(x, sd, 'patch_embed1.proj', 3, 1)
        x = _conv_bn_relu(x, sd, 'patch_embed1.proj', 6, 2)
        for s in range(3):
            if s > 0:
                x = _conv_bn_relu(x, sd, f'patch_embed{s + 1}.proj', 0, 2)
            hw = tuple(x.shape[-2:])
            t = x.flatten(2)[0].t() + _pos(sd, f'pos_embed{s + 1}', hw, 0)[0]
            for b in range(arch['depths'][s]):
                p = f'block{s + 1}.{b}.att'
                t = _ln(t + _soft_attention(t, sd, f'{p}.mha', hw, heads[s],
                                            SR_RATIOS[s], normalize, newton),
                        sd, f'{p}.norm1', 1e-5)
                hidden = F.gelu(F.linear(t, sd[f'{p}.ff1.weight'], sd[f'{p}.ff1.bias']),
                                approximate='tanh')
                mlp = F.linear(hidden, sd[f'{p}.ff2.weight'], sd[f'{p}.ff2.bias'])
                t = _ln(t + mlp, sd, f'{p}.norm2', 1e-5)
            x = t.t().reshape(1, -1, *hw)
        x = _conv_bn_relu(x, sd, 'patch_embed4.proj', 0, 2)
        hw = tuple(x.shape[-2:])
        t = torch.cat([sd['cls_token'][0], x.flatten(2)[0].t()])
        t = t + _pos(sd, 'pos_embed4', hw, 1)[0]
        c, h = t.shape[-1], heads[3]
        for b in range(arch['depths'][3]):
            p = f'block4.{b}'
            y = _ln(t, sd, f'{p}.norm1', 1e-6)
            q = F.linear(y, sd[f'{p}.attn.q.weight'], sd[f'{p}.attn.q.bias'])
            kv = F.linear(y, sd[f'{p}.attn.kv.weight'], sd[f'{p}.attn.kv.bias'])
            q = q.view(-1, h, c // h).transpose(0, 1)
            k, v = kv.view(-1, 2, h, c // h).permute(1, 2, 0, 3)
            attn = torch.softmax(q @ k.transpose(-2, -1) * (c // h) ** -0.5, -1)
            y = (attn @ v).transpose(0, 1).reshape(-1, c)
            t = t + F.linear(y, sd[f'{p}.attn.proj.weight'], sd[f'{p}.attn.proj.bias'])
            y = _ln(t, sd, f'{p}.norm2', 1e-6)
            y = F.gelu(F.linear(y, sd[f'{p}.mlp.fc1.weight'], sd[f'{p}.mlp.fc1.bias']))
            t = t + F.linear(y, sd[f'{p}.mlp.fc2.weight'], sd[f'{p}.mlp.fc2.bias'])
        t = _ln(t, sd, 'norm', 1e-6)
        logits.append(F.linear(t[0], sd['head.weight'], sd['head.bias']))
    return torch.stack(logits)
