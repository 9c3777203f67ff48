"""Autograd through fused regions: a region whose inputs require grad runs its torch calls, so
autograd records eager's graph (a kernel would have to be recomputed for the backward, slower
than eager); checked against eager and with torch.autograd.gradcheck in float64."""
import torch
import torch.nn.functional as F

import dynashape as ds
from .oracle import check_fused


def chain(x, w, b):
    y = F.gelu(x * w + b) * torch.sigmoid(x)
    return (y - y.mean(-1, keepdim=True)) / y.std(-1, keepdim=True)


def block(x, w, b):
    h = F.layer_norm(x, (x.size(-1),), w, b)
    return h.relu() + x, x.softmax(-1) * (x > 0)


def test_gradients_of_a_pointwise_and_reduction_region_match_eager():
    cases = [tuple(torch.randn(*s, requires_grad=True) for s in [(a, c), (c,), (c,)]) for a, c in [(3, 5), (6, 17)]]
    check_fused(chain, cases, grad=True)
    check_fused(block, cases, grad=True)


def test_only_some_inputs_require_grad():
    cases = [(torch.randn(4, 9, requires_grad=True), torch.randn(9), torch.randn(9, requires_grad=True))]
    check_fused(chain, cases, grad=True)


def test_gradcheck_in_float64():
    cf = ds.compile(chain, dynamic=True, backend="fused")
    x, w, b = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in [(3, 6), (6,), (6,)])
    cf(x, w, b)
    assert cf.entries[0].fn.fused
    assert torch.autograd.gradcheck(cf, (x, w, b))


def test_a_region_needing_gradients_runs_torch_calls_and_one_without_runs_the_kernel():
    cf = ds.compile(chain, dynamic=True, backend="fused")
    x, w, b = (torch.randn(*s, requires_grad=True) for s in [(3, 6), (6,), (6,)])
    cf(x.detach(), w.detach(), b.detach())
    cf(x, w, b)  # requires_grad is guarded: an entry of its own
    calls = []
    for e in cf.entries:
        assert e.fn.fused
        for rt in e.fn.regions:
            rt.torch_calls = (lambda real: lambda *a: calls.append(1) or real(*a))(rt.torch_calls)
    out = cf(x, w, b)
    assert calls and type(out.grad_fn).__name__ == "DivBackward0"  # eager's own graph
    calls.clear()
    assert not cf(x.detach(), w.detach(), b.detach()).requires_grad and not calls


def test_no_grad_runs_the_kernel_and_returns_no_graph():
    cf = ds.compile(chain, dynamic=True, backend="fused")
    x, w, b = (torch.randn(*s, requires_grad=True) for s in [(3, 6), (6,), (6,)])
    with torch.no_grad():
        out = cf(x, w, b)
    assert not out.requires_grad and cf.entries[0].fn.fused
    torch.testing.assert_close(out, chain(x, w, b).detach())


def test_cross_entropy_gradients_match_eager():
    def f(x, t):
        return F.cross_entropy(x * 2, t)
    cases = [(torch.randn(n, c, requires_grad=True), torch.randint(0, c, (n,))) for n, c in [(3, 5), (7, 40)]]
    check_fused(f, cases, grad=True)
