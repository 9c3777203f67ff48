"""What a saved program may name: torch operations, and shape expressions.

Loading must never run code from the file. Call targets are looked up by their
qualified name in torch's operator namespaces (`torch.*`, `torch.Tensor.*`,
`torch.nn.functional.*`, `torch.special/linalg/fft.*`) and a few names of
`operator`/`math`; anything else is refused. Expressions are read by a small
reader over Python's syntax tree that knows arithmetic, comparisons, the shape
functions (`FloorDiv`, `Mod`, ...) and the program's symbols, and nothing else.

>>> resolve_target("torch.nn.functional.linear") is torch.nn.functional.linear
True
>>> syms = make_symbols({"s0": "size"})
>>> parse_expr("2*s0 + 1", syms)
2*s0 + 1
"""
from __future__ import annotations

import ast
import importlib
import math
import operator
import re
import types

import sympy
import torch

from ..ir.graph import Node
from ..symbolic.errors import DynashapeError
from ..symbolic.functions import (FLOAT_OPS, MATH_CALLS, CeilToInt, CleanDiv, FloorDiv, FloorToInt, IntTrueDiv,
                                  Mod, ToFloat, TruncToInt)
from ..tracing.custom_ops import custom_overload, python_fake
from ..tracing.names import target_name


class LoadError(DynashapeError, ValueError):
    """The file is not a readable exported program (truncated, corrupted, another format, or unsafe)."""


class SaveError(DynashapeError, ValueError):
    """The program holds something the file format cannot represent."""


# ============================================================================ targets
_NAMESPACES = {
    "torch": torch, "torch.nn.functional": torch.nn.functional, "torch.special": torch.special,
    "torch.linalg": torch.linalg, "torch.fft": torch.fft,
}
# the ATen operator bindings: a builtin is loaded only if it is one of these
_ATEN = (torch._C._VariableFunctions, torch._C._nn, torch._C._special, torch._C._linalg, torch._C._fft)
# Python-level torch operations (einsum, F.softmax, F.max_pool2d's dispatcher...)
_OP_MODULES = ("torch.functional", "torch.nn.functional", "torch._jit_internal", "torch.special", "torch.linalg",
               "torch.fft")
_OPERATOR = {"getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs", "eq", "ne",
             "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert", "matmul", "contains", "setitem"}
_MATH = {"floor", "ceil", "trunc", "sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "tanh", "pow",
         "fabs", "isfinite", "isinf", "isnan", "prod"}
# torch callables that touch files, global state or the RNG seeds: never called from a loaded file
_DENY = {"load", "save", "from_file", "compile", "export", "set_default_dtype", "set_default_device",
         "set_default_tensor_type", "set_printoptions", "manual_seed", "seed", "set_rng_state", "initial_seed",
         "use_deterministic_algorithms", "set_num_threads", "set_num_interop_threads", "set_grad_enabled",
         "set_flush_denormal", "set_warn_always", "set_float32_matmul_precision", "set_anomaly_enabled",
         "set_autocast_enabled", "register_hook", "share_memory_", "storage", "untyped_storage", "data_ptr",
         "tolist", "numpy", "backward", "__reduce__", "__reduce_ex__", "__setstate__", "__getstate__",
         "__deepcopy__", "__setattr__", "__delattr__", "__init__", "__new__", "__init_subclass__",
         "__class__", "__subclasshook__", "__torch_function__", "__torch_dispatch__", "_make_subclass"}


# dynashape's own callables that graphs may record (a runtime assert, a data guard)
_DYNASHAPE = {"dynashape.tracing.checks.runtime_check": ("dynashape.tracing.checks", "runtime_check"),
              "dynashape.tracing.speculate.data_guard": ("dynashape.tracing.speculate", "data_guard"),
              "dynashape.tracing.custom_ops.check_output": ("dynashape.tracing.custom_ops", "check_output")}


def resolve_target(name: str):
    """The torch operation a qualified name denotes; LoadError for anything else."""
    if not isinstance(name, str) or len(name) > 200:
        raise LoadError(f"a call target must be a qualified name, got {name!r:.80}")
    if name in _DYNASHAPE:
        mod, attr = _DYNASHAPE[name]
        return getattr(importlib.import_module(mod), attr)
    parts = name.split(".")
    if name.startswith("torch.ops.aten.") and len(parts) in (4, 5):
        return _resolve_aten(name, parts)
    if name.startswith("torch.ops.") and len(parts) == 5:
        return _resolve_custom(name, parts)
    refuse = LoadError(f"the file calls {name!r}, which is not an allowed torch operation; only torch.*, "
                       f"torch.Tensor.*, torch.nn.functional.*, torch.special/linalg/fft.* operations and a few "
                       f"of operator.* and math.* can be loaded")
    if not all(p.isidentifier() for p in parts) or parts[-1] in _DENY:
        raise refuse
    head, attr = ".".join(parts[:-1]), parts[-1]
    if head == "operator" and attr in _OPERATOR:
        return getattr(operator, attr)
    if head == "math" and attr in _MATH:
        return getattr(math, attr)
    if head == "torch.Tensor":
        if attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
            raise refuse
        obj = getattr(torch.Tensor, attr, None)
        if isinstance(obj, types.GetSetDescriptorType):
            return obj.__get__
        if isinstance(obj, property) and obj.fget is not None:
            return obj.__get__
        if isinstance(obj, (types.MethodDescriptorType, types.WrapperDescriptorType, types.FunctionType,
                            types.BuiltinFunctionType)):
            return obj
        raise refuse
    ns = _NAMESPACES.get(head)
    if ns is None or attr.startswith("_"):
        raise refuse
    obj = getattr(ns, attr, None)
    if isinstance(obj, types.BuiltinFunctionType) and any(getattr(a, obj.__name__, None) is obj for a in _ATEN):
        return obj
    if isinstance(obj, types.FunctionType) and (obj.__module__ or "").startswith(_OP_MODULES):
        return obj
    raise refuse


