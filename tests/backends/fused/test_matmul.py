"""Matrix products in compiled graphs (matmul.py): linear, addmm, mm and matmul by a matrix run
through brgemm (gemm.mm) forward and backward where the fast path applies, and are torch's own
calls elsewhere; either way values, gradients, double backward and eager's errors match eager."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.backends.fused import gemm, matmul
from .oracle import check_fused


pytestmark = pytest.mark.usefixtures("gemm_on")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)  # the cases' tolerances are for rounding of values of order 1: fixed draws


@pytest.fixture
def calls(monkeypatch):
    """How many products gemm.mm computed (declined ones not counted)."""
    seen = []
    real = gemm.mm

    def counting(*a, **k):
        out = real(*a, **k)
        if out is not None:
            seen.append(tuple(a[0].shape) + (a[1].shape[1],))
        return out
    monkeypatch.setattr(gemm, "mm", counting)
    return seen


def mlp(x, w1, b1, w2, w3):
    h = torch.sigmoid(F.linear(x, w1, b1))  # (..., 96)
    h = torch.addmm(b1[:48], h.reshape(-1, 96)[:, :80], w2)  # (rows, 48): a column slice as the input
    return torch.tanh(h @ w3).reshape(*x.shape[:-1], -1), torch.mm(h, w3)


def args(*lead, grad=(True, True, True, True, True)):
    """x and mlp's weights, scaled as nn.Linear's (values and gradients of order 1), seeded by the shape."""
    g = torch.Generator().manual_seed(sum(lead) + 10 * sum(grad))
    shapes = [(*lead, 64), (96, 64), (96,), (80, 48), (48, 40)]
    scale = [1, 64 ** -0.5, 1, 80 ** -0.5, 48 ** -0.5]
    return tuple((torch.randn(*s, generator=g) * c).requires_grad_(r) for s, c, r in zip(shapes, scale, grad))


TOL = dict(rtol=1e-4, atol=5e-5)  # weight gradients sum 100-200 rows: both float32 results round (measured 2e-5)


def test_products_and_their_gradients_match_eager_on_changing_shapes(calls):
    check_fused(mlp, [args(4, 32), args(3, 50), args(170)], grad=True, compiles=2, **TOL)
    assert {c[1:] for c in calls} >= {(64, 96), (80, 48), (48, 40)}  # linear, addmm, mm/@ by brgemm


def test_only_some_operands_require_grad(calls):
    for grad in [(True, False, False, False, False), (False, True, False, True, False),
                 (False, False, True, False, False), (False, False, False, False, True)]:
        check_fused(mlp, [args(5, 40, grad=grad)], grad=True, **TOL)
    assert len(calls) > 0


def test_weight_and_bias_gradients_of_a_linear_layer(calls):
    lin = torch.nn.Linear(128, 200)
    ref = torch.nn.Linear(128, 200)
    ref.load_state_dict(lin.state_dict())
    cf = ds.compile(lambda x: lin(x).square().mean(), dynamic=True, backend="fused")
    for n in (33, 256):
        x = torch.randn(n, 128)
        cf(x).backward()
        ref(x).square().mean().backward()
        for p, q in zip(lin.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
            assert p.grad.is_contiguous()
            p.grad = q.grad = None
    assert len(calls) == 2 * 2  # forward, weight's gradient (x needs none)


def test_an_expanded_gradient_and_a_transposed_input(calls):
    # sum() sends back a gradient of strides 0; the input is a transposed (non-contiguous) matrix
    f = lambda x, w: F.linear(x.t(), w).sum()  # noqa: E731
    check_fused(f, [(torch.randn(64, 90, requires_grad=True), torch.randn(70, 64, requires_grad=True))], grad=True)
    assert len(calls) >= 3


def test_a_non_contiguous_batched_input_runs_torchs_call(calls):
    f = lambda x, w: F.linear(x.transpose(0, 1), w)  # noqa: E731
    check_fused(f, [(torch.randn(64, 8, 64, requires_grad=True), torch.randn(70, 64, requires_grad=True))], grad=True)
    assert calls == []


def test_double_backward_differentiates_the_products(calls):
    def f(x, w):
        y = torch.tanh(F.linear(x, w))
        (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return gx.square().sum()
    x, w = torch.randn(64, 64, requires_grad=True), torch.randn(80, 64, requires_grad=True)
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
    y = torch.tanh(ds.compile(lambda x, w: F.linear(x, w), backend="fused")(x, w))
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    gx.square().sum().backward()
    f(x2, w2).backward()
    torch.testing.assert_close((x.grad, w.grad), (x2.grad, w2.grad), **TOL)
    assert len(calls) > 0


def test_changing_a_saved_input_in_place_raises_as_eager_does():
    def f(x, w):
        return F.linear(x, w)
    for fn in (f, ds.compile(f, backend="fused")):
        x, w = torch.randn(64, 64, requires_grad=True), torch.randn(64, 64, requires_grad=True)
        h = x * 2
        y = fn(h, w)
        with torch.no_grad():
            h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_a_products_result_can_be_changed_in_place(calls):
    def f(x, w, b):
        y = F.linear(x, w, b)
        y.mul_(2)  # a view made inside an autograd Function could not be
        return y.sum(-1)
    check_fused(f, [args(4, 32)[:3]], grad=True, **TOL)
    assert len(calls) > 0


@pytest.mark.parametrize("x_shape,w_shape", [((0, 0, 0), (2, 0)), ((3, 0, 4), (5, 4)), ((2, 3, 0), (5, 0)),
                                             ((0, 4), (5, 4)), ((3, 0), (5, 0)), ((3, 4), (0, 4))])
def test_empty_products_give_eagers_result(x_shape, w_shape):
    # every product goes through brgemm under "on": an empty one is torch's call, as eager's
    # (view(-1, 0) of an empty input raised: train fuzz seed 25112802)
    f = lambda x, w: F.linear(x, w) + 1  # noqa: E731
    check_fused(f, [(torch.randn(x_shape, requires_grad=True), torch.randn(w_shape, requires_grad=True))],
                grad=True, fused=False)


def test_eagers_shape_error_is_raised():
    cf = ds.compile(lambda x, w: F.linear(x, w), backend="fused")
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        cf(torch.randn(64, 64), torch.randn(64, 65))


@pytest.mark.parametrize("case", ["float64", "small", "autocast", "off"])
def test_other_products_stay_torchs_calls(case, calls):
    with ds.config.patch(fused_gemm="auto"):
        gemm.active()  # its one-time timing (a product of its own) done before counting
    calls.clear()
    dt = torch.float64 if case == "float64" else torch.float32
    n = 4 if case == "small" else 64
    x, w = torch.randn(n, n, dtype=dt, requires_grad=True), torch.randn(n, n, dtype=dt, requires_grad=True)

    def f(x, w):
        if case == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return F.linear(x, w)
        return F.linear(x, w)
    with ds.config.patch(fused_gemm={"off": "off", "small": "auto"}.get(case, "on")):  # "on" takes any size
        cf = ds.compile(f, backend="fused")
        got = cf(x, w)
    want = f(x, w)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.sum().backward()
    assert calls == []


def test_the_replaced_targets_are_the_products_a_trace_records():
    names = {fn.__name__ for fn in matmul._TARGETS.values()}
    assert names == {"linear", "addmm", "mm", "matmul"}


@pytest.mark.parametrize("name,args", [
    ("linear", lambda x, w, b: (x, w, b)), ("addmm", lambda x, w, b: (b, x, w.t())),
    ("mm", lambda x, w, b: (x, w.t())), ("matmul", lambda x, w, b: (x, w.t()))])
def test_a_product_below_the_minimum_work_goes_straight_to_torch(monkeypatch, name, args):
    # a small model's products are most of its calls: they skip the fast path's checks entirely
    monkeypatch.setattr(gemm, "min_work", [1 << 18])
    monkeypatch.setattr(matmul, "_run", lambda *a: pytest.fail("a 64x32x32 product took the fast path's checks"))
    a = args(torch.randn(64, 32), torch.randn(32, 32), torch.randn(32))
    want = F.linear(*a) if name == "linear" else getattr(torch, name)(*a)
    torch.testing.assert_close(getattr(matmul, name)(*a), want)


def test_wrong_shapes_of_a_small_product_raise_torch_s_errors():
    x = torch.randn(4, 3)
    for ours, theirs in [(lambda: matmul.linear(x, torch.tensor(2.0)), lambda: F.linear(x, torch.tensor(2.0))),
                         (lambda: matmul.mm(x, torch.tensor(2.0)), lambda: torch.mm(x, torch.tensor(2.0))),
                         (lambda: matmul.matmul(x, torch.randn(5)), lambda: torch.matmul(x, torch.randn(5)))]:
        with pytest.raises(Exception) as want:
            theirs()
        with pytest.raises(type(want.value)):
            ours()
