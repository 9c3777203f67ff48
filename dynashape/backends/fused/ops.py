"""Which graph calls the fused backend understands, and how to read their arguments.

`op_name(target)` maps a torch callable (function, Tensor method, dunder) to one canonical
name, or None; `family(node)` says what kind of loop the op needs:

    pointwise   one output element from the same element of each input (after broadcasting)
    view        an index map: reshape/permute/expand/squeeze...; never a region output
    identity    the value itself (dropout in eval, contiguous, clone)
    reduce      sum/mean/amax/amin/var/std/logsumexp over trailing dims
    composite   softmax/log_softmax/layer_norm/rms_norm: reductions and pointwise in one call
    xent        F.cross_entropy over class indices: a row's logsumexp minus its target's logit
"""
from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from ...ir.graph import Node, SymExpr, TensorMeta, _nodes_in

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
DTYPES = FLOATS + (torch.int64, torch.int32, torch.bool)

UNARY = {"neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
         "relu", "gelu", "silu", "erf", "reciprocal", "square", "logical_not", "floor", "ceil", "trunc",
         "leaky_relu", "hardtanh", "softplus", "elu", "exp2", "log2", "tan", "mish", "hardsigmoid",
         "hardswish", "relu6", "cast"}
BINARY = {"add", "sub", "mul", "div", "rsub", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
          "ge", "logical_and", "logical_or", "rpow", "rdiv"}
OTHER_POINTWISE = {"where", "clamp", "clamp_min", "clamp_max", "masked_fill", "lerp", "addcmul"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}
# ops eager runs on bool tensors (the others raise "not implemented for 'Bool'" and stay torch calls)
BOOL_INPUTS = COMPARE | {"logical_and", "logical_or", "logical_not", "where", "masked_fill", "add", "mul", "maximum",
                         "minimum", "amax", "amin", "sum", "sigmoid", "exp", "div", "rdiv", "pow", "rpow", "square",
                         "clamp", "clamp_min", "clamp_max", "sqrt", "logsumexp", "reciprocal", "tanh", "erf"}
REDUCE = {"sum", "mean", "amax", "amin", "var", "std", "logsumexp"}
COMPOSITE = {"softmax", "log_softmax", "layer_norm", "rms_norm"}
XENT = {"cross_entropy"}  # one pass over the logits: logsumexp minus the target's logit, per row
VIEW = {"view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "flatten",
        "unflatten", "expand_as", "view_as", "reshape_as", "movedim"}
STRIDED = {"view", "view_as"}  # calls whose success depends on their input's strides (never fused)
IDENTITY = {"contiguous", "clone", "dropout", "detach"}
CASTS = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16,
         "long": torch.int64, "int": torch.int32, "bool": torch.bool, "to": None, "type_as": None}
BOOL_INPUTS |= VIEW | IDENTITY | set(CASTS)
# ops whose eager kernels take floating inputs only: of an integer (or bool) tensor they raise ("not
# implemented for 'Int'", mean's "could not infer output dtype"), so they stay torch calls and raise as eager
# does (the trace's meta gives such a call an integer result instead of an error). exp, sigmoid, logsumexp...
# of an integer tensor do not raise: eager computes them in the default float type, as the lowering does
FLOAT_INPUTS = {"mean", "var", "std", "softmax", "log_softmax", "layer_norm", "rms_norm", "lerp", "gelu", "silu",
                "elu", "leaky_relu", "softplus", "mish", "hardsigmoid", "hardswish"}

_ALIASES = {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__rsub__": "rsub", "__mul__": "mul",
            "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "rdiv", "__pow__": "pow",
            "__rpow__": "rpow", "__neg__": "neg", "__abs__": "abs", "__eq__": "eq", "__ne__": "ne",
            "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge", "__and__": "logical_and",
            "__or__": "logical_or", "__invert__": "logical_not", "true_divide": "div", "multiply": "mul",
            "subtract": "sub", "negative": "neg", "clip": "clamp", "special_erf": "erf", "max": None,
            "greater": "gt", "less": "lt", "absolute": "abs", "dropout1d": None, "type_as": "type_as"}

_OWNERS = (torch, torch.Tensor, torch._C.TensorBase, F, torch.special, torch._C._nn,
           torch._C._VariableFunctions)


