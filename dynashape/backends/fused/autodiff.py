"""The backward of a fused region, as Python over torch calls, compiled like any function.

A region that autograd must record used to run its torch calls (eager's graph, eager's speed).
Where every member has a derivative rule here, it runs as one `torch.autograd.Function`
(`FusedRegion`; outputs' grad_fn: FusedRegionBackward): the forward is the region's fused
kernel, which saves only the region inputs the backward reads; the backward recomputes the
members the rules read and applies the rules in reverse order, all as torch
calls in generated Python (`backward_source`), which `ds.compile(dynamic=True)` traces once and
the fused backend turns into kernels (built in the background, shape-generic as the forward's):

    def fused_mul_3_backward(a0, a1, s0, g0):
        mul = torch.mul(a0, a1)          # the forward's statements, recomputed
        sin = mul.sin()
        g_sin = g0                       # then each member's rule, last member first
        g_mul = g_sin * mul.cos()
        ga0 = _sum_to(g_mul * a1, ...)   # an input broadcast in the forward: summed back
        ...

Recomputing pointwise members costs less than saving them (AOTAutograd's partitioner makes the
same choice for cheap ops), so a region's training step saves some of its inputs only: memory at
most eager's. A saved input changed in place before the backward raises autograd's own error
(save_for_backward checks versions). The backward is built from differentiable torch calls,
so double backward (`create_graph=True`) differentiates it like any other code.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import torch

from ...ir.codegen import _call, _Emitter
from ...ir.graph import Graph, Node, _nodes_in
from . import ops

_SQRT1_2 = 0.7071067811865476
_GELU_K = 0.3989422804014327  # 1 / sqrt(2 pi)
_ERF_K = 1.1283791670955126  # 2 / sqrt(pi)


class NoRule(Exception):
    """A member without a derivative rule here: the region keeps its torch calls under autograd."""


def _x(n, i, name=None, default=None):
    return ops.arg(n, i, name or f"_{i}", default)


# rules: (node, emitter-args, g, o) -> {argument position: expression of its gradient}
def _unary(expr):
    return lambda n, a, g, o: {0: expr.format(g=g, o=o, a=a[0])}


UNARY = {
    "neg": "-{g}", "exp": "{g} * {o}", "log": "{g} / {a}", "sqrt": "{g} / (2 * {o})",
    "rsqrt": "-0.5 * {g} * {o} * {o} * {o}", "sin": "{g} * {a}.cos()", "cos": "-{g} * {a}.sin()",
    "tanh": "{g} * (1 - {o} * {o})", "sigmoid": "{g} * {o} * (1 - {o})",
    "relu": "torch.where({o} <= 0, 0.0, {g})", "square": "2 * {a} * {g}", "reciprocal": "-{g} * {o} * {o}",
    "erf": f"{{g}} * {_ERF_K} * torch.exp(-{{a}} * {{a}})",
    "silu": "{g} * torch.sigmoid({a}) * (1 + {a} * (1 - torch.sigmoid({a})))",
    "log1p": "{g} / (1 + {a})", "expm1": "{g} * ({o} + 1)",
    "abs": "torch.where({a} > 0, {g}, torch.where({a} < 0, -{g}, {g} * 0))",  # eager: g * sgn(a), sgn(NaN) = 0
}


def _gelu(n, a, g, o):
    if _x(n, 1, "approximate", "none") != "none":
        raise NoRule("gelu(approximate='tanh')")
    x = a[0]
    return {0: f"{g} * (0.5 * (1 + torch.erf({x} * {_SQRT1_2})) + {x} * torch.exp(-0.5 * {x} * {x}) * {_GELU_K})"}


def _binary(da, db):
    def rule(n, a, g, o):
        if "alpha" in n.kwargs or len(n.args) > 2:
            raise NoRule("alpha")
        return {0: da.format(g=g, o=o, a=a[0], b=a[1]), 1: db.format(g=g, o=o, a=a[0], b=a[1])}
    return rule


BINARY = {
    "add": _binary("{g}", "{g}"), "sub": _binary("{g}", "-{g}"), "rsub": _binary("-{g}", "{g}"),
    "mul": _binary("{g} * {b}", "{g} * {a}"), "div": _binary("{g} / {b}", "-{g} * {o} / {b}"),
    "rdiv": _binary("-{g} * {o} / {a}", "{g} / {a}"),
}


def _pow(n, a, g, o):
    e = n.args[1] if len(n.args) > 1 else None
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        raise NoRule("pow with a tensor or symbolic exponent")
    if e == 0:  # eager: zeros, even where x ** -1 is inf
        return {0: f"torch.zeros_like({a[0]})"}
    return {0: f"{g} * {e!r} * {a[0]}.pow({e - 1!r})"}


def _where(n, a, g, o):
    return {1: f"torch.where({a[0]}, {g}, 0.0)", 2: f"torch.where({a[0]}, 0.0, {g})"}


def _clamp(n, a, g, o):
    lo, hi = _x(n, 1, "min"), _x(n, 2, "max")
    name = ops.op_name(n.target)
    if name == "clamp_min":
        lo, hi = _x(n, 1, "min"), None
    elif name == "clamp_max":
        lo, hi = None, _x(n, 1, "max")
    if any(isinstance(v, Node) for v in (lo, hi)):
        raise NoRule("clamp with tensor bounds")
    conds = ([f"({a[0]} >= {lo!r})"] if lo is not None else []) + ([f"({a[0]} <= {hi!r})"] if hi is not None else [])
    if not conds:
        return {0: g}
    return {0: f"torch.where({' & '.join(conds)}, {g}, 0.0)"}


def _identity(n, a, g, o):
    if ops.op_name(n.target) == "detach":
        return {}
    return {0: g}


def _cast(n, a, g, o):
    return {0: f"{g}.to({a[0]}.dtype)"}


def _reduce(n, a, g, o):
    name = ops.op_name(n.target)
    rd = ops.reduce_dims(n)
    if rd is None or name not in ("sum", "mean", "var", "std", "softmax", "log_softmax"):
        raise NoRule(name)
    x, dims, keep = rd
    if name == "softmax":
        d = dims[0]
        return {0: f"{o} * ({g} - ({g} * {o}).sum({d}, keepdim=True))"}
    if name == "log_softmax":
        d = dims[0]
        return {0: f"{g} - torch.exp({o}) * {g}.sum({d}, keepdim=True)"}
    gk = g if keep else f"{g}" + "".join(f".unsqueeze({d})" for d in dims)
    count = " * ".join(f"{a[0]}.size({d})" for d in dims) or "1"
    if name == "sum":
        return {0: f"{gk}.expand_as({a[0]})"}
    if name == "mean":
        return {0: f"({gk} / ({count})).expand_as({a[0]})"}
    correction = _correction(n)
    mean = f"{a[0]}.mean({dims!r}, keepdim=True)"
    if name == "var":
        return {0: f"{gk} * 2 * ({a[0]} - {mean}) / ({count} - {correction})"}
    ok = o if keep else f"{o}" + "".join(f".unsqueeze({d})" for d in dims)
    # eager: g / (2 std), 0 where std is 0 (a constant row), then var's rule
    return {0: f"torch.where({ok} == 0, 0.0, {gk} / {ok}) * ({a[0]} - {mean}) / ({count} - {correction})"}


def _correction(n):
    if "correction" in n.kwargs:
        c = n.kwargs["correction"]
    elif "unbiased" in n.kwargs:
        c = 1 if n.kwargs["unbiased"] else 0
    elif len(n.args) > 2 and isinstance(n.args[2], bool):
        c = 1 if n.args[2] else 0
    else:
        c = 1
    if not isinstance(c, (int, float)):
        raise NoRule("var/std with a symbolic correction")
    return c


RULES = {**{k: _unary(v) for k, v in UNARY.items()}, **BINARY, "gelu": _gelu, "pow": _pow, "where": _where,
         "clamp": _clamp, "clamp_min": _clamp, "clamp_max": _clamp, "contiguous": _identity, "clone": _identity,
         "dropout": _identity, "detach": _identity, **{k: _reduce for k in ("sum", "mean", "var", "std",
                                                                           "softmax", "log_softmax")}}


def _reduce_to(g: str, shape_to, shape_from) -> str:
    """`g` (of the region member's shape) summed over the dims a broadcast added to an input."""
    shape_to, shape_from = list(shape_to), list(shape_from)
    lead = len(shape_from) - len(shape_to)
    dims = list(range(lead))
    for i, s in enumerate(shape_to):
        if isinstance(s, int) and s == 1 and not (isinstance(shape_from[lead + i], int) and shape_from[lead + i] == 1):
            dims.append(lead + i)
    if not dims:
        return g
    out = f"{g}.sum({tuple(dims)!r}, keepdim=True)"
    if lead:
        out = f"{out}.reshape({_shape_expr(shape_to)})"
    return out


def _shape_expr(shape) -> str:
    from ...symbolic.printer import pyexpr
    parts = [str(s) if isinstance(s, int) else pyexpr(s) for s in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def backward_source(region, name: str, symbols) -> "Backward":
    """The source of `name`_backward(inputs..., symbols..., grads of the outputs...) with what it
    needs (see Backward). Raises NoRule when a member has none."""
    for n in region.nodes:
        if ops.family(n) not in ("pointwise", "identity", "reduce", "composite"):
            raise NoRule(f"{ops.op_name(n.target)} ({ops.family(n)})")
        op = ops.op_name(n.target)
        if not n.meta.dtype.is_floating_point:
            continue  # a comparison, an int cast: no gradient flows through it
        if op not in RULES and not (op in ops.CASTS and ops.family(n) == "pointwise"):
            raise NoRule(op)
    em = _Emitter(Graph())
    ins = [f"_in{i}" for i in range(len(region.inputs))]
    gs = [f"_g{j}" for j in range(len(region.outputs))]
    grad: dict = {}  # node -> the name of its accumulated gradient
    for o, g in zip(region.outputs, gs):
        if o.meta.dtype.is_floating_point:
            grad[o] = g
    body, reads = [], set()  # the gradient statements; the forward values they read
    for n in reversed(region.nodes):
        g = grad.get(n)
        if g is None or not n.meta.dtype.is_floating_point:
            continue
        op = ops.op_name(n.target)
        rule = _cast if op in ops.CASTS else RULES[op]
        args = [em.arg(a) for a in n.args]
        for pos, expr in rule(n, args, g, n.name).items():
            src = n.args[pos] if pos < len(n.args) else None
            if not (isinstance(src, Node) and ops.is_tensor(src) and src.meta.dtype.is_floating_point):
                continue
            if ops.family(n) != "reduce":  # a reduction's rule gives its input's shape already
                expr = _reduce_to(f"({expr})", src.meta.shape, n.meta.shape)
            reads |= set(_NAME.findall(expr))
            gname = f"g_{src.name}"
            body.append(f"    {gname} = {grad[src]} + {expr}" if src in grad else f"    {gname} = {expr}")
            grad[src] = gname
    # the forward statements the rules read, recomputed (pointwise values cost less to recompute
    # than to save); the inputs they need are all the forward must save
    need = {n for n in region.nodes if n.name in reads}
    for n in reversed(region.nodes):
        if n in need:
            need |= {a for a in _nodes_in((n.args, n.kwargs))}
    saved = [i for i, t in enumerate(region.inputs) if t in need or t.name in reads]
    lines = [f"def {name}_backward({', '.join(ins + [s.name for s in symbols] + gs)}):"]
    lines += [f"    {region.inputs[i].name} = {ins[i]}" for i in saved]
    lines += ["    " + _call(em, n) for n in region.nodes if n in need]
    lines += body
    wants = [i for i, t in enumerate(region.inputs) if t.meta.dtype.is_floating_point]
    rets = [grad.get(region.inputs[i], "None") for i in wants]
    lines.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    return Backward("\n".join(lines) + "\n", em.ns, wants, saved)


_NAME = re.compile(r"(?<![.\w])[A-Za-z_]\w*")  # names, not attributes (torch.exp)


class Backward(NamedTuple):
    source: str
    namespace: dict
    wants: list  # the inputs it returns gradients for (positions)
    saved: list  # the inputs it reads (positions): what the forward saves


class FusedRegion(torch.autograd.Function):
    """One region under autograd: its kernel forward, its generated backward (see the module doc)."""

    @staticmethod
    def forward(ctx, rt, n_in, *args):
        ctx.rt, ctx.n_in = rt, n_in
        saved = rt.backward.saved
        ctx.save_for_backward(*[args[i] for i in saved])
        ctx.syms = args[n_in:]
        out = rt.kernel_call(*args)
        outs = out if isinstance(out, tuple) else (out,)
        # what eager's would not require grad (an int result, a float made from comparisons only)
        ctx.mark_non_differentiable(*[t for t, o in zip(outs, rt.region.outputs)
                                      if not (t.dtype.is_floating_point and o.meta.requires_grad)])
        ctx.needs = [ctx.needs_input_grad[2 + i] for i in range(n_in)]
        return out

    @staticmethod
    def backward(ctx, *grads):
        rt = ctx.rt
        ins = [None] * ctx.n_in
        for i, t in zip(rt.backward.saved, ctx.saved_tensors):
            ins[i] = t
        got = rt.backward_fn(*ins, *ctx.syms, *grads)
        out = [None] * ctx.n_in
        for i, g in zip(rt.backward.wants, got):
            if ctx.needs[i]:
                out[i] = g
        return (None, None, *out, *[None] * len(ctx.syms))
