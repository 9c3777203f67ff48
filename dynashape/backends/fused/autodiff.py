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

import contextlib

import math
import re
from typing import NamedTuple

import sympy
import torch

from ...ir.codegen import _call, _Emitter
from ...ir.graph import Graph, Node, SymExpr, _nodes_in
from . import ops

_SQRT1_2 = 0.7071067811865476
_GELU_K = 0.3989422804014327  # 1 / sqrt(2 pi)
_ERF_K = 1.1283791670955126  # 2 / sqrt(pi)
_SQRT2_PI = 0.7978845608028654  # sqrt(2 / pi)


class NoRule(Exception):
    """A member without a derivative rule here: the region keeps its torch calls under autograd."""


def _x(n, i, name=None, default=None):
    return ops.arg(n, i, name or f"_{i}", default)


# rules: (node, emitter-args, g, o) -> {argument position: expression of its gradient}
def _unary(expr):
    return lambda n, a, g, o: {0: expr.format(g=g, o=o, a=a[0])}


UNARY = {
    "neg": "-{g}", "exp": "{g} * {o}", "log": "{g} / {a}", "sqrt": "{g} / (2 * {o})",
    "rsqrt": "-0.5 * {g} * {o}.pow(3)", "sin": "{g} * {a}.cos()", "cos": "-{g} * {a}.sin()",
    "tanh": "{g} * (1 - {o} * {o})", "sigmoid": "{g} * (1 - {o}) * {o}",
    "relu": "torch.where({o} <= 0, {o} * 0, {g})",  # o * 0: eager's reads the result (create_graph)
    "square": "2 * {a} * {g}", "reciprocal": "-{g} * ({o} * {o})",
    "erf": f"{_ERF_K} * torch.exp(-{{a}}.pow(2)) * {{g}}",
    "silu": "{g} * torch.sigmoid({a}) * (1 + {a} * (1 - torch.sigmoid({a})))",
    "log1p": "{g} / (1 + {a})", "expm1": "{g} * ({o} + 1)",
    "abs": "{g} * {a}.sgn()",
}


def _gelu(n, a, g, o):
    x = a[0]
    if _x(n, 1, "approximate", "none") == "tanh":  # y = x/2 (1 + tanh(k (x + c x^3)))
        t = f"torch.tanh({_SQRT2_PI} * ({x} + 0.044715 * {x} * {x} * {x}))"
        return {0: f"{g} * (0.5 * (1 + {t}) + 0.5 * {x} * (1 - {t} * {t}) * {_SQRT2_PI} "
                   f"* (1 + 3 * 0.044715 * {x} * {x}))"}
    return {0: f"{g} * (0.5 * (1 + torch.erf({x} * {_SQRT1_2})) + {x} * torch.exp(-0.5 * {x} * {x}) * {_GELU_K})"}


def _eps(v, a):
    """eps as the backward writes it: a finite constant, or a float argument that is a symbol (a module's
    eps under dynamic=True; its guard keeps it finite), by its expression over the backward's symbols."""
    if isinstance(v, SymExpr) and v.pytype is float:
        return a.name(v)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise NoRule("a norm whose eps is not a finite constant")
    return repr(float(v))


def _norm(n, a, g, o):
    """layer_norm / rms_norm over the trailing dims D: with h = the normalized x (before weight
    and bias), r = 1/sqrt(var + eps) (rms: mean of squares) and gh = g * weight,
    dx = r (gh - mean_D(gh) - h mean_D(gh h)) for layer_norm, r (gh - h mean_D(gh h)) for rms."""
    rd = ops.reduce_dims(n)
    if rd is None:
        raise NoRule(ops.op_name(n.target))
    x, dims, _ = rd
    X, D = a.name(x), repr(tuple(dims))
    layer = ops.op_name(n.target) == "layer_norm"
    w, b = ops.arg(n, 2, "weight"), (ops.arg(n, 3, "bias") if layer else None)
    if layer:
        eps = _eps(ops.arg(n, 4, "eps", 1e-5), a)
        pre = [f"{o}_c = {X} - {X}.mean({D}, keepdim=True)",
               f"{o}_r = torch.rsqrt(({o}_c * {o}_c).mean({D}, keepdim=True) + {eps})"]
        h = f"{o}_c * {o}_r"
    else:
        e = ops.arg(n, 3, "eps")
        eps = _eps(ops.rms_norm_eps(x.meta.dtype) if e is None else e, a)
        pre = [f"{o}_r = torch.rsqrt(({X} * {X}).mean({D}, keepdim=True) + {eps})"]
        h = f"{X} * {o}_r"
    pre.append(f"{o}_h = {h}")
    pre.append(f"{o}_gh = {g} * {a.name(w)}" if isinstance(w, Node) else f"{o}_gh = {g}")
    centre = f" - {o}_gh.mean({D}, keepdim=True)" if layer else ""
    out = {"_pre": pre,
           (0, "input"): f"{o}_r * ({o}_gh{centre} - {o}_h * ({o}_gh * {o}_h).mean({D}, keepdim=True))"}
    if isinstance(w, Node):
        out[(2, "weight")] = f"{g} * {o}_h"
    if isinstance(b, Node):
        out[(3, "bias")] = g
    return out