def _resolve_aten(name: str, parts: list[str]):
    """`torch.ops.aten.<op>[.<overload>]` for the ATen operators that have symbolic rules."""
    from ..tracing.meta.aten import SAME_AS_TORCH, OWN_RULES
    op, overload = parts[3], (parts[4] if len(parts) == 5 else None)
    if op not in SAME_AS_TORCH + OWN_RULES or not all(p.isidentifier() for p in parts) or \
            (overload is not None and (overload.startswith("_") or "out" in overload)):
        raise LoadError(f"the file calls {name!r}; of torch.ops.aten only the operators dynashape has rules for "
                        f"can be loaded")
    packet = getattr(torch.ops.aten, op, None)
    target = packet if overload is None or packet is None else getattr(packet, overload, None)
    if target is None:
        raise LoadError(f"the file calls {name!r}, which this torch does not have")
    return target


def _resolve_custom(name: str, parts: list[str]):
    """`torch.ops.<ns>.<op>.<overload>`: a custom operator this process registered with
    torch.library, with its fake; looked up by name, never imported."""
    ns, op, overload = parts[2:]
    qualname = f"{ns}::{op}" + ("" if overload == "default" else f".{overload}")
    target = None
    if all(p.isidentifier() and not p.startswith("_") for p in parts[2:]):
        try:  # raises for an operator nobody registered; a fake registers a Meta kernel
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
                target = getattr(getattr(getattr(torch.ops, ns), op), overload)
        except (RuntimeError, AttributeError):
            target = None
    if target is None or custom_overload(target) is not target or python_fake(target) is None:
        raise LoadError(f"the file calls {name!r}, a custom operator this process has not registered with a fake: "
                        f"import the module that defines it (torch.library.custom_op and register_fake) before "
                        f"ds.load")
    return target


def _same_target(a, b) -> bool:
    if a is b:
        return True
    sa, sb = getattr(a, "__self__", None), getattr(b, "__self__", None)  # property getters: fresh wrappers
    return sa is not None and sa is sb and getattr(a, "__name__", 1) == getattr(b, "__name__", 2)


def target_label(node: Node) -> str:
    """The qualified name a node's target is saved under (checked to load back as the same callable)."""
    name = target_name(node.target)
    if name.startswith("_operator."):  # builtins of `operator` live in the C module `_operator`
        name = name[1:]
    try:
        ok = _same_target(resolve_target(name), node.target)
    except LoadError:
        ok = False
    if not ok:
        raise SaveError(f"node %{node.name} calls {name}, which cannot be saved: only torch operations "
                        f"(torch.*, torch.Tensor.*, torch.nn.functional.*, ...) can be loaded back")
    return name


# ============================================================================ expressions
_FUNCS = {
    "Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt, "Ge": sympy.Ge,
    "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not, "Max": sympy.Max, "Min": sympy.Min, "Abs": sympy.Abs,
    "FloorDiv": FloorDiv, "CleanDiv": CleanDiv, "Mod": Mod, "IntTrueDiv": IntTrueDiv, "ToFloat": ToFloat,
    "FloorToInt": FloorToInt, "CeilToInt": CeilToInt, "TruncToInt": TruncToInt,
    **{f.__name__: f for f in FLOAT_OPS.values()}, **{f.__name__: f for f in MATH_CALLS.values()},
}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.BitAnd: sympy.And, ast.BitOr: sympy.Or}
_CMPS = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge, ast.Eq: sympy.Eq,
         ast.NotEq: sympy.Ne}
_SYMBOL_NAME = re.compile(r"(s|u|zf|zuf)\d{1,9}")
_ASSUMPTIONS = {"size": dict(integer=True, nonnegative=True), "int": dict(integer=True), "float": dict(real=True)}


def symbol_kind(sym: sympy.Symbol) -> str:
    if sym.is_integer:
        return "size" if sym.is_nonnegative else "int"
    return "float"