def _table() -> dict:
    names = (UNARY | BINARY | OTHER_POINTWISE | REDUCE | COMPOSITE | XENT | VIEW | IDENTITY | set(CASTS)) - {"cast"}
    table: dict = {}
    for owner in _OWNERS:
        for name in list(names) + list(_ALIASES):
            obj = getattr(owner, name, None)
            canon = _ALIASES.get(name, name)
            if obj is None or canon is None:
                continue
            try:
                table.setdefault(obj, canon)
            except TypeError:
                pass
    table[getattr(torch.special, "expit")] = "sigmoid"
    return table


_TABLE = _table()


def op_name(target) -> str | None:
    try:
        return _TABLE.get(target)
    except TypeError:
        return None


def arg(n: Node, i: int, name: str, default=None):
    """Argument `name` of a call, given positionally at `i` or by keyword; a shape given as a graph
    value (`%size = torch.Size([...])`) as the tuple of its elements."""
    if name in n.kwargs:
        v = n.kwargs[name]
    elif i is not None and i < len(n.args):
        v = n.args[i]
    else:
        return default
    if isinstance(v, Node) and v.kind == "call" and v.target is torch.Size:
        return tuple(v.args[0])
    return v


def reads_other_values(n: Node) -> bool:
    """Whether a call reads a graph value that is not a tensor (a Size, a list a call returned):
    its region's code would have to take it as an argument; such calls stay torch calls."""
    return any(not is_tensor(u) for u in _nodes_in((n.args, n.kwargs)))


def rms_norm_eps(dtype: torch.dtype) -> float:
    """`F.rms_norm`'s eps when none is given: the machine epsilon of the type eager computes in,
    float32's for float16 and bfloat16 (not the half type's own, 7.8e-3 for bfloat16)."""
    return torch.finfo(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype).eps


def is_tensor(v) -> bool:
    return isinstance(v, Node) and isinstance(v.meta, TensorMeta)


def is_scalar(v) -> bool:
    return isinstance(v, (bool, int, float)) or (isinstance(v, SymExpr) and v.pytype in (int, float, bool))


def tensor_args(n: Node) -> list:
    return [a for a in list(n.args) + list(n.kwargs.values()) if is_tensor(a)]


def norm_dims(dims, rank: int):
    if dims is None or dims == [] or dims == ():
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    if not all(isinstance(d, int) for d in dims):
        return None
    out = tuple(sorted(d % rank if rank else 0 for d in dims))
    return out if len(set(out)) == len(out) else None


def family(n: Node) -> str | None:
    """The loop family of a call, or None when it stays a torch call."""
    if n.kind != "call":
        return None
    name = op_name(n.target)
    if name is None or not is_tensor(n) or n.meta.dtype not in DTYPES or reads_other_values(n):
        return None
    ins = tensor_args(n)
    if not ins or any(t.meta.dtype not in DTYPES for t in ins):
        return None
    if "out" in n.kwargs or n.kwargs.get("inplace"):
        return None
    if name not in BOOL_INPUTS and any(t.meta.dtype == torch.bool for t in ins):
        return None  # relu, neg, abs, floor... of a bool tensor raise in eager: torch's call raises as eager
    if name in FLOAT_INPUTS and not _float_inputs_ok(n, name):
        return None
    if _zero_tie(n, name):
        return None
    if name == "masked_fill" and is_tensor(arg(n, 2, "value")) and not _holds(arg(n, 2, "value").meta.dtype, n.meta.dtype):
        return None  # a 0-d value is read as a number (item()) and converted with eager's check: it may raise
    if name in BINARY | OTHER_POINTWISE | UNARY and eager_raises(n):
        return None  # a number that does not fit the tensor's type (masked_fill(m, 2**40) of int32): eager raises
    if name in XENT:
        return "xent" if _xent_ok(n) else None
    if name in VIEW:
        return "view" if _view_ok(n, name) else None
    if name in IDENTITY:
        if name == "dropout":
            training = arg(n, 2, "training", True)
            if training is not False and arg(n, 1, "p", 0.5) != 0:
                return None
            if arg(n, 3, "inplace", False):
                return None
        if name == "clone" and n.kwargs.get("memory_format") not in (None, torch.contiguous_format,
                                                                    torch.preserve_format):
            return None
        if name == "contiguous" and len(n.args) > 1:
            return None
        return "identity"
    if name in CASTS:
        if name == "to":
            extra = [a for a in n.args[1:]] + [v for k, v in n.kwargs.items() if k != "dtype"]
            if extra and not (len(n.args) == 2 and isinstance(n.args[1], torch.dtype) and not n.kwargs):
                if not (len(n.args) == 1 and list(n.kwargs) == ["dtype"]):
                    return None
        elif name == "type_as":
            pass
        elif len(n.args) > 1 or n.kwargs:
            return None
        if n.meta.dtype == ins[0].meta.dtype:
            return "identity"  # eager returns the tensor itself
        return "pointwise"
    if name in REDUCE:
        if n.kwargs.get("dtype") is not None or n.kwargs.get("out") is not None:
            return None
        if name in ("sum", "mean") and len(n.args) > 3:
            return None
        return "reduce"
    if name in COMPOSITE:
        if name in ("softmax", "log_softmax"):
            if arg(n, 2, "dtype") not in (None, n.meta.dtype) or arg(n, 1, "dim") is None:
                return None
        return "composite"
    if name == "div" and arg(n, 2, "rounding_mode") is not None:
        return None
    if name == "gelu" and arg(n, 1, "approximate", "none") not in ("none", "tanh"):
        return None
    for a in list(n.args) + list(n.kwargs.values()):
        if not (is_tensor(a) or is_scalar(a) or a is None or isinstance(a, str)):
            return None
    return "pointwise"


