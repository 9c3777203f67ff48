"""Value ranges: closed intervals of ints, floats or bools, and interval
arithmetic over the functions in `functions.py`.

A symbol's range is what the engine knows about it (`s0` in `[2, int_oo]`);
`bound_sympy` pushes those ranges through a formula to answer "can this guard
be false?" without a solver.

>>> s0 = sympy.Symbol("s0", integer=True, positive=True)
>>> bound_sympy(FloorDiv(s0, 2) + 1, {s0: ValueRanges(2, 9)})
VR[2, 5]
>>> bound_sympy(sympy.Lt(Mod(s0, 8), 8), {})
VR[True, True]
"""
from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Callable, Mapping

import sympy
from sympy.logic.boolalg import BooleanAtom

from .functions import (
    BitwiseAnd, BitwiseOr, BitwiseXor, CeilToInt, FloorDiv, FloorToInt, IntTrueDiv, Mod, ToFloat, TruncToInt,
)

__all__ = ["int_oo", "ValueRanges", "ValueRangeAnalysis", "bound_sympy"]

# One infinity for ints and floats; ValueRanges.is_int says which one a bound means.
int_oo = sympy.oo

_oo, _noo, _nan = sympy.oo, -sympy.oo, sympy.nan
_true, _false = sympy.true, sympy.false
_ZERO, _ONE = sympy.S.Zero, sympy.S.One
_FZERO = sympy.Float(0.0)
_POW_BITS_LIMIT = 1 << 14  # bigger powers are bounded by oo rather than computed


def _sym(x) -> sympy.Basic:
    """A bound as a sympy number or sympy bool."""
    if isinstance(x, sympy.Basic):
        return x
    if isinstance(x, bool):
        return _true if x else _false
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float):
        return (_oo if x > 0 else _noo) if math.isinf(x) else sympy.Float(x)
    raise TypeError(f"not a number or bool: {x!r}")


def _is_inf(x) -> bool:
    return x is _oo or x is _noo


def _key(x):
    """A bound as an exact Python number: sympy's own comparisons are ~50x slower."""
    if x.is_Integer:
        return x.p
    if x is _oo:
        return math.inf
    if x is _noo:
        return -math.inf
    if x.is_Rational:
        return Fraction(x.p, x.q)
    if x._prec <= 53:
        return float(x)
    r = sympy.Rational(x)
    return Fraction(r.p, r.q)


exact = _key  # for other modules: a sympy number as an exact Python number, to compare fast


def _min(*xs):
    return min(xs, key=_key)


def _max(*xs):
    return max(xs, key=_key)


