"""The differential oracle: compiled vs eager over many shapes."""
from __future__ import annotations

import functools

import torch

import dynashape as ds
from dynashape.tracing.tree import leaves


def _clone(x):
    if isinstance(x, torch.Tensor):
        y = x.detach().clone()
        y.requires_grad_(x.requires_grad)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


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
                for x1, x2 in zip(leaves(a1), leaves(a2)):
                    if isinstance(x1, torch.Tensor) and x1.requires_grad:
                        torch.testing.assert_close(x2.grad, x1.grad, **tol)
    if not allow_fallback:
        assert cf.stats.fallbacks == [], cf.stats.fallbacks
    assert cf.stats.graph_breaks == [], cf.stats.graph_breaks
    if compiles is not None:
        assert cf.stats.compiles == compiles, (cf.stats.compiles, cf.stats.recompile_reasons)
    for e in cf.entries:
        if e.graph is not None:
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
