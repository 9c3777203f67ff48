"""SymNode: a sympy expression, its hint and its ShapeEnv; the arithmetic of symbolic values.

SymNode is type-erased (int, float and bool share it); the user-visible
SymInt/SymFloat/SymBool in `symtypes.py` wrap one each.
"""
from __future__ import annotations

import math
import operator

import sympy

from .functions import (FLOAT_OPS, MATH_CALLS, BitwiseAnd, BitwiseOr, BitwiseXor, CeilToInt, FloorDiv, FloorToInt,
                        IntTrueDiv, LShift, Max, Min, Mod, RShift, ToFloat, TruncToInt)
from .printer import sympy_str


class SymNode:
    __slots__ = ("expr", "env", "pytype", "hint")

    def __init__(self, expr, env, pytype: type, hint):
        self.expr = expr  # sympy expression over the env's symbols
        self.env = env  # the ShapeEnv deciding conditions on it
        self.pytype = pytype  # int, float or bool
        self.hint = hint  # value on the example inputs; None when unbacked

    def __str__(self) -> str:
        return sympy_str(self.expr)

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def has_hint(self) -> bool:
        return self.hint is not None

    # ----------------------------------------------------------- building
    def wrap(self, value) -> "SymNode":
        """A constant or another node as a SymNode of this env."""
        if isinstance(value, SymNode):
            return value
        if isinstance(value, bool):
            return SymNode(sympy.true if value else sympy.false, self.env, bool, value)
        if isinstance(value, int):
            return SymNode(sympy.Integer(value), self.env, int, value)
        if isinstance(value, float):
            return SymNode(sympy.Float(value), self.env, float, value)
        raise TypeError(f"cannot combine a symbolic value with {type(value).__name__}")

    def _make(self, expr, pytype, hint) -> "SymNode":
        return SymNode(self.env.simplify(expr), self.env, pytype, hint)

    def binary(self, op: str, other) -> "SymNode":
        other = self.wrap(other)
        a, b = self.expr, other.expr
        ha, hb = self.hint, other.hint
        both = None if ha is None or hb is None else (ha, hb)
        num = float if float in (self.pytype, other.pytype) else int
        if op in _REL:
            return self._make(_REL[op](a, b, evaluate=False), bool, None if both is None else _PYOP[op](*both))
        if op in ("and", "or"):
            expr = sympy.And(a, b) if op == "and" else sympy.Or(a, b)
            return self._make(expr, bool, None if both is None else _PYOP[op](*both))
        if op in _SIGNED_ZERO and (_float_zero(self) and not b.is_Number or _float_zero(other) and not a.is_Number):
            # sympy has no -0.0 (`s0 * -0.0` would be 0): the value decides, in Python, as eager computes it
            if ha is not None and hb is not None:
                (other if _float_zero(self) else self).specialize()
                return self.wrap(_FLOAT_PYOP[op](ha, hb) if op in _FLOAT_PYOP else _PYOP[op](ha, hb))
        if op in _DIVIDES and not b.is_Number:
            self._divisor_nonzero(b, hb)
        if num is float and op in FLOAT_OPS:  # in the program's order, rounded as Python rounds
            return self._make(FLOAT_OPS[op](a, b), float, None if both is None else _FLOAT_PYOP[op](*both))
        if op == "truediv":
            expr = IntTrueDiv(a, b) if num is int else a / b
            return self._make(expr, float, None if both is None else ha / hb)
        if op == "floordiv":
            expr = FloorDiv(a, b) if num is int else FloorToInt(a / b)
            return self._make(expr, num, None if both is None else ha // hb)
        if op == "mod":
            if num is float:
                expr = a - b * FloorToInt(a / b)
            else:
                expr = Mod(a, b)
            return self._make(expr, num, None if both is None else ha % hb)
        if op == "pow":
            expr = sympy.Pow(a, b)
            out = float if num is float or (other.pytype is int and hb is not None and hb < 0) else int
            return self._make(expr, out, None if both is None else ha ** hb)
        if op in ("min", "max"):
            expr = (Min if op == "min" else Max)(a, b)
            return self._make(expr, num, None if both is None else (min if op == "min" else max)(ha, hb))
        expr = _SYMOP[op](a, b)
        return self._make(expr, num, None if both is None else _PYOP[op](*both))

    def specialize(self) -> None:
        """Specialize to the example's value (an equality guard)."""
        self.env.evaluate(self.expr, self.hint, speculate=True)

    def _divisor_nonzero(self, b, hb) -> None:
        """Python raises ZeroDivisionError for `a // 0`, `a % 0`, `a / 0`: the trace divided by a
        nonzero value, which a guard must keep unless it is known (a size traced >= 2). Without one,
        `x.numel() // x.size(0)` simplified to the other size answered a size-0 call."""
        if hb == 0:
            return  # the hint's own division raises, as eager does
        from .userloc import user_location
        self.env.evaluate(sympy.Ne(b, 0), None if hb is None else True, speculate=True, location=user_location(3))

    def unary(self, op: str) -> "SymNode":
        a, h = self.expr, self.hint
        if op == "neg":
            return self._make(-a, self.pytype, None if h is None else -h)
        if op == "abs":
            return self._make(sympy.Abs(a), self.pytype, None if h is None else abs(h))
        if op == "not":
            return self._make(sympy.Not(a), bool, None if h is None else not h)
        if op == "float":
            return self._make(ToFloat(a) if self.pytype is not float else a, float,
                              None if h is None else float(h))
        if op in MATH_CALLS:  # the hint first: math.sqrt(-1.0) raises here as in eager
            hint = None if h is None else getattr(math, op)(h)
            return self._make(MATH_CALLS[op](a), float, hint)
        if op in ("trunc", "floor", "ceil"):
            if self.pytype is int:
                return self
            fn = {"trunc": TruncToInt, "floor": FloorToInt, "ceil": CeilToInt}[op]
            py = {"trunc": math.trunc, "floor": math.floor, "ceil": math.ceil}[op]
            return self._make(fn(a), int, None if h is None else py(h))
        raise ValueError(op)

    # ----------------------------------------------------------- deciding
    def bool_(self) -> bool:
        if self.pytype in (int, float):  # `if n:` asks n != 0 (not its value: no guard on it)
            return bool(self.env.evaluate(sympy.Ne(self.expr, 0), None if self.hint is None else self.hint != 0,
                                          speculate=True))
        return bool(self.env.evaluate(self.expr, self.hint, speculate=True))

    def int_(self) -> int:
        return int(self.env.guard_int(self.expr, self.hint, speculate=True))

    def float_(self) -> float:
        return float(self.env.evaluate(self.expr, self.hint, speculate=True))

    def guard_size_oblivious(self, file=None, line=None) -> bool:
        return bool(self.env.evaluate_size_oblivious(self.expr, self.hint))

    # torch's own helpers (torch._check, torch.sym_*) call these on a symbolic value's node
    def expect_true(self, file=None, line=None) -> bool:
        """A framework assertion: decided (and guarded) by the hint; a runtime assert when unbacked."""
        if self.hint is not None or self.env.hint(self.expr) is not None:
            return self.bool_()
        return self.env.expect_true(self.expr)

    def guard_bool(self, file=None, line=None) -> bool:
        return self.bool_()

    def guard_int(self, file=None, line=None) -> int:
        return self.int_()

    def guard_float(self, file=None, line=None) -> float:
        return self.float_()

    def expect_size(self, file=None, line=None) -> bool:
        return self.env.expect_true(self.expr >= 0)

    def is_nested_int(self) -> bool:
        return False

    def is_symbolic(self) -> bool:
        return True

    def require_hint(self):
        if self.hint is None:
            raise self.env._data_dependent(self.expr, None)
        return self.hint

    def statically_known_true(self) -> bool:
        return self.env.statically_known_true(self.expr)

    def constant(self):
        """The Python value when the expression is a constant, else None."""
        e = self.expr
        if e is sympy.true:
            return True
        if e is sympy.false:
            return False
        if e.is_Number:
            if self.pytype is float and type(self.hint) is float and self.hint == 0.0 == e:
                return self.hint  # (-0.0: sympy's zero has no sign)
            return int(e) if self.pytype is int else float(e) if self.pytype is float else e
        return None


_DIVIDES = frozenset(("truediv", "floordiv", "mod"))
_SIGNED_ZERO = frozenset(("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"))


def _float_zero(n) -> bool:
    """A float constant 0.0 or -0.0 (its hint keeps the sign the expression lost)."""
    return n.pytype is float and n.expr.is_Number and n.hint == 0.0
_FLOAT_PYOP = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
               "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow}
_REL = {"eq": sympy.Eq, "ne": sympy.Ne, "lt": sympy.Lt, "le": sympy.Le, "gt": sympy.Gt, "ge": sympy.Ge}
_SYMOP = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "bitand": BitwiseAnd,
          "bitor": BitwiseOr, "bitxor": BitwiseXor, "lshift": LShift, "rshift": RShift}
_PYOP = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
    "and": lambda a, b: bool(a and b), "or": lambda a, b: bool(a or b),
    "bitand": operator.and_, "bitor": operator.or_, "bitxor": operator.xor, "lshift": operator.lshift,
    "rshift": operator.rshift,
}
