"""Custom operators (`torch.library.custom_op`, `torch.library.register_fake`).

An operator outside ATen is opaque to the trace: its *fake* implementation,
the one the user registered for tracing, says what it returns. It runs on the
call's FakeTensors with the TracingMode active, so its shape arithmetic is
symbolic (`x.new_empty(x.shape[0] * 2)` gives `2*s0`); the torch calls it
makes go to a scratch graph that is then dropped. A size from
`torch.library.get_ctx().new_dynamic_size()` is an unbacked symbol, bound at
run time from the real output's size, as `nonzero`'s is:

    @torch.library.custom_op("my::filter", mutates_args=())
    def filter(x: torch.Tensor) -> torch.Tensor: ...
    @filter.register_fake
    def _(x):
        return x.new_empty(torch.library.get_ctx().new_dynamic_size())   # f32[u0]

The real op's outputs are checked against the fake's shapes and dtypes when
the compiled code runs: a fake that does not describe its op raises instead of
letting later code rely on a wrong size. An operator with no fake (and no meta
kernel that works) is a graph break that says to register one. The fakes are
found in `torch._library`'s registry of Python kernels (custom operators'
own machinery, not the compiler's): torch has no public getter for them.
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch (our own frames get its answer anyway)
import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..symbolic.errors import DynashapeError
from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .fake import FakeTensor
from .global_state import function_apply_as_is
from .tree import leaves, map_leaves, wrap_tensors

_ATEN_LIKE = ("aten", "prim", "prims", "_c10d_functional", "c10d", "profiler")


def custom_overload(func):
    """The OpOverload of a call to a non-ATen operator (a packet with one overload resolves to
    it); None for every other callable."""
    if isinstance(func, torch._ops.OpOverloadPacket):
        names = func.overloads()
        if func._qualified_op_name.split("::")[0] in _ATEN_LIKE or len(names) != 1:
            return None
        func = getattr(func, names[0])
    if isinstance(func, torch._ops.OpOverload) and func.namespace not in _ATEN_LIKE:
        return func
    return None


def python_fake(op):
    """The fake implementation the user registered for `op` with torch.library (None if none: a
    `custom_op` without `register_fake` has torch's stand-in, which raises or, for an op that only
    changes its arguments, returns nothing)."""
    from torch._library import custom_ops as library_ops, simple_registry
    opdef = library_ops.OPDEFS.get(op.name().split(".")[0])
    if opdef is not None and getattr(opdef, "_abstract_fn", 1) is None:
        return None
    return simple_registry.singleton.find(op.name()).fake_impl.kernel


def call(tr, mode, func, args, kwargs):
    """Trace one call of a custom operator."""
    op = custom_overload(func)
    fake = python_fake(op)
    if fake is None:
        return _without_python_fake(tr, op, args, kwargs)
    args, kwargs = _lifted(tr, (args, kwargs))
    ctx = _Ctx(tr, op)
    try:
        with _scratch(tr), _ctx_getter(ctx), mode:
            got = fake(*args, **kwargs)
    except DynashapeError:
        raise
    except Exception as e:  # noqa: BLE001  (the user's fake)
        raise GraphBreak(
            f"the fake implementation of {_name(op)} raised {type(e).__name__}: {_first_line(e)}", user_location(),
            "What to do: make the fake work on the arguments eager accepts (torch.library.opcheck tests "
            "it).") from None
    outs = [t for t in leaves(got) if isinstance(t, torch.Tensor)]
    if any(not isinstance(v, torch.Tensor) and v is not None for v in leaves(got)) or \
            any(not isinstance(t, FakeTensor) for t in outs):
        raise GraphBreak(f"the fake of {_name(op)} returns something other than tensors", user_location(),
                         "What to do: call the operator outside the compiled function.")
    shapes = [tuple(t.ds_sizes) for t in outs]
    metas = [torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta") for t in outs]
    meta_args, meta_kwargs, device = tr._meta_args(op, args, kwargs)
    res = _with_autograd(op, meta_args, meta_kwargs, got, metas)  # eager's requires_grad and grad_fn
    tr.note_inplace(op, args, kwargs)
    result = tr._record(op, args, kwargs, res, shapes, device)
    _bind_and_check(tr, op, ctx, [t for t in leaves(result) if isinstance(t, FakeTensor)], shapes)
    return result


def _without_python_fake(tr, op, args, kwargs):
    """A C++ or `Library.impl(..., "Meta")` kernel may give the shapes (specialized, by the fallback),
    or torch's stand-in fake of an op that only changes its arguments; with none, the op cannot be
    traced."""
    rule = None if op._schema.returns else _no_outputs  # an op that returns nothing sizes nothing
    try:
        return tr.call_op(op, rule, args, kwargs)
    except (RuntimeError, NotImplementedError, GraphBreak):
        raise _no_fake(op) from None


def _no_outputs(*args, **kwargs):
    return []


def _no_fake(op) -> GraphBreak:
    return GraphBreak(
        f"{_name(op)} has no fake implementation, so the shape of its output is unknown while tracing; "
        f'register a fake with torch.library.register_fake("{op.name()}")', user_location(),
        "What to do: register a fake, a function of the same arguments that returns empty tensors of the "
        "output's shape and dtype (torch.library.get_ctx().new_dynamic_size() for a size that depends on data).")


def _first_line(e) -> str:
    return (str(e).strip().splitlines() or [""])[0][:160]


class _Ctx:
    """What `torch.library.get_ctx()` returns inside a fake while tracing: fresh sizes are
    unbacked symbols of this trace."""

    def __init__(self, tr, op):
        self.tr, self.op, self.created = tr, op, []

    def new_dynamic_size(self, *, min=0, max=None):
        if isinstance(min, SymBase) or isinstance(max, SymBase):
            raise ValueError(f"ctx.new_dynamic_size(min={min}, max={max}): expected min and max to be ints")
        if min < 0:
            raise ValueError(f"ctx.new_dynamic_size(min={min}, ...): expected min to be >= 0: this API "
                             "can only create non-negative sizes")
        if max is not None and max < min:
            raise ValueError(f"ctx.new_dynamic_size(min={min}, max={max}): expected min <= max")
        u = self.tr.new_unbacked(size_like=True, lo=min, hi=max, description=f"a size {_name(self.op)} returns")
        self.created.append(u)
        return u

    def create_unbacked_symint(self, *, min=2, max=None):
        return self.new_dynamic_size(min=min, max=max)


@contextlib.contextmanager
def _ctx_getter(ctx):
    from torch._library import fake_impl
    with fake_impl.set_ctx_getter(lambda: ctx):
        yield


@contextlib.contextmanager
def _scratch(tr):
    """The fake's torch calls go to a graph of their own, dropped afterwards: only the shapes of
    what it returns are kept (and what the engine learned about symbols)."""
    graph, fakes, bound, n_inputs = tr.graph, dict(tr._fakes), set(tr._bound), len(tr.tensor_inputs)
    flags = (tr.mutates, tr.mutates_input, list(tr.visible_effects), getattr(tr, "_emitted_asserts", 0))
    real, tr.real = tr.real, None  # a fake must not read data: no speculation inside it
    scratch = graph.empty_like()
    scratch.modes_now = graph.modes_now
    tr.graph = scratch
    try:
        yield
    finally:
        tr.graph, tr._fakes, tr._bound, tr.real = graph, fakes, bound, real
        tr.mutates, tr.mutates_input, tr.visible_effects, tr._emitted_asserts = flags
        for n in scratch.nodes:  # main-graph values the dropped nodes used lose those users
            graph.map_args((n.args, n.kwargs), lambda v: _drop_user(v, n))
    if len(tr.tensor_inputs) != n_inputs:
        raise GraphBreak("a fake implementation read a module's tensors or another input", user_location(),
                         "What to do: compute the fake's output from its arguments only.")


def _drop_user(v, user):
    if isinstance(v, user.__class__) and user in v.users:
        v.users.remove(user)
    return v


def _lifted(tr, obj):
    return map_leaves(obj, tr._lift_leaf)  # real tensors (a global) become graph values first


class _Answer(TorchDispatchMode):
    """Below autograd, the op returns the given meta tensors: autograd wraps them as eager's
    results (requires_grad, grad_fn) without running the op's kernel."""

    def __init__(self, op, outs):
        super().__init__()
        self.op, self.outs = op, outs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is self.op:
            return self.outs
        return func(*args, **(kwargs or {}))