def _xent(n, a, g, o):
    """cross_entropy(x, t) over class indices: dx = (softmax(x) - onehot(t)) * the row's share of
    g (g, g / the number of counted rows, or g[i]), 0 on rows whose target is ignore_index."""
    x, t = n.args[0], ops.arg(n, 1, "target")
    X, T = a.name(x), a.name(t)
    ignore = ops.arg(n, 4, "ignore_index", -100)
    red = ops.arg(n, 6, "reduction", "mean")
    keep = f"({T} != {ignore!r})"
    half = isinstance(a, _F32Args)  # eager: nll_loss's backward in the half type, then log_softmax's in float32
    gh = a.made.get(g, g) if half else g
    share = {"none": f"{gh}", "sum": f"{gh}",
             "mean": f"{gh} / {keep}.sum()"}[red]
    pre = [f"{o}_w = torch.where({keep}, {share}, 0.0).unsqueeze(1)" + (".float()" if half else ""),
           f"{o}_hot = torch.arange({X}.size(1), device={X}.device) == {T}.unsqueeze(1)"]
    # softmax from the per-row logsumexp the forward kernel wrote (one pass over the logits, not
    # three; in float64, the difference too, then the exp in the logits' dtype), when it did: not for a loss inside the region, nor under create_graph (the saved
    # value does not carry its dependence on the logits)
    p = f"{X}.softmax(1)" if a.lse is None else \
        f"({X}.softmax(1) if {a.lse} is None else torch.exp(({X} - {a.lse}.unsqueeze(1)).to({X}.dtype)))"
    if half:  # the exp of eager's log_softmax result, which is rounded to the half type
        p = f"torch.exp({a.raw(x)}.log_softmax(1).float())"
    return {"_pre": pre, 0: f"({p} - {o}_hot.to({X}.dtype)) * {o}_w"}


def saves_lse(region, o) -> bool:
    """Whether the region's kernel also writes output `o`'s per-row logsumexp for its backward."""
    return ops.family(o) == "xent" and o in region.outputs and o.meta.dtype in (torch.float32, torch.float64)


def _binary(da, db):
    def rule(n, a, g, o):
        if "alpha" in n.kwargs or len(n.args) > 2:
            raise NoRule("alpha")
        return {0: da.format(g=g, o=o, a=a[0], b=a[1]), 1: db.format(g=g, o=o, a=a[0], b=a[1])}
    return rule


BINARY = {
    "add": _binary("{g}", "{g}"), "sub": _binary("{g}", "-{g}"), "rsub": _binary("-{g}", "{g}"),
    "mul": _binary("{g} * {b}", "{g} * {a}"), "div": _binary("{g} / {b}", "-{g} * ({o} / {b})"),
    # b / a is a.reciprocal() * b in eager (Tensor.__rtruediv__): a mul's and a reciprocal's rules
    "rdiv": _binary("-({g} * {b}) * ({a}.reciprocal() * {a}.reciprocal())", "{g} * {a}.reciprocal()"),
}


