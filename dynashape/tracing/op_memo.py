"""Within one trace, a call met again with the same symbolic arguments is recorded without
running its meta kernel and shape rule a second time.

The eight Linear layers of an MLP, or the blocks of a transformer, call the same ops on tensors
of the same symbolic shapes. What a call's result is (its symbolic sizes, strides, dtype) depends
only on what the key below describes: the op, the grad and inference modes, and for each
argument its symbolic sizes, layout, dtype, device and the trace's facts about it (whether it
may alias an input, whether it is a view), plain values exactly, symbolic values by expression,
which arguments are one tensor, and the default dtype. Whatever the first call asked of the
shape engine was guarded then, and holds for the same expressions now (and while the engine
learns nothing new, a rule would write the result's sizes as it did then); a call that did anything
else to the trace (a specialization, a runtime assert, a new symbol, a fallback, an in-place
write, a graph node besides its own) is never memoized. Results that carry autograd history, views and
returned inputs are not either: their meta tensors must come from the op itself.

The memo lives on the tracer, so it never outlives one trace (symbols are per trace).
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch
import math

import torch

from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import user_location
from .fake import FakeTensor, make_fake
from .tree import leaves

_T = torch.Tensor
_PLAIN = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout,
                    type(Ellipsis)})
_FLAGS = ("ds_view", "ds_view_or_copy", "ds_odd_layout", "ds_may_alias")
_OWN = frozenset(("ds_sizes", "ds_node", "ds_device") + _FLAGS)  # a fake's attributes we know


class _No(Exception):
    """An argument the key cannot describe exactly: the call is not memoized."""


def key(func, args, kwargs):
    """The memo key of a call whose tensors are all fakes already, or None."""
    if torch._C._is_any_autocast_enabled():  # autocast changes dtypes per call: not described here
        return None
    grad = torch.is_grad_enabled()
    ids: dict = {}

    def k(x):
        t = type(x)
        if t is FakeTensor:
            d = x.__dict__
            rg = x.requires_grad
            if (grad and rg) or not _OWN.issuperset(d):  # autograd history the result would record, or
                raise _No  # inherit (ds_same_as, ds_grad_fn): the op must run
            return (ids.setdefault(id(x), len(ids)),
                    tuple([s.node.expr if isinstance(s, SymBase) else s for s in d["ds_sizes"]]),
                    _T.stride(x), _T.storage_offset(x), x.dtype, rg, d["ds_device"], _T._is_view(x),
                    d.get("ds_view"), d.get("ds_view_or_copy"), d.get("ds_odd_layout"), d.get("ds_may_alias", True))
        if t in _PLAIN:
            return (t, x)
        if t is float:  # -0.0 and 0.0 are equal, but not the same argument
            return (t, x.hex()) if math.isfinite(x) else (t, repr(x))
        if t is tuple or t is list or t is torch.Size:
            return (t, tuple([k(v) for v in x]))
        if isinstance(x, SymBase):
            return (t, x.node.expr)
        if t is slice:
            return (t, k(x.start), k(x.stop), k(x.step))
        raise _No

    try:
        # (the default dtype cannot change inside a trace, set_default_dtype is a graph break: kept anyway)
        return (func, grad, torch._C.is_inference_mode_enabled(), torch.get_default_dtype(),
                tuple([k(a) for a in args]), tuple([(n, k(v)) for n, v in kwargs.items()]) if kwargs else ())
    except _No:
        return None


def fingerprint(tracer) -> tuple:
    """What a memoized call must leave unchanged in the trace besides appending its own node."""
    env = tracer.env
    return (len(tracer.graph.nodes), len(tracer.fallbacks), len(tracer.visible_effects), len(tracer.data_guards),
            tracer.mutates, tracer.strides_observed, tracer.offsets_observed, len(tracer.input_facts),
            len(tracer.flag_reads), len(tracer.aliases), len(tracer.value_inputs), len(tracer.derived_sizes),
            len(tracer.tensor_inputs), len(env.var_to_val), len(env._unbacked), len(env.runtime_asserts),
            len(env.replacements))


_REFUSALS = 2  # an op whose results were refused this often (views: `view`, `transpose`, 3-D `linear`)


def lookup(tracer, func, args, kwargs):
    """(key, the recipe met before or None, the trace's fingerprint) of a call, or None when the
    call is not memoized."""
    try:
        kind = (func, type(args[0]) is FakeTensor and len(args[0].ds_sizes)) if args else (func, None)
        if tracer._op_refused.get(kind, 0) >= _REFUSALS:  # no key to work out for ops that never qualify
            return None
    except TypeError:  # an unhashable callable
        return None
    k = key(func, args, kwargs)
    if k is None:
        return None
    try:
        rec = tracer._op_memo.get(k)
    except TypeError:  # an unhashable value inside
        return None
    if rec is not None and rec[-1] != tracer.env.generation:
        rec = None  # the engine learned something since: its rule may now simplify the sizes further
    return k, rec, (fingerprint(tracer) if rec is None else None), kind


def remember(tracer, memo, func, args, kwargs, out) -> None:
    """Keep the recipe of a call just recorded through the op's meta kernel and rule, if it qualifies."""
    rec = recipe(memo[2], tracer, func, args, kwargs, out)
    refused = tracer._op_refused
    if rec is not None:
        tracer._op_memo[memo[0]] = rec
        refused[memo[3]] = -(1 << 30)  # it qualifies with some arguments: always asked
    else:
        refused[memo[3]] = refused.get(memo[3], 0) + 1


def recipe(before: tuple, tracer, func, args, kwargs, out):
    """How to record the call again, when the call that produced `out` qualifies; else None."""
    if type(out) is not FakeTensor or out.requires_grad or _T._is_view(out):
        return None
    after = fingerprint(tracer)
    if after[0] != before[0] + 1 or after[1:] != before[1:]:
        return None
    node = tracer.graph.nodes[-1]
    if node is not out.ds_node or node.target is not func:
        return None
    d = out.__dict__
    if not _OWN.issuperset(d) or any(out is a for a in args) or any(out is v for v in kwargs.values()):
        return None
    meta = node.meta
    return (type(meta), meta.shape, meta.dtype, meta.requires_grad, tuple(_T.size(out)), _T.stride(out),
            out.dtype, _sizes_recipe(d["ds_sizes"], args, kwargs), d["ds_device"],
            tuple((f, d[f]) for f in _FLAGS if f in d), tracer.env.generation)


def _fakes(args, kwargs) -> list:
    return [x for x in leaves((args, kwargs)) if type(x) is FakeTensor]


def _sizes_recipe(sizes, args, kwargs) -> tuple:
    """The result's sizes as a rule gives them: an argument's own size object where it passed one
    through (by position among the arguments' fakes), else the value (a new object at each replay)."""
    where = {id(s): (i, j) for i, f in enumerate(_fakes(args, kwargs)) for j, s in enumerate(f.ds_sizes)
             if isinstance(s, SymBase)}
    return tuple(s if not isinstance(s, SymBase) else where.get(id(s)) or s for s in sizes)


def _sizes(recipe, args, kwargs) -> tuple:
    fakes = None
    out = []
    for s in recipe:
        if type(s) is tuple:
            if fakes is None:
                fakes = _fakes(args, kwargs)
            s = fakes[s[0]].ds_sizes[s[1]]
        elif isinstance(s, SymBase):
            s = type(s)(s.node)
        out.append(s)
    return tuple(out)


replayed = [0]  # calls recorded from a recipe, in this process (the fuzzer reports it)


def replay(tracer, func, args, kwargs, rec, name_hint: str):
    """The call recorded from its recipe: a node of its own, and a fake made from the first result's
    metadata."""
    replayed[0] += 1
    meta_type, shape, dtype, requires_grad, size, stride, out_dtype, sizes, device, flags, _ = rec
    node = tracer.graph.call(func, tracer.to_ir(args, True), tracer.to_ir(kwargs, True),
                             meta_type(shape, dtype, requires_grad), user_location(), torch.is_grad_enabled(),
                             name_hint=name_hint)
    fake = make_fake(torch.empty_strided(size, stride, dtype=out_dtype, device="meta"), _sizes(sizes, args, kwargs),
                     node, device, tracer)
    for f, v in flags:
        setattr(fake, f, v)
    return fake