@dataclasses.dataclass(frozen=True, init=False, repr=False)
class ValueRanges:
    """The closed interval `[lo, hi]` of ints, floats or bools.

    >>> ValueRanges(2, int_oo)
    VR[2, int_oo]
    >>> 3 in ValueRanges(0, 4)
    True
    """

    lo: sympy.Basic  # lower bound: sympy number, -oo, or sympy.false/true
    hi: sympy.Basic  # upper bound: sympy number, oo, or sympy.false/true
    is_bool: bool  # a range of truth values, lo/hi are sympy.false/true
    is_int: bool  # a range of integers; infinite bounds then mean int_oo

    def __init__(self, lo, hi, is_int: bool | None = None):
        lo, hi = _sym(lo), _sym(hi)
        is_bool = isinstance(lo, BooleanAtom)
        if is_bool != isinstance(hi, BooleanAtom):
            raise TypeError(f"mixed bool and number bounds: [{lo}, {hi}]")
        if is_bool:
            if lo is _true and hi is _false:
                raise ValueError("empty range [True, False]")
            is_int = False
        else:
            if not (lo.is_Number and hi.is_Number) or lo is _nan or hi is _nan:
                raise TypeError(f"bounds must be numbers: [{lo}, {hi}]")
            if is_int is None:
                is_int = (lo.is_Integer or lo is _noo) and (hi.is_Integer or hi is _oo)
            elif is_int:
                lo, hi = _ceil(lo), _floor(hi)  # an int range only holds the ints inside
            if _key(lo) > _key(hi):
                raise ValueError(f"empty range [{lo}, {hi}]")
        _init(self, lo, hi, is_bool, bool(is_int))

    @staticmethod
    def unknown() -> ValueRanges:
        """All floats: `[-oo, oo]`."""
        return _UNKNOWN

    @staticmethod
    def unknown_int() -> ValueRanges:
        """All ints: `[-int_oo, int_oo]`."""
        return _UNKNOWN_INT

    @staticmethod
    def unknown_bool() -> ValueRanges:
        """Both truth values: `[False, True]`."""
        return _UNKNOWN_BOOL

    @staticmethod
    def wrap(x) -> ValueRanges:
        """The singleton range of a number or bool (a range is returned as is)."""
        if isinstance(x, ValueRanges):
            return x
        x = _sym(x)
        if isinstance(x, BooleanAtom):
            return _BOOL_TRUE if x is _true else _BOOL_FALSE
        return _make(x, x, x.is_Integer)

    def is_singleton(self) -> bool:
        """Whether the range holds exactly one value."""
        return self.lo == self.hi

    def __contains__(self, x) -> bool:
        if self.is_bool:
            v = bool(x)
            return (not v or self.hi is _true) and (v or self.lo is _false)
        x = _sym(int(bool(x)) if isinstance(x, (bool, BooleanAtom)) else x)  # True is 1, as in Python
        if x is _nan:
            return False
        k = _key(x)
        return _key(self.lo) <= k <= _key(self.hi)

    def issubset(self, other: ValueRanges) -> bool:
        """Whether every value in self is in other."""
        if self.is_bool:
            return _bint(other.lo) <= _bint(self.lo) and _bint(self.hi) <= _bint(other.hi)
        return _key(other.lo) <= _key(self.lo) and _key(self.hi) <= _key(other.hi)

    def __and__(self, other: ValueRanges) -> ValueRanges:
        """Intersection; raises ValueError when it is empty."""
        _same_kind(self, other)
        if self.is_bool:
            lo, hi = _bmax(self.lo, other.lo), _bmin(self.hi, other.hi)
            if lo is _true and hi is _false:
                raise ValueError(f"disjoint ranges {self} and {other}")
            return _make(lo, hi, False, True)
        is_int = self.is_int or other.is_int
        lo, hi = _max(self.lo, other.lo), _min(self.hi, other.hi)
        if is_int:
            lo, hi = _ceil(lo), _floor(hi)
        if _key(lo) > _key(hi):
            raise ValueError(f"disjoint ranges {self} and {other}")
        return _make(lo, hi, is_int)

    def __or__(self, other: ValueRanges) -> ValueRanges:
        """Hull: the smallest range holding both."""
        _same_kind(self, other)
        if self.is_bool:
            return _make(_bmin(self.lo, other.lo), _bmax(self.hi, other.hi), False, True)
        return _make(_min(self.lo, other.lo), _max(self.hi, other.hi), self.is_int and other.is_int)

    def __repr__(self) -> str:
        return f"VR[{_fmt(self.lo, self.is_int)}, {_fmt(self.hi, self.is_int)}]"

    __str__ = __repr__


def _init(vr: ValueRanges, lo, hi, is_bool: bool, is_int: bool) -> None:
    object.__setattr__(vr, "lo", lo)
    object.__setattr__(vr, "hi", hi)
    object.__setattr__(vr, "is_bool", is_bool)
    object.__setattr__(vr, "is_int", is_int)


def _make(lo, hi, is_int: bool, is_bool: bool = False) -> ValueRanges:
    # The arithmetic below builds ranges it knows are valid; skip __init__'s checks.
    vr = object.__new__(ValueRanges)
    _init(vr, lo, hi, is_bool, is_int)
    return vr