def _pow(n, a, g, o):
    e = n.args[1] if len(n.args) > 1 else None
    if not isinstance(e, (int, float)) or isinstance(e, bool):
        raise NoRule("pow with a tensor or symbolic exponent")
    if e == 0:  # eager: zeros, even where x ** -1 is inf
        return {0: f"torch.zeros_like({a[0]})"}
    return {0: f"{g} * ({a.name(e)} * {a[0]}.pow({a.name(e - 1)}))"}


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
    conds = ([f"({a[0]} >= {a.name(lo)})"] if lo is not None else []) + \
        ([f"({a[0]} <= {a.name(hi)})"] if hi is not None else [])
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
    # (eager scales by the float 2 / (n - correction) first: a half type's gradient may round apart by an
    # ulp; that factor as a number here would be a float symbol of the backward, and n - correction may be 0)
    if name == "var":
        return {0: f"{gk} * 2 * ({a[0]} - {mean}) / ({count} - {correction})"}
    ok = o if keep else f"{o}" + "".join(f".unsqueeze({d})" for d in dims)
    # eager: g / (2 std), 0 where std is 0 (a constant row), then var's rule
    return {0: f"torch.where({ok} == 0, 0.0, {gk} / {ok}) * ({a[0]} - {mean}) / ({count} - {correction})"}


def correction_of(n) -> float:
    """var/std's correction where it is a number (1 when it is not: the kernel gives up then anyway)."""
    try:
        return _correction(n)
    except NoRule:
        return 1


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
                                                                           "softmax", "log_softmax")},
         "layer_norm": _norm, "rms_norm": _norm, "cross_entropy": _xent}


def _reduce_to(g: str, shape_to, shape_from) -> str:
    """`g` (of the region member's shape) summed over the dims a broadcast added to an input."""
    shape_to, shape_from = list(shape_to), list(shape_from)
    lead = len(shape_from) - len(shape_to)
    if any(not isinstance(s, int) and sympy.simplify(s - shape_from[lead + i]) != 0 for i, s in enumerate(shape_to)):
        # a size that is 1 only at run time (`s0 - 1` next to `s0`, train fuzz seed 25112802): which dims
        # the broadcast added is decided when the backward runs (its trace guards the sizes)
        return f"_sum_to({g}, {_shape_expr(shape_to)})"
    dims = list(range(lead))
    for i, s in enumerate(shape_to):
        if isinstance(s, int) and s == 1 and not (isinstance(shape_from[lead + i], int) and shape_from[lead + i] == 1):
            dims.append(lead + i)
    if not dims:
        return g
    if dims == list(range(lead)):  # only leading dims added (a bias): no reshape after, so a region takes it
        return f"{g}.sum({tuple(dims)!r})"
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
        if ops.family(n) not in ("pointwise", "identity", "reduce", "composite", "xent"):
            raise NoRule(f"{ops.op_name(n.target)} ({ops.family(n)})")
        op = ops.op_name(n.target)
        if not n.meta.dtype.is_floating_point:
            continue  # a comparison, an int cast: no gradient flows through it
        if op not in RULES and not (op in ops.CASTS and ops.family(n) == "pointwise"):
            raise NoRule(op)
    em = _Emitter(Graph())
    ins = [f"_in{i}" for i in range(len(region.inputs))]
    gs = [f"_g{j}" for j in range(len(region.outputs))]
    lse = {o: f"_lse{j}" for j, o in enumerate(o for o in region.outputs if saves_lse(region, o))}
    # gradients flow as eager's do: an output nobody differentiates gets None (not zeros), and a
    # member whose gradient is None runs no rule (its backward does not run in eager either, so
    # nothing it would read makes the gradients require grad under create_graph)
    grad: dict = {}  # node -> the variable of its accumulated gradient (None until some term arrives)
    head = []
    for o, g in zip(region.outputs, gs):
        if o.meta.dtype.is_floating_point:
            grad[o] = f"g_{o.name}"
            head.append(f"    g_{o.name} = {g}")
    body, reads = [], set()  # the gradient statements; the forward values they read
    for n in reversed(region.nodes):
        g = grad.get(n)
        if g is None or not n.meta.dtype.is_floating_point:
            continue
        op = ops.op_name(n.target)
        rule = _cast if op in ops.CASTS else RULES[op]
        f32 = n.meta.dtype in HALF and op in F32_RULES and not (op == "sigmoid" and n.meta.dtype == torch.float16)
        if f32:
            args = _F32Args(em, n, lse.get(n))
            args.made.update({f"{g}_f": g, f"{n.name}_f": n.name})
            got = rule(n, args, f"{g}_f", f"{n.name}_f")
        else:
            got = rule(n, _Args(em, n, lse.get(n)), g, n.name)
        body.append(f"    if {g} is not None:")
        if f32:
            ups = args.upcasts(list(got.get("_pre", ())) + [v for k, v in got.items() if k != "_pre"])
            got["_pre"] = ups + list(got.get("_pre", ()))
        for line in got.pop("_pre", ()):
            body.append(f"        {line}")
            reads |= set(_NAME.findall(line.split("=", 1)[1]))
        for key, expr in got.items():
            src = ops.arg(n, *key) if isinstance(key, tuple) else (n.args[key] if key < len(n.args) else None)
            if not (isinstance(src, Node) and ops.is_tensor(src) and src.meta.dtype.is_floating_point
                    and src.meta.requires_grad):  # no gradient flows to what does not require it
                continue
            if ops.family(n) not in ("reduce", "xent"):  # a reduction's rule gives its input's shape already
                expr = _reduce_to(f"({expr})", src.meta.shape, n.meta.shape)
            if f32:  # summed in float32 (as eager's kernel, or its float32 decomposition), then rounded
                expr = f"({expr}).to({src.meta.dtype})"
            reads |= set(_NAME.findall(expr))
            gname = f"g_{src.name}"
            if src not in grad:
                head.append(f"    {gname} = None")
                grad[src] = gname
            body.append(f"        {gname} = {expr} if {gname} is None else {gname} + {expr}")
        if body[-1].endswith(":"):
            body.append("        pass")
    body = head + body
    # the forward statements the rules read, recomputed (pointwise values cost less to recompute
    # than to save); the inputs they need are all the forward must save
    need = {n for n in region.nodes if n.name in reads}
    for n in reversed(region.nodes):
        if n in need:
            need |= {a for a in _nodes_in((n.args, n.kwargs))}
    saved = [i for i, t in enumerate(region.inputs) if t in need or t.name in reads]
    lines = [f"def {name}_backward({', '.join(ins + [s.name for s in symbols] + gs + list(lse.values()))}):"]
    lines += [f"    {region.inputs[i].name} = {ins[i]}" for i in saved]
    lines += ["    " + _call(em, n) for n in region.nodes if n in need]
    lines += body
    # the inputs autograd can ask about (requires_grad is eager's answer, guarded for graph inputs)
    wants = [i for i, t in enumerate(region.inputs) if t.meta.dtype.is_floating_point and t.meta.requires_grad]
    rets = [grad.get(region.inputs[i], "None") for i in wants]
    lines.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    kept = {v for n in region.nodes for v in eager_saves(n)}
    em.ns["_sum_to"] = _sum_to
    return Backward("\n".join(lines) + "\n", em.ns, wants, saved,
                    [i for i, t in enumerate(region.inputs) if t in kept],
                    [j for j, o in enumerate(region.outputs) if o in kept])