def _zero_tie(n: Node, name: str) -> bool:
    """Whether eager's CPU kernel of this call may return either of +0.0 and -0.0 by position: torch.maximum/
    minimum (and clamp by a tensor bound, which is one) of two opposite zeros give the second operand in
    its vectorized blocks (`_mm256_max_ps`) and the first in the scalar tail and on strided inputs, and
    amax/amin over a row holding both zeros give either by the row's length. No kernel reproduces that,
    so these calls of a floating type stay torch calls (integers have one zero; a Python-number bound is
    kept by clamp on ties in both paths, as the kernels do)."""
    if not n.meta.dtype.is_floating_point:
        return False
    if name in ("clamp", "clamp_min", "clamp_max"):
        return any(is_tensor(b) for b in list(n.args[1:]) + [n.kwargs.get("min"), n.kwargs.get("max")])
    return name in ("maximum", "minimum", "amax", "amin")


def _float_inputs_ok(n: Node, name: str) -> bool:
    """Whether eager's kernel of a FLOAT_INPUTS op accepts the dtypes of this call's tensors."""
    x = n.args[0] if n.args else n.kwargs.get("input")
    if not is_tensor(x):
        return False
    xd = x.meta.dtype
    if name in ("softmax", "log_softmax", "mean") and isinstance(arg(n, 2 if name != "mean" else 3, "dtype"), torch.dtype):
        return True  # the input is cast to that (floating) type first (family checks it is the result's)
    if xd not in FLOATS:
        return False
    if name == "lerp":  # end, and a weight tensor of any rank but 0, must have the input's type
        end, w = arg(n, 1, "end"), arg(n, 2, "weight")
        return is_tensor(end) and end.meta.dtype == xd and not (is_tensor(w) and w.meta.shape and w.meta.dtype != xd)
    if name == "layer_norm":  # the CPU kernel: weight and bias of the input's type, or float32 ones for a half input
        params = [p.meta.dtype for p in (arg(n, 2, "weight"), arg(n, 3, "bias")) if is_tensor(p)]
        return all(p == xd for p in params) or (xd in (torch.float16, torch.bfloat16)
                                                and all(p == torch.float32 for p in params))
    return True


def _view_ok(n: Node, name: str) -> bool:
    """Whether a view is index arithmetic that cannot fail at run time where eager's call would:
    `view` raises on strides the graph does not know (a transposed input, or a member computed
    from one), and a `-1` next to a symbolic size raises when that size is 0; those stay torch calls."""
    if name in STRIDED:
        return False
    if name in ("reshape", "unflatten"):
        sizes = [a for a in list(n.args[1:]) + list(n.kwargs.values())]
        flat = [x for a in sizes for x in (a if isinstance(a, (list, tuple)) else [a])]
        if any(isinstance(x, int) and x == -1 for x in flat) and not all(isinstance(x, int) for x in flat):
            return False
    return True