def _same_kind(a: ValueRanges, b: ValueRanges) -> None:
    if a.is_bool != b.is_bool:
        raise TypeError(f"cannot combine bool and numeric ranges {a} and {b}")


def _fmt(x, is_int: bool) -> str:
    if x is _oo:
        return "int_oo" if is_int else "oo"
    if x is _noo:
        return "-int_oo" if is_int else "-oo"
    if isinstance(x, BooleanAtom):
        return str(bool(x))
    if x.is_Float:
        return repr(float(x))
    return str(x)


def _bint(b) -> int:
    return 1 if b is _true else 0


def _bmin(a, b):
    return _false if (a is _false or b is _false) else _true


def _bmax(a, b):
    return _true if (a is _true or b is _true) else _false


def _floor(x):
    return x if (x.is_Integer or _is_inf(x)) else x.floor()


def _ceil(x):
    return x if (x.is_Integer or _is_inf(x)) else x.ceiling()


def _trunc(x):
    return _floor(x) if _key(x) >= 0 else _ceil(x)  # toward zero, still monotone


def _to_float(x):
    if _is_inf(x) or x.is_Float:
        return x
    try:
        return sympy.Float(float(x))
    except OverflowError:
        return _oo if _key(x) > 0 else _noo


_UNKNOWN = _make(_noo, _oo, False)
_UNKNOWN_INT = _make(_noo, _oo, True)
_UNKNOWN_BOOL = _make(_false, _true, False, True)
_BOOL_TRUE = _make(_true, _true, False, True)
_BOOL_FALSE = _make(_false, _false, False, True)
_NONNEG_INT = _make(_ZERO, _oo, True)


def _unknown(is_int: bool) -> ValueRanges:
    return _UNKNOWN_INT if is_int else _UNKNOWN


def _w(x) -> ValueRanges:
    return x if type(x) is ValueRanges else ValueRanges.wrap(x)


def _hull(values: list, is_int: bool) -> ValueRanges:
    return _make(min(values, key=_key), max(values, key=_key), is_int)


def _mul_bound(x, y):
    # A bound of 0 times an unbounded side is still 0: 0 * n == 0 for every finite n.
    if x.is_zero or y.is_zero:
        return _ZERO
    return x * y