# What eager's autograd keeps of a call for its backward (derivatives.yaml; checked against the tensors
# eager's grad_fn nodes hold, tests/backends/fused/test_hunt6_autograd.py). It checks their versions when
# the backward runs: a user who changes one in place in between gets an error there, and so must ours,
# for the values a user can reach (the region's inputs and outputs); a value eager does not keep must not
# raise (autograd's error would claim eager's does).
_KEEPS_RESULT = {"exp", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "reciprocal", "expm1", "softmax",
                 "log_softmax", "std"}
_KEEPS_INPUT = {"log", "sin", "cos", "square", "erf", "silu", "log1p", "abs", "gelu", "pow", "var", "std",
                "clamp", "clamp_min", "clamp_max", "layer_norm"}


def _needs_grad(v) -> bool:
    return isinstance(v, Node) and ops.is_tensor(v) and v.meta.requires_grad


def eager_saves(n: Node) -> list:
    if not n.meta.requires_grad:
        return []
    op = ops.op_name(n.target)
    out = [n] if op in _KEEPS_RESULT else []
    if op in _KEEPS_INPUT and n.args:
        out.append(n.args[0])
    if op == "layer_norm":  # native_layer_norm keeps all three, whichever requires grad
        out += [ops.arg(n, 2, "weight"), ops.arg(n, 3, "bias")]
    if op == "rms_norm" and n.args and _needs_grad(n.args[0]):
        # eager's CPU rms_norm is torch calls: x.pow(2) and x * rsqrt(...) keep x (a half type's float32
        # copy instead), `* weight` keeps the weight; none of them runs for an x that needs no gradient
        out += ([n.args[0]] if n.args[0].meta.dtype not in HALF else []) + [ops.arg(n, 2, "weight")]
    if op == "cross_entropy":
        out.append(ops.arg(n, 1, "target"))
    if op == "where" and n.args:
        out.append(n.args[0])
    if op in ("mul", "div", "rdiv") and len(n.args) > 1:
        a, b = n.args[0], n.args[1]
        if op == "mul":  # each factor for the other's gradient
            out += ([b] if _needs_grad(a) else []) + ([a] if _needs_grad(b) else [])
        elif op == "div":  # a / b: b for a's gradient, a and b for b's
            out += ([b] if _needs_grad(a) else []) + ([a, b] if _needs_grad(b) else [])
        else:  # rdiv(a, b) = b / a, which eager computes as a.reciprocal() * b (Tensor.__rtruediv__): it keeps
            # the reciprocal's result (its own) and b for a's gradient, never a
            out += [b] if _needs_grad(a) else []
    return [v for v in out if isinstance(v, Node) and ops.is_tensor(v)]