def _with_autograd(op, meta_args, meta_kwargs, got, metas):
    it = iter(metas)
    outs = wrap_tensors(got, lambda t, path: next(it), ())
    with _Answer(op, outs), function_apply_as_is():
        return op(*meta_args, **meta_kwargs)


def _bind_and_check(tr, op, ctx, results, shapes) -> None:
    """Sizes the fake made up are read from the real outputs; every other size, and the dtype,
    is checked against them when the compiled code runs."""
    bound = set()
    for t, shape in zip(results, shapes):
        for d, s in enumerate(shape):
            if isinstance(s, SymBase) and any(s.node.expr == u.node.expr for u in ctx.created) \
                    and s.node.expr not in bound:
                bound.add(s.node.expr)
                tr.bind_unbacked(s, t.ds_node, "size", d)
    missing = [u for u in ctx.created if u.node.expr not in bound]
    unbound = {f for shape in shapes for s in shape if isinstance(s, SymBase) for f in s.node.expr.free_symbols} \
        - tr._bound
    if unbound:  # e.g. a size from nonzero() inside the fake: nothing computes it at run time
        raise GraphBreak(f"the fake of {_name(op)} returns a size ({', '.join(sorted(map(str, unbound)))}) that is "
                         "neither from its arguments nor from new_dynamic_size()", user_location(),
                         "What to do: make such a size with torch.library.get_ctx().new_dynamic_size().")
    if missing:
        raise GraphBreak(f"the fake of {_name(op)} made a size with new_dynamic_size() that is not itself a "
                         "size of an output", user_location(),
                         "What to do: use each new_dynamic_size() as one dim of an output, as it is.")
    loc = user_location()
    where = loc.short() if loc is not None else "?"
    for i, (t, shape) in enumerate(zip(results, shapes)):
        what = op.name() + (f" output {i}" if len(results) > 1 else "")
        tr.graph.call(check_output, (t.ds_node, tuple(tr.to_ir(s) for s in shape), t.dtype, what, where), {}, None,
                      loc, torch.is_grad_enabled(), name_hint="check")


def check_output(t, shape, dtype, what, where):
    """A custom op's output is what its fake said (the compiled code relies on it), checked when the
    compiled code runs."""
    if t.shape != shape or t.dtype != dtype:
        name = what.split(" ")[0]
        raise RuntimeError(f"{what} returned a tensor of shape {tuple(t.shape)} and dtype {t.dtype} at {where}, but "
                           f"its fake said {tuple(shape)} and {dtype}, which the compiled code relies on. Fix the "
                           f'fake (torch.library.register_fake("{name}")); torch.library.opcheck tests one.')


check_output._codegen_name = "ds_check_op"


def _name(op) -> str:
    return f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}"


__all__ = ["call", "check_output", "custom_overload", "python_fake"]
