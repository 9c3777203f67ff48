"""The torch-facing SymInt/SymFloat/SymBool: our engine's types that also pass as torch's.

They subclass both the engine's classes and `torch.SymInt` etc., so torch's
argument parser accepts them (`torch.zeros(n, 3)`, `x.view(b, -1)`) and they
reach the TracingMode untouched. `torch.SymInt` defines many dunders that call
methods on torch's own node type; every one of them is overridden here so none
reaches our node.
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch (our own frames get its answer anyway)
import torch

from ..symbolic import symtypes
from ..symbolic.symtypes import SymBase, wrap_node


def _unsupported(name):
    def fn(self, *a, **k):
        raise TypeError(f"{name} is not supported on a symbolic value ({self!r})")
    fn.__name__ = name
    return fn


def _passthrough_ops(cls_name):
    """Dunders of torch.Sym* that we do not model: fail clearly instead of calling torch's node."""
    names = ["__pow_by_natural__", "__rpow_by_natural__", "__int_truediv__", "__rint_truediv__",
             "__int_floordiv__", "__rint_floordiv__", "__float_pow__", "__rfloat_pow__",
             "__float_truediv__", "__rfloat_truediv__", "__sym_ite__", "_sympy_", "as_integer_ratio",
             "conjugate", "bit_length", "is_integer", "node_type"]
    return {n: _unsupported(f"{cls_name}.{n}") for n in names}


def _math_fns():
    """`torch._sym_sqrt(n)`-style calls land on `__sym_<fn>__`: a symbolic float (tracing/global_state.py
    sends `math.sqrt(n)` here too)."""
    from ..symbolic.functions import MATH_CALLS
    return {f"__sym_{fn}__": (lambda fn: lambda self: wrap_node(self.node.unary(fn)))(fn) for fn in MATH_CALLS}


def _value(self):
    """The example's value, with a guard (specialization), as eager would print it."""
    if isinstance(self, symtypes.SymBool):
        return bool(self)
    return int(self) if isinstance(self, symtypes.SymInt) else float(self)


def _from_dynashape() -> bool:
    """Whether str()/format() was called by dynashape itself (or by logging, formatting our messages)."""
    import sys
    name = sys._getframe(2).f_globals.get("__name__", "") or ""
    return name.startswith("dynashape") or name == "logging" or name.startswith("logging.")


def _format(self, spec):
    if _from_dynashape():  # our own messages and printing keep the symbolic text
        return format(_value(self), spec) if spec else SymBase.__str__(self)
    return format(_value(self), spec)


def _str(self):
    # str()/f-strings in user or library code give the number, as eager would (guarded: the text
    # depends on the value); dynashape's own messages keep the symbolic `s0`
    return SymBase.__str__(self) if _from_dynashape() else str(_value(self))


def _repr(self):
    # as str(): `repr(n)`, `str([n, 3])` and `f"{tuple(x.shape)}"` (containers show their items' repr)
    # gave the user's code the trace's `Sym(s0)`
    return SymBase.__repr__(self) if _from_dynashape() else repr(_value(self))


_common = dict(
    __hash__=None,
    __format__=_format,
    __repr__=_repr,
    __str__=_str,
    **_math_fns(),
)


class SymInt(symtypes.SymInt, torch.SymInt):
    """An int-like symbolic value torch accepts wherever it takes a SymInt."""

    def __init__(self, node):
        self.node = node

    locals().update(_passthrough_ops("SymInt"))
    locals().update(_common)
    __abs__ = symtypes.SymInt.__abs__
    __floor__ = symtypes.SymInt.__floor__
    __ceil__ = symtypes.SymInt.__ceil__
    __trunc__ = symtypes.SymInt.__trunc__
    __round__ = symtypes.SymInt.__round__
    __pos__ = symtypes.SymInt.__pos__
    for _n in ("__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rlshift__",
               "__rshift__", "__rrshift__"):
        locals()[_n] = getattr(symtypes.SymInt, _n)
    del _n


class SymFloat(symtypes.SymFloat, torch.SymFloat):
    def __init__(self, node):
        self.node = node

    locals().update(_passthrough_ops("SymFloat"))
    locals().update(_common)
    __abs__ = symtypes.SymFloat.__abs__
    __floor__ = symtypes.SymFloat.__floor__
    __ceil__ = symtypes.SymFloat.__ceil__
    __trunc__ = symtypes.SymFloat.__trunc__
    __pos__ = symtypes.SymFloat.__pos__

    def __round__(self, ndigits=None):
        return round(float(self), ndigits)

    def is_integer(self):
        return float(self).is_integer()


class SymBool(symtypes.SymBool, torch.SymBool):
    def __init__(self, node):
        self.node = node

    locals().update(_passthrough_ops("SymBool"))
    locals().update(_common)
    __and__ = symtypes.SymBool.__and__
    __or__ = symtypes.SymBool.__or__
    __rand__ = symtypes.SymBool.__rand__
    __ror__ = symtypes.SymBool.__ror__
    __invert__ = symtypes.SymBool.__invert__


TORCH_SYM_TYPES = {int: SymInt, float: SymFloat, bool: SymBool}


def install(env) -> None:
    """Make `env` produce the torch-facing types."""
    env.sym_types = TORCH_SYM_TYPES


def hint_of(x):
    """A symbolic value's example value (no guard); plain values pass through."""
    if isinstance(x, SymBase):
        h = x.node.hint
        if h is None:
            h = x.node.env.hint(x.node.expr)
        if h is None:
            raise TypeError(f"{x!r} has no example value (it depends on data)")
        return h
    return x


def meta_value(x):
    """A value to size meta tensors with: the hint, or an unbacked symbol's fallback."""
    if isinstance(x, SymBase):
        h = x.node.hint
        if h is None:
            h = x.node.env.size_hint(x.node.expr)
        return _PYTYPE_OF.get(x.node.pytype, lambda v: v)(h)  # a float stays a float: torch.tensor([f]) is f32
    return x


_PYTYPE_OF = {float: float, bool: bool, int: int}


__all__ = ["SymInt", "SymFloat", "SymBool", "install", "hint_of", "meta_value", "wrap_node"]
