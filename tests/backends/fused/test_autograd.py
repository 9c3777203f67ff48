"""Autograd through fused regions: a region whose inputs require grad runs its kernel as one
autograd Function whose backward is generated from derivative rules (autodiff.py) and compiled
too; a region with a member that has no rule runs its torch calls (eager's graph). Checked against
eager, with torch.autograd.gradcheck and gradgradcheck in float64."""
import pytest
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


def test_a_region_needing_gradients_runs_its_kernel_and_a_generated_backward():
    with ds.config.patch(fused_sync=True):
        cf = ds.compile(chain, dynamic=True, backend="fused")
        x, w, b = (torch.randn(*s, requires_grad=True) for s in [(3, 6), (6,), (6,)])
        cf(x.detach(), w.detach(), b.detach())
        cf(x, w, b)  # requires_grad is guarded: an entry of its own
        calls = []
        for e in cf.entries:
            assert e.fn.fused
            for rt in e.fn.regions:
                assert rt.backward is not None
                rt.torch_calls = (lambda real: lambda *a: calls.append(1) or real(*a))(rt.torch_calls)
        out = cf(x, w, b)
        assert not calls and type(out.grad_fn).__name__ == "FusedRegionBackward"
        out.sum().backward()
        rt = cf.entries[0].fn.regions[0]
        assert rt._backward_fn is not None and rt._backward_fn.entries[0].fn.fused  # the backward's kernels
        assert not cf(x.detach(), w.detach(), b.detach()).requires_grad and not calls


def test_a_member_without_a_derivative_rule_keeps_the_torch_calls():
    def f(x):
        return torch.floor(x * 2) + x  # floor: no rule here
    with ds.config.patch(fused_sync=True):
        cf = ds.compile(f, backend="fused")
        x = torch.randn(4, 5, requires_grad=True)
        out = cf(x)
        assert cf.entries[0].fn.regions[0].backward is None and type(out.grad_fn).__name__ == "AddBackward0"
        out.sum().backward()
        torch.testing.assert_close(x.grad, torch.ones(4, 5))


def test_gradgradcheck_in_float64():
    with ds.config.patch(fused_sync=True):
        cf = ds.compile(chain, dynamic=True, backend="fused")
        x, w, b = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in [(3, 6), (6,), (6,)])
        cf(x, w, b)
        assert torch.autograd.gradgradcheck(cf, (x, w, b))


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


def _edges(*shape):
    """Random values with zeros, ties and a constant row: where derivative rules have their cases."""
    x = torch.randn(*shape)
    x.view(-1)[::3] = 0.0
    x.view(-1)[1::5] = 1.0
    if x.dim() > 1 and x.size(0) > 1:
        x[0] = 0.5
    return x.requires_grad_()


RULE_CASES = {
    "unary": lambda x, y: (x.exp() + x.sin() - x.cos() + x.tanh() + x.sigmoid() + x.relu() + x.square()
                           + torch.erf(x) + F.silu(x) + x.expm1() + x.abs() + F.gelu(x) - x).sum(-1),
    "positive": lambda x, y: (x.abs() + 1).log() + (x.abs() + 0.5).sqrt() + (x.abs() + 0.5).rsqrt()
                             + (x.abs() + 0.5).reciprocal() + x.abs().log1p() - x.abs().sqrt(),
    "binary": lambda x, y: (x + y) * (x - y) / (y.abs() + 1) + (2 - x) * (3 / (y.abs() + 1)) + x * y,
    "pow": lambda x, y: x.pow(2) + x.pow(0) + x.abs().pow(0.5) + x.pow(3) * y,
    "where_clamp": lambda x, y: torch.where(x > y, x, y * 2) + x.clamp(-0.5, 0.5) + y.clamp_min(0)
                                + x.clamp_max(0.25) + x.clamp(min=0.0),
    "casts": lambda x, y: (x.double() * y).float() + x.to(torch.float64).sum(-1, keepdim=True).float(),
    "reductions": lambda x, y: (x.sum(-1, keepdim=True) + x.mean(0) + x.var(-1, keepdim=True)
                                + x.std(-1, keepdim=True) + x.std(-1, correction=0, keepdim=True) * y),
    "unkept": lambda x, y: x.sum(-1)[:, None] * x + x.std(-1)[:, None] + x.var(0, unbiased=False) * y,
    "softmax": lambda x, y: x.softmax(-1) * y + x.log_softmax(-1) + (x * y).softmax(0),
}


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")  # std of one element: NaN, as eager
@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_each_derivative_rule_matches_eager_with_zeros_ties_and_constant_rows(name):
    f = RULE_CASES[name]
    cases = [(_edges(a, c), _edges(c).detach().requires_grad_()) for a, c in [(3, 1), (4, 6), (1, 5), (5, 11)]]
    cf = check_fused(f, cases, grad=True, compiles=None, equal_nan=True)
    assert all(rt.backward is not None for e in cf.entries for rt in e.fn.regions), name


def test_the_forward_saves_only_the_inputs_the_generated_backward_reads():
    # x * 2 + b.tanh(): the backward reads b's tanh (recomputed from b), never x; so x may change
    # in place before backward, as in eager, and its memory is not held
    def f(x, b):
        return (x * 2 + b.tanh()) * 3

    with ds.config.patch(fused_sync=True):
        cf = ds.compile(f, dynamic=True, backend="fused")
        for n in (3, 7):
            x, b = torch.randn(n, 5, requires_grad=True), torch.randn(5, requires_grad=True)
            x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
            xi, xi2 = x * 1, x2 * 1
            out, want = cf(xi, b), f(xi2, b2)
            rt = cf.entries[0].fn.regions[0]
            assert [rt.region.inputs[i].name for i in rt.backward.saved] == ["b"]
            xi.add_(1), xi2.add_(1)
            g = torch.randn_like(want)
            out.backward(g), want.backward(g)
            torch.testing.assert_close((x.grad, b.grad), (x2.grad, b2.grad))
