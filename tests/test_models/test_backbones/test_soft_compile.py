"""``torch.compile`` of the SOFT backbone: one graph, and eager's numbers."""
import copy

import pytest
import torch
from helpers.batchnorm import bias_before_batchnorm

from mmsoft.models import SOFT

SMALL_ARCH = dict(embed_dims=[16, 32, 32, 64], num_heads=[1, 2, 2, 4],
                  depths=[1, 1, 1, 1], normalize=True)


def _backbone() -> SOFT:
    torch.manual_seed(0)
    model = SOFT(arch=SMALL_ARCH, out_type='featmap', out_indices=(0, 1, 2, 3))
    model.init_weights()
    return model


def test_backbone_compiles_to_one_graph():
    # Python-side checks and region markers once split it into 40 graphs.
    model = _backbone().eval()
    explanation = torch._dynamo.explain(model)(torch.rand(1, 3, 64, 64))
    reasons = [b.reason.split('\n')[0] for b in explanation.break_reasons]
    assert explanation.graph_break_count == 0, reasons
    assert explanation.graph_count == 1


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max() / expected.abs().max())


# aot_eager traces forward and backward as inductor does, without generating
# code (seconds), and is checked in float64, where the compiled graph must
# give eager's numbers up to rounding. Inductor compiles C++ kernels (minutes
# on 2 cores, much longer in float64) whose reordered float32 arithmetic
# moves outputs by about 1e-5 through the Newton iterations.
@pytest.mark.parametrize('backend, dtype, out_tol, grad_tol', [
    ('aot_eager', torch.float64, 1e-10, 1e-8),
    pytest.param('inductor', torch.float32, 1e-4, 1e-3, marks=pytest.mark.slow)])
def test_compiled_forward_and_backward_equal_eager(backend, dtype, out_tol,
                                                   grad_tol):
    torch._dynamo.reset()
    eager = _backbone().train().to(dtype)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend=backend)
    x = torch.rand(2, 3, 64, 96, dtype=dtype)
    outs = [model(x) for model in (eager, compiled)]
    for a, b in zip(*outs):
        assert _relative(b, a) < out_tol
    for out in outs:
        sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum()
            for o in out).backward()
    grads = {n: p.grad for n, p in eager.named_parameters() if p.grad is not None}
    assert len(grads) == len([p for p in eager.parameters() if p.requires_grad])
    # A convolution bias before a train-mode BatchNorm gets only rounding noise.
    cancelled = bias_before_batchnorm(eager)
    assert len(cancelled) == 6
    for name, param in compiled_model.named_parameters():
        if name not in cancelled:
            assert _relative(param.grad, grads[name]) < grad_tol, name


def test_finite_check_stays_in_eager():
    model = _backbone().eval()
    x = torch.rand(1, 3, 64, 64)
    x[0, 0, 0, 0] = float('nan')
    with pytest.raises(ValueError, match='NaN or Inf'):
        model(x)