HALF = (torch.float16, torch.bfloat16)
# members whose eager backward in a half type is one kernel computing in float32 (sigmoid_backward,
# tanh_backward, gelu_backward, silu_backward, the softmaxes' and native_layer_norm's backward) or a
# float32 decomposition (rms_norm upcasts): their rule runs in float32 and rounds once at the end,
# where the half-type torch calls would round after each op (an ulp apart in ~20% of elements)
# (eager's float16 sigmoid_backward on the CPU computes in float16, op by op: the rule as written)
F32_RULES = {"tanh", "sigmoid", "silu", "gelu", "softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy"}


class _Args(list):
    """A call's positional arguments as the generated code names them, parenthesized unless a
    name or a plain number (`g / (s0 + 1)`, not `g / s0 + 1`); `name(v)` names any value so."""

    def __init__(self, em, n, lse=None):
        self.em, self.lse = em, lse  # lse: the parameter of the forward's saved logsumexp (cross-entropy)
        super().__init__(self.name(a) for a in n.args)

    def name(self, v) -> str:
        text = self.em.arg(v)
        return text if _ATOM.fullmatch(text) else f"({text})"


class _F32Args(_Args):
    """A half-type member's tensor arguments named as float32 copies (`x_f`, made by `x.float()` ahead
    of its rule; `made` maps each to its half-type name); `raw` names a value as it is."""

    def __init__(self, em, n, lse=None):
        self.made: dict = {}
        super().__init__(em, n, lse)

    def raw(self, v) -> str:
        return super().name(v)

    def name(self, v) -> str:
        text = super().name(v)
        if isinstance(v, Node) and ops.is_tensor(v) and v.meta.dtype in HALF and _ATOM.fullmatch(text):
            self.made[f"{text}_f"] = text
            return f"{text}_f"
        return text

    def upcasts(self, texts) -> list:
        """`x_f = x.float()` for each float32 name the rule's statements read."""
        joined = "\n".join(texts)
        return [f"{f} = {h}.float()" for f, h in self.made.items()
                if re.search(rf"(?<![.\w]){re.escape(f)}(?!\w)", joined)]


_ATOM = re.compile(r"[A-Za-z_]\w*|\d+(\.\d*)?(e[+-]?\d+)?")


_NAME = re.compile(r"(?<![.\w])[A-Za-z_]\w*")  # names, not attributes (torch.exp)


def _sum_to(g, shape):
    """`g` summed back to `shape`, the shape of an input its forward broadcast."""
    lead = g.dim() - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
    if dims:
        g = g.sum(dims, keepdim=True)
    return g.reshape(shape) if lead else g


class Backward(NamedTuple):
    source: str
    namespace: dict
    wants: list  # the inputs it returns gradients for (positions)
    saved: list  # the inputs it reads (positions)
    eager_in: list  # the inputs eager would keep (version-checked as eager checks them)
    eager_out: list  # the outputs eager would keep (likewise)


class InputChangedError(RuntimeError):
    """A region input its generated backward reads was changed in place before that backward ran."""