def _xent_ok(n: Node) -> bool:
    x, t = n.args[0] if n.args else None, arg(n, 1, "target")
    if not (is_tensor(x) and is_tensor(t) and len(x.meta.shape) == 2 and len(t.meta.shape) == 1):
        return False
    if x.meta.dtype not in FLOATS or t.meta.dtype != torch.int64:
        return False
    if arg(n, 2, "weight") is not None or arg(n, 3, "size_average") is not None or arg(n, 5, "reduce") is not None:
        return False
    return arg(n, 6, "reduction", "mean") in ("mean", "sum", "none") and arg(n, 7, "label_smoothing", 0.0) == 0.0 \
        and isinstance(arg(n, 4, "ignore_index", -100), int)


def reduce_dims(n: Node):
    """(input node, reduced dims of the input, keepdim) of a reduce/composite call, or None."""
    name = op_name(n.target)
    x = n.args[0] if n.args else None
    if not is_tensor(x):
        return None
    rank = len(x.meta.shape)
    if name in ("layer_norm", "rms_norm"):
        shape = arg(n, 1, "normalized_shape")
        if not isinstance(shape, (list, tuple)):
            return None  # the number of normalized dims is what decides the reduction: known or not fused
        k = len(shape)
        return x, tuple(range(rank - k, rank)), True
    if name in ("softmax", "log_softmax"):
        d = arg(n, 1, "dim")
        if not isinstance(d, int) or rank == 0:
            return None
        return x, (d % rank,), True
    dims = arg(n, 1, "dim")
    if name in ("var", "std") and isinstance(dims, bool):
        return None  # var(x, unbiased): a full reduction
    if name in ("amax", "amin") and dims is None and "dim" not in n.kwargs and len(n.args) < 2:
        dims = ()
    dims = norm_dims(dims, rank)
    if dims is None or rank == 0:
        return None
    keep = arg(n, 3 if name in ("var", "std") and len(n.args) > 3 else 2, "keepdim", False)
    if name in ("var", "std") and len(n.args) == 3 and isinstance(n.args[2], bool) and "keepdim" not in n.kwargs:
        keep = False  # var(x, dim, unbiased)
    return x, dims, bool(keep)


def col_reduce(n: Node) -> str | None:
    """"col" for a sum or mean over every dim but the last (a bias's or a norm weight's gradient:
    `g.sum(0)`), "total" for one over every dim (a loss's `.mean()`), of a float32/float64 value:
    a region whose domain is its argument's shape accumulates it per column, or per thread, in its
    last pass. None for any other call."""
    if n.kind != "call" or op_name(n.target) not in ("sum", "mean") or family(n) != "reduce":
        return None
    got = reduce_dims(n)
    if got is None or n.meta.dtype not in (torch.float32, torch.float64):
        return None
    x, dims, _ = got
    rank = len(x.meta.shape)
    if x.meta.dtype != n.meta.dtype or "dtype" in n.kwargs or rank < 1:
        return None
    if rank >= 2 and tuple(dims) == tuple(range(rank - 1)):
        return "col"
    if tuple(dims) == tuple(range(rank)):
        return "total"
    return None


# ---------------------------------------------------------------- type promotion and eager's number checks
def _category(dt) -> int:
    return 0 if dt == torch.bool else 2 if dt.is_floating_point else 1