def _floordiv_bound(x, y):
    """floor(x / y) at a corner of the box, y != 0; None when both are infinite."""
    if _is_inf(y):
        if _is_inf(x):
            return None
        # x / +-oo tends to 0 from the side of sign(x*y); floor of a tiny negative is -1
        return _ZERO if (x.is_zero or (_key(x) > 0) == (_key(y) > 0)) else sympy.S.NegativeOne
    if _is_inf(x):
        return x if _key(y) > 0 else -x
    return sympy.Integer(int(x) // int(y))


def _truediv_bound(x, y):
    """x / y as Python floats would give it, at a corner; None when both are infinite."""
    if _is_inf(y):
        return None if _is_inf(x) else _FZERO
    if _is_inf(x):
        return x if _key(y) > 0 else -x
    if x.is_Integer and y.is_Integer:
        try:
            return sympy.Float(int(x) / int(y))  # Python rounds int/int correctly
        except OverflowError:
            pass
    return _to_float(sympy.Rational(x) / sympy.Rational(y))


def _corners(fn, a: ValueRanges, b: ValueRanges, is_int: bool) -> ValueRanges:
    vals = [v for v in (fn(a.lo, b.lo), fn(a.lo, b.hi), fn(a.hi, b.lo), fn(a.hi, b.hi)) if v is not None]
    if len(vals) < 4 and _is_inf(b.lo) and _is_inf(b.hi):
        return _unknown(is_int)  # an infinite divisor at both ends leaves nothing to anchor on
    return _hull(vals, is_int)


def _pow_too_big(x, n) -> bool:
    if not (x.is_Integer and n.is_Integer) or abs(int(x)) <= 1:
        return False
    return int(x).bit_length() * int(n) > _POW_BITS_LIMIT


def _pow_bound(x, n):
    """x ** n for a bound x and a natural bound n."""
    if n.is_zero:
        return _ONE
    if n is _oo:
        if x.is_zero or x == 1:
            return x
        if _key(x) > 1:
            return _oo
        return _ZERO if _key(x) > 0 else None  # x < 0: the sign alternates, no single limit
    return x**n


class ValueRangeAnalysis:
    """Interval rules, one static method per operation.

    Each takes ranges (or plain numbers, which are wrapped) and returns a
    range that holds every result of the operation on values in its inputs.

    >>> ValueRangeAnalysis.floordiv(ValueRanges(0, 10), ValueRanges.wrap(3))
    VR[0, 3]
    """

    @staticmethod
    def add(a, b) -> ValueRanges:
        a, b = _w(a), _w(b)
        lo, hi = a.lo + b.lo, a.hi + b.hi
        is_int = a.is_int and b.is_int
        if lo is _nan or hi is _nan:  # oo + -oo only arises from degenerate infinite singletons
            return _unknown(is_int)
        return _make(lo, hi, is_int)

    @staticmethod
    def neg(a) -> ValueRanges:
        a = _w(a)
        return _make(-a.hi, -a.lo, a.is_int)

    @staticmethod
    def sub(a, b) -> ValueRanges:
        return ValueRangeAnalysis.add(a, ValueRangeAnalysis.neg(b))

    @staticmethod
    def mul(a, b) -> ValueRanges:
        a, b = _w(a), _w(b)
        if a.is_bool and b.is_bool:
            return ValueRangeAnalysis.and_(a, b)
        return _corners(_mul_bound, a, b, a.is_int and b.is_int)

    @staticmethod
    def floordiv(a, b) -> ValueRanges:
        """Python `a // b` on ints; unknown when the divisor may be 0."""
        a, b = _w(a), _w(b)
        if not (a.is_int and b.is_int):
            return _UNKNOWN  # FloorDiv is int-only; float // is not modelled
        if _key(b.lo) <= 0 <= _key(b.hi):
            return _UNKNOWN_INT
        return _corners(_floordiv_bound, a, b, True)

    @staticmethod
    def bitwise_and(a, b) -> ValueRanges:
        """`a & b`: within [0, min(hi)] when both are >= 0; unknown otherwise."""
        a, b = _w(a), _w(b)
        if a.is_singleton() and b.is_singleton() and not _is_inf(a.lo) and not _is_inf(b.lo):
            return ValueRanges.wrap(int(a.lo) & int(b.lo))
        if _key(a.lo) >= 0 and _key(b.lo) >= 0:
            return ValueRanges(0, b.hi if _key(b.hi) < _key(a.hi) else a.hi)
        if _key(a.lo) >= 0 or _key(b.lo) >= 0:  # masking by a non-negative value stays in [0, it]
            nonneg = a if _key(a.lo) >= 0 else b
            return ValueRanges(0, nonneg.hi)
        return ValueRanges(-int_oo, int_oo)

    @staticmethod
    def bitwise_or_xor(a, b) -> ValueRanges:
        """`a | b`, `a ^ b`: within [0, 2**bits - 1] when both are >= 0 and bounded."""
        a, b = _w(a), _w(b)
        if _key(a.lo) >= 0 and _key(b.lo) >= 0:
            if _is_inf(a.hi) or _is_inf(b.hi):
                return ValueRanges(0, int_oo)
            return ValueRanges(0, 2 ** max(int(a.hi), int(b.hi)).bit_length() - 1)
        return ValueRanges(-int_oo, int_oo)

    @staticmethod
    def mod(a, b) -> ValueRanges:
        """Python `a % b`: the result takes the sign of b and |result| < |b|."""
        a, b = _w(a), _w(b)
        is_int = a.is_int and b.is_int
        exact = a.is_singleton() and b.is_singleton() and not _is_inf(a.lo) and not _is_inf(b.lo)
        if is_int and exact and b.lo != 0:
            return ValueRanges.wrap(int(a.lo) % int(b.lo))
        step = _ONE if is_int else _ZERO  # ints stay strictly inside |b|; floats may round onto it
        alo, ahi, blo, bhi = _key(a.lo), _key(a.hi), _key(b.lo), _key(b.hi)
        if blo > 0:
            if alo >= 0 and ahi < blo:
                return _make(a.lo, a.hi, is_int)  # already reduced
            if is_int and b.is_singleton() and not _is_inf(a.lo) and not _is_inf(a.hi) \
                    and int(a.lo) // int(b.lo) == int(a.hi) // int(b.lo):
                c = int(b.lo)  # the dividend range lies within one period: shift it down
                return _make(sympy.Integer(int(a.lo) % c), sympy.Integer(int(a.hi) % c), True)
            hi = b.hi - step
            if alo >= 0:
                hi = _min(hi, a.hi)
            return _make(_ZERO, hi, is_int)
        if bhi < 0:
            if ahi <= 0 and alo > bhi:
                return _make(a.lo, a.hi, is_int)
            lo = b.lo + step
            if ahi <= 0:
                lo = _max(lo, a.lo)
            return _make(lo, _ZERO, is_int)
        return _make(_min(b.lo + step, _ZERO), _max(b.hi - step, _ZERO), is_int)

    @staticmethod
    def truediv(a, b) -> ValueRanges:
        """Python `a / b`: a float range; unknown when the divisor may be 0."""
        a, b = _w(a), _w(b)
        if _key(b.lo) <= 0 <= _key(b.hi):
            return _UNKNOWN
        return _corners(_truediv_bound, a, b, False)

    @staticmethod
    def pow(a, b) -> ValueRanges:
        """`a ** b` for a natural exponent (a negative int exponent gives a float)."""
        a, b = _w(a), _w(b)
        if not b.is_int:
            return _UNKNOWN
        if _key(b.lo) < 0:
            if b.is_singleton():
                return ValueRangeAnalysis.truediv(1, ValueRangeAnalysis.pow(a, -b.lo))
            return _UNKNOWN
        is_int = a.is_int
        if b.is_singleton():
            n = b.lo
            if n.is_zero:
                return _make(_ONE, _ONE, is_int)
            if _pow_too_big(a.lo, n) or _pow_too_big(a.hi, n):
                return _NONNEG_INT if (_key(a.lo) >= 0 and is_int) else _unknown(is_int)
            lo, hi = _pow_bound(a.lo, n), _pow_bound(a.hi, n)
            if int(n) % 2 == 1 or _key(a.lo) >= 0:
                return _make(lo, hi, is_int)
            if _key(a.hi) <= 0:
                return _make(hi, lo, is_int)
            return _make(_ZERO, _max(lo, hi), is_int)
        if _key(a.lo) >= 0:
            # x**n is monotone in each argument separately on x >= 0, n >= 0
            if any(_pow_too_big(x, b.hi) for x in (a.lo, a.hi)):
                return _make(_ZERO, _oo, is_int)
            return _corners(_pow_bound, a, b, is_int)
        if _is_inf(b.hi):
            return _unknown(is_int)
        m = _max(-a.lo, a.hi, _ONE)
        if _pow_too_big(m, b.hi):
            return _unknown(is_int)
        top = _pow_bound(m, b.hi)
        return _make(-top, top, is_int)

    @staticmethod
    def abs(a) -> ValueRanges:
        a = _w(a)
        if _key(a.lo) >= 0:
            return a
        if _key(a.hi) <= 0:
            return _make(-a.hi, -a.lo, a.is_int)
        return _make(_ZERO, _max(-a.lo, a.hi), a.is_int)

    @staticmethod
    def min(a, b) -> ValueRanges:
        a, b = _w(a), _w(b)
        return _make(_min(a.lo, b.lo), _min(a.hi, b.hi), a.is_int and b.is_int)

    @staticmethod
    def max(a, b) -> ValueRanges:
        a, b = _w(a), _w(b)
        return _make(_max(a.lo, b.lo), _max(a.hi, b.hi), a.is_int and b.is_int)

    # Monotone conversions: apply them to both ends.
    floor_to_int = staticmethod(lambda a: _monotone(_floor, a, True))
    ceil_to_int = staticmethod(lambda a: _monotone(_ceil, a, True))
    trunc_to_int = staticmethod(lambda a: _monotone(_trunc, a, True))
    to_float = staticmethod(lambda a: _monotone(_to_float, a, False))

    @staticmethod
    def lt(a, b) -> ValueRanges:
        a, b = _num(a), _num(b)
        return _decide(_key(a.hi) < _key(b.lo), _key(a.lo) >= _key(b.hi))

    @staticmethod
    def le(a, b) -> ValueRanges:
        a, b = _num(a), _num(b)
        return _decide(_key(a.hi) <= _key(b.lo), _key(a.lo) > _key(b.hi))

    @staticmethod
    def gt(a, b) -> ValueRanges:
        return ValueRangeAnalysis.lt(b, a)

    @staticmethod
    def ge(a, b) -> ValueRanges:
        return ValueRangeAnalysis.le(b, a)

    @staticmethod
    def eq(a, b) -> ValueRanges:
        a, b = _num(a), _num(b)
        disjoint = _key(a.hi) < _key(b.lo) or _key(b.hi) < _key(a.lo)
        # overlapping finite singletons are the same number
        return _decide(not disjoint and a.is_singleton() and b.is_singleton() and not _is_inf(a.lo), disjoint)

    @staticmethod
    def ne(a, b) -> ValueRanges:
        return ValueRangeAnalysis.not_(ValueRangeAnalysis.eq(a, b))

    @staticmethod
    def and_(a, b) -> ValueRanges:
        a, b = _bool(a), _bool(b)
        return _make(_bmin(a.lo, b.lo), _bmin(a.hi, b.hi), False, True)

    @staticmethod
    def or_(a, b) -> ValueRanges:
        a, b = _bool(a), _bool(b)
        return _make(_bmax(a.lo, b.lo), _bmax(a.hi, b.hi), False, True)

    @staticmethod
    def not_(a) -> ValueRanges:
        a = _bool(a)
        return _make(_false if a.hi is _true else _true, _false if a.lo is _true else _true, False, True)


def _monotone(fn: Callable, a, is_int: bool) -> ValueRanges:
    a = _w(a)
    return _make(fn(a.lo), fn(a.hi), is_int)


def _decide(true_if: bool, false_if: bool) -> ValueRanges:
    return _BOOL_TRUE if true_if else (_BOOL_FALSE if false_if else _UNKNOWN_BOOL)


def _num(x) -> ValueRanges:
    """A numeric range; a bool range compares as the ints 0/1, like Python."""
    x = _w(x)
    if x.is_bool:
        return _make(sympy.Integer(_bint(x.lo)), sympy.Integer(_bint(x.hi)), True)
    return x


def _bool(x) -> ValueRanges:
    x = _w(x)
    if not x.is_bool:
        raise TypeError(f"expected a bool range, got {x}")
    return x


# ---------------------------------------------------------------- bound_sympy

_VRA = ValueRangeAnalysis


def _fold(fn: Callable, args: list[ValueRanges]) -> ValueRanges:
    out = args[0]
    for r in args[1:]:
        out = fn(out, r)
    return out


# (rule, n-ary?) per node class; n-ary nodes (Add, Max, And, ...) fold the rule
# over their args. Subclasses (CleanDiv) are resolved through the MRO once.
_HANDLERS: dict[type, tuple[Callable, bool]] = {
    sympy.Add: (_VRA.add, True), sympy.Mul: (_VRA.mul, True), sympy.Pow: (_VRA.pow, False),
    FloorDiv: (_VRA.floordiv, False), Mod: (_VRA.mod, False), IntTrueDiv: (_VRA.truediv, False),
    sympy.Mod: (_VRA.mod, False),  # Python's sign convention too, should it leak in
    ToFloat: (_VRA.to_float, False), TruncToInt: (_VRA.trunc_to_int, False),
    FloorToInt: (_VRA.floor_to_int, False), sympy.floor: (_VRA.floor_to_int, False),
    CeilToInt: (_VRA.ceil_to_int, False), sympy.ceiling: (_VRA.ceil_to_int, False),
    sympy.Max: (_VRA.max, True), sympy.Min: (_VRA.min, True), sympy.Abs: (_VRA.abs, False),
    sympy.Eq: (_VRA.eq, False), sympy.Ne: (_VRA.ne, False), sympy.Lt: (_VRA.lt, False),
    sympy.Le: (_VRA.le, False), sympy.Gt: (_VRA.gt, False), sympy.Ge: (_VRA.ge, False),
    sympy.And: (_VRA.and_, True), sympy.Or: (_VRA.or_, True), sympy.Not: (_VRA.not_, False),
    BitwiseAnd: (_VRA.bitwise_and, False), BitwiseOr: (_VRA.bitwise_or_xor, False),
    BitwiseXor: (_VRA.bitwise_or_xor, False),
}
_RESOLVED: dict[type, tuple[Callable, bool] | None] = {}


def _handler(t: type) -> tuple[Callable, bool] | None:
    try:
        return _RESOLVED[t]
    except KeyError:
        h = _RESOLVED[t] = next((_HANDLERS[c] for c in t.__mro__ if c in _HANDLERS), None)
        return h


@functools.lru_cache(maxsize=4096)
def _symbol_range(s: sympy.Symbol) -> ValueRanges:
    """The range a symbol's sympy assumptions promise."""
    is_int = s.is_integer is True
    if s.is_positive:
        return _make(_ONE, _oo, True) if is_int else _make(_ZERO, _oo, False)
    if s.is_nonnegative:
        return _make(_ZERO, _oo, is_int)
    if s.is_negative:
        return _make(_noo, -_ONE, True) if is_int else _make(_noo, _ZERO, False)
    if s.is_nonpositive:
        return _make(_noo, _ZERO, is_int)
    return _unknown(is_int)


def _bound(e: sympy.Basic, ranges: Mapping) -> ValueRanges:
    if e.is_Symbol:
        r = ranges.get(e)
        return r if r is not None else _symbol_range(e)
    if e.is_Number:
        if e is _nan or e.is_extended_real is False:  # nan, zoo: no interval holds them
            return _UNKNOWN
        return _make(e, e, e.is_Integer or _is_inf(e))
    if isinstance(e, BooleanAtom):
        return _BOOL_TRUE if e is _true else _BOOL_FALSE
    h = _handler(type(e))
    if h is None:
        if not isinstance(e, sympy.Expr):
            return _UNKNOWN_BOOL
        return _unknown(e.is_integer is True)
    rule, nary = h
    args = [_bound(a, ranges) for a in e.args]
    return _fold(rule, args) if nary else rule(*args)


def bound_sympy(expr: sympy.Basic, ranges: Mapping[sympy.Symbol, ValueRanges] | None = None) -> ValueRanges:
    """A range holding every value of `expr` when each symbol lies in its range.

    Symbols missing from `ranges` get the range their assumptions promise
    (`positive=True` integers: `[1, int_oo]`). Unknown node kinds give the
    unknown range of their kind, so the answer is always sound.

    >>> s0 = sympy.Symbol("s0", integer=True)
    >>> bound_sympy(Mod(s0, 4) * 2, {s0: ValueRanges(-int_oo, int_oo)})
    VR[0, 6]
    """
    if not isinstance(expr, sympy.Basic):
        expr = sympy.sympify(expr)
    return _bound(expr, ranges or {})