class FusedRegion(torch.autograd.Function):
    """One region under autograd: its kernel forward, its generated backward (see the module doc).

    What autograd version-checks is what eager would keep (`eager_saves`), so changing a tensor in
    place between forward and backward raises exactly where eager raises. An input the backward
    reads that eager would not keep is held as is: unchecked when no user can reach it (memory the
    graph made, which changes nothing in place, and did not return or store, not even a view of it);
    with a copy taken at the forward where the graph itself changes tensors in place (after this
    region, x.mul_(3) may change an input it read) or where the graph made it and a user can reach
    it (`return loss, logits.view(-1)`, then `lv.mul_(5)`: eager's saved results do not see that),
    used if the original changed (made with its history where it has one, for a create_graph
    backward to differentiate through); else (the caller's own tensors and views of them) checked
    when the backward runs, raising InputChangedError if the user changed it in between (as
    AOTAutograd's saved inputs do; a copy at every forward cost a cross-entropy step over 64x32000
    logits 15%)."""

    @staticmethod
    def forward(ctx, rt, n_in, *args):
        bw = rt.backward
        ctx.rt, ctx.n_in = rt, n_in
        ctx.syms = args[n_in:]
        aux = []
        out = rt.kernel_call(*args, _save=aux)
        ctx.aux = aux or None  # per-row logsumexp of cross-entropy outputs (none where the kernel fell back)
        outs = out if isinstance(out, tuple) else (out,)
        # what eager's would not require grad (an int result, a float made from comparisons only)
        ctx.mark_non_differentiable(*[t for t, o in zip(outs, rt.region.outputs)
                                      if not (t.dtype.is_floating_point and o.meta.requires_grad)])
        ctx.save_for_backward(*[args[i] for i in bw.eager_in], *[outs[j] for j in bw.eager_out])
        ctx.held = {}
        for i in bw.saved:
            if i not in bw.eager_in:
                t = args[i]
                if t.is_inference():  # no version counter to check (made under inference_mode): its values
                    ctx.held[i] = (t.clone(), None, None)  # now, as eager keeps what it computes from them
                elif i in rt.internal:
                    ctx.held[i] = (t, None, None)
                else:  # a copy where the graph itself may change it after this region (x.mul_(3) later) or
                    # the user may change a value the graph made and returned (`return loss, logits.view(-1)`),
                    # with its history where it has one: a create_graph backward differentiates through it
                    # to the value it had here, as eager's saved tensors do
                    with torch.enable_grad() if t.requires_grad else contextlib.nullcontext():
                        copy = t.clone() if rt.graph_mutates or i in rt.exposed else None
                    ctx.held[i] = (t, t._version, copy)
        ctx.needs = [ctx.needs_input_grad[2 + i] for i in range(n_in)]
        ctx.set_materialize_grads(False)  # an output nobody differentiates: None, as eager's graph sees it
        return out

    @staticmethod
    def backward(ctx, *grads):
        rt = ctx.rt
        bw = rt.backward
        ins = [None] * ctx.n_in
        kept = ctx.saved_tensors  # raises autograd's error where eager's would
        for i, t in zip(bw.eager_in, kept):
            if i in bw.saved:
                ins[i] = t
        for i, (t, version, copy) in ctx.held.items():
            ins[i] = t
            if version is None or t._version == version:
                continue
            if copy is not None and (not torch.is_grad_enabled() or not ctx.needs[i] or copy.requires_grad):
                ins[i] = copy
            elif copy is not None:
                raise InputChangedError(
                    f"dynashape: input {i} of the fused region {rt.name} ({rt.where()}) was changed in place "
                    f"between the forward and a backward with create_graph=True; eager allows it here but the "
                    f"region recomputes from its inputs. Change a copy instead (x = x.clone() before the "
                    f"in-place op), or set ds.config.fused_autograd = False")
            else:
                raise InputChangedError(
                    f"dynashape: input {i} of the fused region {rt.name} ({rt.where()}) was changed in place "
                    f"between the forward and the backward (version {version} -> {t._version}). Its backward "
                    f"recomputes from that input, where eager's would have kept another value (torch.compile "
                    f"raises here too). Change a copy instead (x = x.clone() before the in-place op), or set "
                    f"ds.config.fused_autograd = False")
        # an expanded gradient (a mean's: strides 0) would send the kernels down their strided loops,
        # scalar index arithmetic per element (30x slower than the contiguous, vectorized ones)
        grads = [g.contiguous() if isinstance(g, torch.Tensor) and not g.is_contiguous() else g for g in grads]
        aux = ctx.aux if ctx.aux is not None and not torch.is_grad_enabled() else [None] * rt.n_aux
        got = rt.backward_fn(*ins, *ctx.syms, *grads, *aux)
        out = [None] * ctx.n_in
        if all(g is None for g in grads):
            return (None, None, *[None] * ctx.n_in, *[None] * len(ctx.syms))
        for i, g in zip(bw.wants, got):
            if ctx.needs[i]:
                out[i] = g
        return (None, None, *out, *[None] * len(ctx.syms))