def result_type(vals) -> torch.dtype:
    """The type eager's TensorIterator computes `vals` in (torch.result_type over many operands): dimensioned
    tensors decide; a 0-d tensor, then a Python number, only where its category (bool < int < float) is higher
    (a 0-d int64 tensor with an int32 one: int32; a 0-d float64 with a float16: float16; a Python float with
    an integer tensor: the default float type)."""
    dims, zeros, wrapped = None, None, None

    def up(cur, dt):
        return dt if cur is None else torch.promote_types(cur, dt)

    for v in vals:
        if is_tensor(v):
            if v.meta.shape:
                dims = up(dims, v.meta.dtype)
            else:
                zeros = up(zeros, v.meta.dtype)
        elif is_scalar(v):
            py = v.pytype if isinstance(v, SymExpr) else type(v)
            wrapped = up(wrapped, torch.bool if py is bool else torch.int64 if py is int else torch.get_default_dtype())

    def combine(higher, lower):
        if higher is None:
            return lower
        if lower is None or higher.is_floating_point:
            return higher
        if higher == torch.bool or lower.is_floating_point:
            return torch.promote_types(higher, lower)
        return higher
    return combine(dims, combine(zeros, wrapped))


def fits(v, dt) -> bool:
    """Whether eager's checked conversion of the number `v` to `dt` (`Scalar::to<T>`, c10's `overflows`) passes:
    an integer type holds it (a float's fraction is dropped, NaN and inf are not held), a float type has it
    within its finite range (or it is inf or NaN)."""
    if dt == torch.bool:
        return True
    if dt.is_floating_point:
        if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
            return True
        fi = torch.finfo(dt)
        return fi.min <= v <= fi.max
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return False
    ii = torch.iinfo(dt)
    return ii.min <= v <= ii.max


def _holds(src, dst) -> bool:
    """Whether every value of type `src` converts to `dst` under eager's check (`fits`)."""
    if src == dst or src == torch.bool or dst == torch.float64:
        return True
    if dst in (torch.float32, torch.bfloat16):
        return src in (torch.int32, torch.int64, torch.float16, torch.bfloat16)
    return src == torch.int32 and dst == torch.int64


_RAISES: dict = {}
_PROBES = {int: (2 ** 63 - 1, -2 ** 63), float: (1.7e308, -1.7e308), bool: (True,)}


def eager_raises(n: Node, probe: SymExpr | None = None) -> bool:
    """Whether eager's call raises for this call's numbers (`masked_fill(m, 2**40)` of an int32 tensor: "value
    cannot be converted to type int without overflow"; `x + (-2**63 - 1)`: "Overflow") or its bool tensors
    (`b.clamp(b, c)`: "clamp_cpu" not implemented for 'Bool', where `b.clamp(b)` runs; the meta kernels the
    trace ran check neither), found by running it on small zero tensors of its operands' types and ranks.
    Symbolic numbers count as 1 (any value fits), except `probe`, which takes the extremes of its type: True
    when some value of it may raise."""
    flat = list(n.args) + list(n.kwargs.values())
    flat += [x for a in flat if isinstance(a, (list, tuple)) for x in a]
    if not any(isinstance(a, (bool, int, float, SymExpr)) or (is_tensor(a) and a.meta.dtype == torch.bool)
               for a in flat):
        return False
    one = {int: 1, float: 1.0, bool: True}

    def key(v):
        if is_tensor(v):
            return ("t", v.meta.dtype, len(v.meta.shape))
        if isinstance(v, SymExpr):
            return ("p", v.pytype) if v is probe else ("s", v.pytype)
        if isinstance(v, (list, tuple)):
            return tuple(key(x) for x in v)
        if isinstance(v, float):
            return ("f", repr(v))
        return (type(v).__name__, v) if isinstance(v, (bool, int, str, type(None), torch.dtype)) else ("?", id(v))

    k = (n.target, tuple(key(a) for a in n.args), tuple((name, key(v)) for name, v in n.kwargs.items()))
    got = _RAISES.get(k)
    if got is not None:
        return got
    got = False
    values = _PROBES.get(probe.pytype, (1,)) if probe is not None else (None,)
    for pv in values:
        def real(v):
            if is_tensor(v):
                return torch.zeros((1,) * len(v.meta.shape), dtype=v.meta.dtype)
            if isinstance(v, SymExpr):
                return pv if v is probe else one.get(v.pytype, 1)
            if isinstance(v, (list, tuple)):
                return type(v)(real(x) for x in v)
            return v
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                n.target(*[real(a) for a in n.args], **{name: real(v) for name, v in n.kwargs.items()})
        except Exception:  # noqa: BLE001 - any error: eager's call raises it, torch's call will too
            got = True
            break
    if len(_RAISES) < 10000:
        _RAISES[k] = got
    return got
