"""The fused oracle: backend='fused' against eager PyTorch, value by value, on many shapes."""
from __future__ import annotations

import torch

import dynashape as ds
from dynashape.tracing.tree import leaves
from tests.oracle import _clone

TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def check_fused(fn, cases, *, fused=True, grad=False, compiles=1, **tol):
    """Run `fn` compiled with backend='fused' and eagerly on each case; results (and input
    gradients, with `grad`) must match. `fused`: the compiled entry must be running kernels."""
    cf = ds.compile(fn, dynamic=True, backend="fused")
    for args in cases:
        a1, a2 = _clone(args), _clone(args)
        want = fn(*a1)
        got = cf(*a2)
        t = dict(tol)
        dts = {x.dtype for x in leaves(want) if isinstance(x, torch.Tensor)}
        for dt in dts:
            if dt in TOL and not tol:
                t = TOL[dt]
        torch.testing.assert_close(got, want, **t)
        if grad:
            outs = [o for o in leaves(want) if isinstance(o, torch.Tensor) and o.requires_grad]
            outs2 = [o for o in leaves(got) if isinstance(o, torch.Tensor) and o.requires_grad]
            assert len(outs) == len(outs2)
            g = [torch.randn_like(o) for o in outs]
            torch.autograd.backward(outs, g)
            torch.autograd.backward(outs2, g)
            for x1, x2 in zip(leaves(a1), leaves(a2)):
                if isinstance(x1, torch.Tensor) and x1.requires_grad:
                    torch.testing.assert_close(x2.grad, x1.grad, **t)
    if compiles is not None:
        assert cf.stats.compiles == compiles, cf.stats.recompile_reasons
    if fused:
        assert all(e.fn.fused for e in cf.entries), [e.fn.error for e in cf.entries]
    return cf


def regions(cf) -> list[list[str]]:
    """The names of the graph calls each compiled region of the newest entry runs."""
    return [[n.name for n in rt.region.nodes] for rt in cf.entries[0].fn.regions]


def no_less_accurate_than_eager(fn, x, backend="fused"):
    """`fn(x)` and its gradient, compiled, are no farther from the float64 run than eager's float32
    (times 2, plus 1e-9 of their scale, for an eager result that is exact): an error of the same size as eager's
    rounding passes, a formula that loses digits does not."""
    cf = ds.compile(fn, dynamic=True, backend=backend)
    got = {}
    for name, f, dt in (("eager", fn, torch.float32), ("ours", cf, torch.float32), ("exact", fn, torch.float64)):
        xx = x.to(dt).detach().requires_grad_()
        out = f(xx)
        out.backward()
        got[name] = (out.detach().double(), xx.grad.double())
    for k in range(2):
        exact = got["exact"][k]
        slack = 1e-9 * float(exact.abs().max())
        eager_err = float((got["eager"][k] - exact).abs().max())
        ours_err = float((got["ours"][k] - exact).abs().max())
        assert ours_err <= 2 * eager_err + slack, (("loss", "gradient")[k], ours_err, eager_err)
    return cf


def outcome(fn, *args):
    """What a call gives: its result, or the type of what it raised (compared as such)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception type is what is compared
        return type(e)


def same_values(got, want):
    """The same values (to the bit; NaN for NaN), dtypes and shapes, or the same exception."""
    if isinstance(want, type) or isinstance(got, type):
        assert got == want, (got, want)
        return
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g, w)
        if not w.is_floating_point():
            assert torch.equal(g, w), (i, g, w)
            continue
        assert bool(((g == w) | (g.isnan() & w.isnan())).all()), (i, g, w)
        zero = w == 0
        assert torch.equal(torch.signbit(g[zero]), torch.signbit(w[zero])), (i, g, w)


def bitwise_vs_eager(fn, cases, fused=True):
    """`fn` compiled (dynamic sizes) against eager on each case, value for value (`same_values`); with `fused`,
    kernels must run."""
    ds.reset()
    with ds.config.patch(fused_sync=True):
        cf = ds.compile(fn, dynamic=True, backend="fused")
        for args in cases:
            same_values(outcome(cf, *args), outcome(fn, *args))
    if fused:
        assert any(e.fn.fused for e in cf.entries), [e.fn.error for e in cf.entries]  # (not a size-0 entry)
    return cf