def make_symbols(table) -> dict[str, sympy.Symbol]:
    if not isinstance(table, dict):
        raise LoadError("the symbol table is not a mapping")
    out = {}
    for name, kind in table.items():
        if not isinstance(name, str) or not _SYMBOL_NAME.fullmatch(name) or kind not in _ASSUMPTIONS:
            raise LoadError(f"bad symbol {name!r:.40} of kind {kind!r:.20}")
        out[name] = sympy.Symbol(name, **_ASSUMPTIONS[kind])
    return out


MAX_EXPR_CHARS = 10_000  # the longest printed expression read
MAX_DEGREE = 64  # the highest polynomial degree an expression may reach (shape formulas are low-degree)
MAX_BITS = 512  # the largest magnitude, in bits, of any number an expression may compute
MAX_DEPTH = 100  # the deepest nesting of an expression


def parse_expr(text, symbols: dict[str, sympy.Symbol]) -> sympy.Basic:
    """A sympy expression from its printed form, reading only arithmetic, comparisons, the
    shape functions and the given symbols (no evaluation of Python code).

    Before sympy builds anything, the reader bounds what it would cost: the nesting depth, the
    degree in the symbols and the size of every number (`((9**64)**64)**64` is refused, not
    computed), so any expression is read in milliseconds.
    """
    if not isinstance(text, str) or len(text) > MAX_EXPR_CHARS:
        raise LoadError(f"a symbolic expression must be a (short) string, got {text!r:.60}")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise LoadError(f"cannot read the expression {text!r:.80}") from None

    def too_big(what):
        return LoadError(f"{what} in {text!r:.80}: a saved shape expression never needs that "
                         f"(limits: degree {MAX_DEGREE}, numbers of {MAX_BITS} bits, nesting {MAX_DEPTH})")

    def bits(v) -> float:  # log2 of the magnitude of a sympy number (numerator and denominator)
        if v.is_Rational:
            return max(abs(int(v.p)).bit_length(), abs(int(v.q)).bit_length())
        if v.is_Float:
            f = abs(float(v))
            return math.log2(f) if f > 1 else 0
        return 0

    def conv(n, depth):
        """(expression, degree bound, bits bound of its numbers)."""
        if depth > MAX_DEPTH:
            raise too_big("an expression nested too deeply")
        d = depth + 1
        if isinstance(n, ast.Constant) and type(n.value) in (int, float, bool):
            if n.value is True or n.value is False:
                return (sympy.true if n.value else sympy.false), 0, 1
            if type(n.value) is int and abs(n.value).bit_length() > MAX_BITS:
                raise too_big("a number too large")
            v = sympy.sympify(n.value)
            return v, 0, bits(v)
        if isinstance(n, ast.Name):
            if n.id in symbols:
                return symbols[n.id], 1, 0
            if n.id == "oo":
                return sympy.oo, 0, 0
            raise LoadError(f"unknown symbol {n.id!r} in {text!r:.80}")
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            (left, dl, bl), (right, dr, br) = conv(n.left, d), conv(n.right, d)
            if isinstance(n.op, ast.Pow):
                if right.is_Number and abs(right) > 64:
                    raise LoadError(f"an exponent out of range in {text!r:.80}")
                if right.is_Number:
                    k = abs(float(right))
                    deg, nbits = dl * math.ceil(k), bl * k
                else:  # `2**s0`: nothing is computed at load; the value is checked when evaluated
                    deg, nbits = max(dl, dr), max(bl, br)
            elif isinstance(n.op, (ast.Mult, ast.Div)):
                deg, nbits = dl + dr, bl + br
            else:
                deg, nbits = max(dl, dr), max(bl, br) + 1
            if deg > MAX_DEGREE:
                raise too_big("a degree too high")
            if nbits > MAX_BITS:
                raise too_big("a number too large")
            return _BINOPS[type(n.op)](left, right), deg, nbits
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Invert, ast.Not)):
            v, dv, bv = conv(n.operand, d)
            return (-v if isinstance(n.op, ast.USub) else v if isinstance(n.op, ast.UAdd) else sympy.Not(v)), dv, bv
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _CMPS:
            (left, dl, bl), (right, dr, br) = conv(n.left, d), conv(n.comparators[0], d)
            return _CMPS[type(n.ops[0])](left, right), max(dl, dr), max(bl, br)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _FUNCS and not n.keywords:
            if len(n.args) > 64:
                raise too_big("a call with too many arguments")
            parts = [conv(a, d) for a in n.args]
            deg, nbits = max((p[1] for p in parts), default=0), max((p[2] for p in parts), default=0) + 1
            return _FUNCS[n.func.id](*[p[0] for p in parts]), deg, nbits
        raise LoadError(f"unexpected {type(n).__name__} in the expression {text!r:.80}")

    try:
        return conv(tree, 0)[0]
    except LoadError:
        raise
    except Exception as e:  # sympy refusing the arguments (e.g. FloorDiv of a float)
        raise LoadError(f"cannot build the expression {text!r:.80}: {e}") from None
