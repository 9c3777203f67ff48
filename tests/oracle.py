"""The differential oracle: compiled vs eager over many shapes."""
from __future__ import annotations

import functools

import torch

import dynashape as ds
from dynashape.tracing.tree import leaves


def _clone(x, float64=False):
    if isinstance(x, torch.Tensor):
        y = x.detach().clone()
        if float64 and y.is_floating_point():
            y = y.double()
        y.requires_grad_(x.requires_grad)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v, float64) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v, float64) for k, v in x.items()}
    return x


def _float64_grads(fn, args, seed):
    """The gradients of `fn`'s float outputs' sum at `args` computed in float64 (None per leaf that
    needs none): the exact answer both float32 results are measured against."""
    a = _clone(args, float64=True)
    torch.manual_seed(seed)
    outs = [o for o in leaves(fn(*a)) if isinstance(o, torch.Tensor) and o.requires_grad]
    sum(o.sum() for o in outs).backward()
    return [x.grad if isinstance(x, torch.Tensor) else None for x in leaves(a)]


def _no_less_accurate(got, want, exact, slack=1.0):
    """Ours may differ from eager's float32 gradient only as rounding does: its error against the float64
    gradient at most eager's (times `slack`) plus 1e-6 of the gradient's scale (issue 21's bar)."""
    ours, eager = (got.double() - exact).abs().max(), (want.double() - exact).abs().max()
    scale = max(1.0, float(exact.abs().max()))
    assert ours <= slack * eager + 1e-6 * scale, f"gradient error {ours:.3g} against float64, eager's {eager:.3g}"


def check_vs_eager(fn, cases, *, dynamic=True, compiles=None, allow_fallback=False, seed=0, grad=False,
                   **tol):
    """Run `fn` compiled and eager on each case (a tuple of args); outputs (and gradients of inputs
    that require grad, when `grad`) must match. Returns the CompiledFunction for further checks."""
    cf = ds.compile(fn, dynamic=dynamic)
    for args in cases:
        a1, a2 = _clone(args), _clone(args)
        torch.manual_seed(seed)
        want = fn(*a1)
        torch.manual_seed(seed)
        got = cf(*a2)
        torch.testing.assert_close(got, want, **tol)
        torch.testing.assert_close(a2, a1, **tol)  # in-place effects on the inputs match too
        if grad:
            outs = [o for o in leaves(want) if isinstance(o, torch.Tensor) and o.requires_grad]
            outs2 = [o for o in leaves(got) if isinstance(o, torch.Tensor) and o.requires_grad]
            assert len(outs) == len(outs2)
            if outs:
                sum(o.float().sum() for o in outs).backward()
                sum(o.float().sum() for o in outs2).backward()
                for k, (x1, x2) in enumerate(zip(leaves(a1), leaves(a2))):
                    if isinstance(x1, torch.Tensor) and x1.requires_grad:
                        try:
                            torch.testing.assert_close(x2.grad, x1.grad, **tol)
                        except AssertionError:  # summed in another order: the float64 gradient arbitrates
                            if x1.grad is None or x2.grad is None:
                                raise
                            _no_less_accurate(x2.grad, x1.grad, _float64_grads(fn, args, seed)[k])
    if not allow_fallback:
        assert cf.stats.fallbacks == [], cf.stats.fallbacks
    assert cf.stats.graph_breaks == [], cf.stats.graph_breaks
    if compiles is not None:
        assert cf.stats.compiles == compiles, (cf.stats.compiles, cf.stats.recompile_reasons)
    for e in cf.entries:
        if e.graph is not None and hasattr(e.graph, "lint"):  # a trace tree's paths are linted as they merge
            e.graph.lint()
    return cf



def with_shapes(fn):
    """`fn` also returning its tensors' shapes: the symbolic shape formulas are checked on every case."""
    @functools.wraps(fn)  # keeps fn's signature, so inputs keep their names (L['x'])
    def run(*args):
        out = fn(*args)
        return out, [tuple(t.shape) for t in tensors(out)]
    return run


def tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors(o)]
    return []


def no_equality_guards(cf):
    """Guards beyond the inputs' own checks (size ranges, tensor checks) that pin a size."""
    return [g for g in cf.entries[0].guards
            if "==" in g and not g.startswith("check_tensor") and not g.startswith("torch.")]


def torch_compile_graphs(fn, calls, dynamo_config=None, **options):
    """How many graphs torch.compile compiles for `fn` over `calls` (tuples of args), counted by a
    backend that runs each graph as it is: the peer's count a test compares ours with.
    `dynamo_config`: torch._dynamo.config settings for the run."""
    import torch._dynamo
    torch._dynamo.reset()
    count = [0]

    def counting(gm, example_inputs):
        count[0] += 1
        return gm.forward
    compiled = torch.compile(fn, backend=counting, **options)
    with torch._dynamo.config.patch(**(dynamo_config or {})):
        for args in calls:
            compiled(*args)
    torch._dynamo.reset()
    return count[0]
