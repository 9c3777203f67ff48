"""Sympy functions with Python's integer semantics, for shape formulas.

Sympy's own `floor`, `Mod` and `/` follow mathematics, not Python: `floor(s0/2)`
lets sympy rewrite `2*floor(s0/2)` in ways a shape formula cannot afford and
`sympy.Mod` simplifies under assumptions we do not want. The classes here are
opaque to sympy except for the rewrites written in their `eval`, each of which
is an identity on integers (the arguments of `FloorDiv` and `Mod` are always
integer-valued; a non-integer number argument is a `TypeError`).

>>> s0 = sympy.Symbol("s0", integer=True, positive=True)
>>> FloorDiv(6 * s0, 4)
FloorDiv(3*s0, 2)
>>> FloorDiv(2 * s0 + 3, 2)
s0 + 1
>>> Mod(4 * s0 + 3, 2)
1
"""
from __future__ import annotations

import math
import operator

import sympy

__all__ = [
    "FloorDiv", "CleanDiv", "CeilDiv", "Mod", "IntTrueDiv", "ToFloat",
    "FloorToInt", "CeilToInt", "TruncToInt", "Max", "Min", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "LShift", "RShift", "FloatAdd", "FloatSub", "FloatMul", "FloatTrueDiv", "FloatFloorDiv", "FloatMod",
    "FloatPow", "FLOAT_OPS", "MATH_CALLS",
]

Max = sympy.Max
Min = sympy.Min


def _check_int_arg(fn: str, x: sympy.Basic) -> None:
    # Booleans and non-integer numbers are caller bugs, not values to fold.
    if not isinstance(x, sympy.Expr) or (x.is_Number and not x.is_Integer and x.is_finite):
        raise TypeError(f"{fn} takes integer arguments, got {x!r}")


def _fold_numeric(x: sympy.Basic) -> sympy.Basic:
    """Evaluate a symbol-free argument sympy left unevaluated (its Min/Max factoring
    can leave `Min(0, 1)` behind), so numbers really fold."""
    if isinstance(x, sympy.Expr) and not x.is_Number and x.is_number:
        v = x.doit()
        if v.is_Number:
            return v
    return x


def _is_int(x: sympy.Basic) -> bool:
    return x.is_integer is True


def _split_multiples(base: sympy.Expr, divisor: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """(q, r) with base == q*divisor + r, q an integer expression made of the
    terms of `base` that are integer multiples of `divisor`."""
    quotient, rest = [], []
    for term in sympy.Add.make_args(base):
        q = term / divisor
        if q.is_Integer or (not q.is_Number and _is_int(q) and not _has_neg_power(q)):
            quotient.append(q)
        else:
            rest.append(term)
    if not quotient:
        return sympy.S.Zero, base
    return sympy.Add(*quotient), sympy.Add(*rest)


def _has_neg_power(q: sympy.Expr) -> bool:
    # `s0/s1` can claim is_integer only through assumptions we did not check; stay literal.
    return any(f.is_Pow and f.exp.is_negative for f in sympy.Mul.make_args(q))


def _common_factor(terms: tuple[sympy.Expr, ...]) -> sympy.Expr:
    """The largest g (positive integer content times symbolic factors with
    natural powers) dividing every term; 1 if the terms share nothing."""
    g = 0
    factors: dict[sympy.Expr, sympy.Expr] | None = None
    for term in terms:
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return sympy.S.One
        g = math.gcd(g, int(coeff))
        powers = {b: e for b, e in rest.as_powers_dict().items() if e.is_Integer and e > 0 and b != 1}
        if factors is None:
            factors = powers
        else:
            factors = {b: min(e, powers[b]) for b, e in factors.items() if b in powers}
    out = sympy.Integer(g or 1)
    for b, e in (factors or {}).items():
        out *= b**e
    return out


def _divide_terms(expr: sympy.Expr, g: sympy.Expr) -> sympy.Expr:
    # term-wise, so Mul's own power bookkeeping cancels g without calling sympy.cancel
    return sympy.Add(*[t / g for t in sympy.Add.make_args(expr)])


class FloorDiv(sympy.Function):
    """Python's `a // b` on integers (rounds toward -inf).

    >>> FloorDiv(-7, 2)
    -4
    """

    nargs = (2,)
    is_integer = True
    is_real = True

    @classmethod
    def eval(cls, base, divisor):
        base, divisor = _fold_numeric(base), _fold_numeric(divisor)
        _check_int_arg(cls.__name__, base)
        _check_int_arg(cls.__name__, divisor)
        if divisor.is_zero:
            raise ZeroDivisionError(f"{cls.__name__}({base}, 0)")
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if not (base.is_finite is not False and divisor.is_finite is not False):
            return None  # infinities are the business of ranges.py
        if base.is_zero:
            return sympy.S.Zero
        if divisor == 1:
            return base
        if divisor.is_Integer and divisor < 0:
            # floor(a / -c) == floor(-a / c): keep divisors positive so the rules below meet
            return cls(-base, -divisor)
        if isinstance(base, Mod) and base.args[1] == divisor:
            return sympy.S.Zero  # |Mod(x, b)| < |b| with b's sign
        if isinstance(base, FloorDiv) and _is_int(divisor) and divisor.is_positive:
            # floor(floor(y) / b) == floor(y / b) for a positive integer b
            return cls(base.args[0], base.args[1] * divisor)
        q, r = _split_multiples(base, divisor)
        if q != 0:
            # floor(q + r/b) == q + floor(r/b) for integer q, whatever the signs
            return q + cls(r, divisor)
        g = _common_factor(sympy.Add.make_args(base) + sympy.Add.make_args(divisor))
        if g != 1:
            # floor(g*y / (g*d)) == floor(y / d) for any nonzero g
            return cls(_divide_terms(base, g), _divide_terms(divisor, g))
        return None

    def _eval_is_nonnegative(self):
        a, b = self.args
        if b.is_positive:
            return a.is_nonnegative
        if b.is_negative:
            return a.is_nonpositive
        return None

    def _eval_is_positive(self):
        a, b = self.args
        if b.is_positive and (a - b).is_nonnegative:
            return True
        if b.is_positive and a.is_nonnegative and (b - a).is_positive:
            return False
        return None


class CleanDiv(FloorDiv):
    """Exact division `a // b` where the caller has checked `b` divides `a`."""


def CeilDiv(a, b) -> sympy.Expr:
    """Python's `-(-a // b)`, i.e. ceil(a / b) on integers.

    >>> s0 = sympy.Symbol("s0", integer=True)
    >>> CeilDiv(2 * s0, 2)
    s0
    """
    a, b = sympy.sympify(a), sympy.sympify(b)
    return -FloorDiv(-a, b)


class Mod(sympy.Function):
    """Python's `a % b` on integers: the result has the sign of `b`.

    >>> Mod(-7, 3), Mod(7, -3)
    (2, -2)
    """

    nargs = (2,)
    is_integer = True
    is_real = True

    @classmethod
    def eval(cls, base, divisor):
        base, divisor = _fold_numeric(base), _fold_numeric(divisor)
        _check_int_arg("Mod", base)
        _check_int_arg("Mod", divisor)
        if divisor.is_zero:
            raise ZeroDivisionError(f"Mod({base}, 0)")
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) % int(divisor))
        if not (base.is_finite is not False and divisor.is_finite is not False):
            return None
        if base.is_zero or divisor in (1, -1) or base == divisor or base == -divisor:
            return sympy.S.Zero
        if isinstance(base, Mod):
            inner = base.args[1]
            if inner == divisor:
                return base
            if inner.is_Integer and divisor.is_Integer:
                m, n = int(inner), int(divisor)
                if m % n == 0:
                    return cls(base.args[0], divisor)  # x - m*k changes x mod n by nothing
                if 0 < m <= n:
                    return base  # already in [0, m-1], inside [0, n-1]
        q, r = _split_multiples(base, divisor)
        if q != 0:
            return cls(r, divisor)  # (x + k*b) % b == x % b for integer k
        return None

    def _eval_is_nonnegative(self):
        b = self.args[1]
        if b.is_positive:
            return True
        return None

    def _eval_is_nonpositive(self):
        b = self.args[1]
        if b.is_negative:
            return True
        return None


class IntTrueDiv(sympy.Function):
    """Python's `a / b` on two integers: a float.

    >>> IntTrueDiv(1, 4)
    0.250000000000000
    """

    nargs = (2,)
    is_real = True

    @classmethod
    def eval(cls, base, divisor):
        base, divisor = _fold_numeric(base), _fold_numeric(divisor)
        _check_int_arg("IntTrueDiv", base)
        _check_int_arg("IntTrueDiv", divisor)
        if divisor.is_zero:
            raise ZeroDivisionError(f"IntTrueDiv({base}, 0)")
        if base.is_Integer and divisor.is_Integer:
            # Python's int/int is correctly rounded; route through it, not through mpmath
            return sympy.Float(int(base) / int(divisor))
        return None


class ToFloat(sympy.Function):
    """Python's `float(x)` on an integer.

    >>> ToFloat(3)
    3.00000000000000
    """

    nargs = (1,)
    is_real = True

    @classmethod
    def eval(cls, x):
        x = _fold_numeric(x)
        if not isinstance(x, sympy.Expr):
            raise TypeError(f"ToFloat takes a number, got {x!r}")
        if x.is_Integer:
            return sympy.Float(float(int(x)))
        if isinstance(x, sympy.Float):
            return x
        return None


# ---------------------------------------------------------------- float arithmetic, as Python rounds it
class _FloatOp(sympy.Function):
    """A float operation exactly as Python computes it. Sympy would reassociate `s*0.1*3` into
    `0.3*s` and cancel `(s + 1e16) - 1e16` into `s`, which round differently from the program;
    these stay as written and fold only when both arguments are numbers, through Python's own
    operator (an error or a non-finite result stays unfolded: the program decides at run time).

    >>> s = sympy.Symbol("s", real=True)
    >>> FloatMul(FloatMul(s, 0.1), 3).xreplace({s: sympy.Float(5.159088058806049)})
    1.54772641764181
    """

    nargs = (2,)
    is_real = True
    _py = None  # the Python operator, set by subclasses

    @classmethod
    def eval(cls, a, b):
        a, b = _py_number(_fold_numeric(a)), _py_number(_fold_numeric(b))
        if a is None or b is None:
            return None
        try:
            v = cls._py(a, b)
        except (ArithmeticError, ValueError):
            return None
        return sympy.Float(v) if isinstance(v, float) and math.isfinite(v) else None


def _py_number(x):
    """The Python int or float a sympy number stands for; None for anything else."""
    if isinstance(x, sympy.Integer):
        return int(x)
    if isinstance(x, sympy.Float) and x.is_finite:
        return float(x)
    return None


def _float_op(name: str, py, doc: str = "") -> type:
    return type(name, (_FloatOp,), {"_py": staticmethod(py), "__doc__": doc or f"Python's float `{name}`."})


FloatAdd = _float_op("FloatAdd", operator.add)
FloatSub = _float_op("FloatSub", operator.sub)
FloatMul = _float_op("FloatMul", operator.mul)
FloatTrueDiv = _float_op("FloatTrueDiv", operator.truediv)
FloatFloorDiv = _float_op("FloatFloorDiv", operator.floordiv,
                          "Python's `a // b` on floats: a float (`1.0 // 0.1` is 9.0, not floor(1.0 / 0.1) = 10).")
FloatMod = _float_op("FloatMod", operator.mod)
FloatPow = _float_op("FloatPow", operator.pow)
FLOAT_OPS = {"add": FloatAdd, "sub": FloatSub, "mul": FloatMul, "truediv": FloatTrueDiv,
             "floordiv": FloatFloorDiv, "mod": FloatMod, "pow": FloatPow}


class _MathCall(sympy.Function):
    """`math.<fn>(x)` as Python computes it (x a float, or an int Python converts); folds on numbers."""

    nargs = (1,)
    is_real = True
    _math = ""  # the name in `math`, set per class

    @classmethod
    def eval(cls, x):
        x = _py_number(_fold_numeric(x))
        if x is None:
            return None
        try:
            v = getattr(math, cls._math)(x)
        except (ArithmeticError, ValueError):
            return None
        return sympy.Float(v) if math.isfinite(v) else None


# math.sqrt(s) -> MathSqrt(s): `1 / math.sqrt(head_dim)` stays symbolic, as under torch.compile
MATH_CALLS = {n: type(f"Math{n.capitalize()}", (_MathCall,), {"_math": n})
              for n in ("sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin",
                        "acos", "atan")}


class _ToInt(sympy.Function):
    """Shared folding for float -> int conversions."""

    nargs = (1,)
    is_integer = True
    is_real = True
    _round = None  # (sympy Number) -> sympy Integer, set by subclasses

    @classmethod
    def eval(cls, x):
        x = _fold_numeric(x)
        if not isinstance(x, sympy.Expr):
            raise TypeError(f"{cls.__name__} takes a number, got {x!r}")
        if x.is_Number:
            if x.is_finite is False:
                return None  # math.floor(inf) raises; ranges.py handles the bound
            return cls._round(x)
        if _is_int(x):
            return x
        if isinstance(x, ToFloat):
            return x.args[0]
        return None


class FloorToInt(_ToInt):
    """Python's `math.floor(x)`: a float rounded toward -inf, as an int."""

    _round = staticmethod(lambda x: x.floor())


class CeilToInt(_ToInt):
    """Python's `math.ceil(x)`: a float rounded toward +inf, as an int."""

    _round = staticmethod(lambda x: x.ceiling())


class TruncToInt(_ToInt):
    """Python's `int(x)` on a float: rounded toward zero."""

    _round = staticmethod(lambda x: x.floor() if x >= 0 else x.ceiling())


# ---------------------------------------------------------------- bit operations on ints
class _Bitwise(sympy.Function):
    """Python's `&`, `|`, `^` on ints (two's complement, any sign)."""

    nargs = (2,)
    is_integer = True
    is_real = True
    op = None  # the Python operator

    @classmethod
    def eval(cls, a, b):
        a, b = _fold_numeric(a), _fold_numeric(b)
        _check_int_arg(cls.__name__, a)
        _check_int_arg(cls.__name__, b)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(cls.op(int(a), int(b)))
        if a.is_Integer and not b.is_Integer:
            return cls(b, a)  # constants second: `s0 & 1`
        return cls._identity(a, b)

    @classmethod
    def _identity(cls, a, b):
        return None


class BitwiseAnd(_Bitwise):
    op = staticmethod(lambda a, b: a & b)

    @classmethod
    def _identity(cls, a, b):
        if b == 0:
            return sympy.S.Zero
        if b == -1 or a == b:
            return a
        if b.is_Integer and int(b) > 0 and (int(b) + 1) & int(b) == 0:
            return Mod(a, int(b) + 1)  # a & (2**k - 1) == a % 2**k, for either sign of a
        return None


class BitwiseOr(_Bitwise):
    op = staticmethod(lambda a, b: a | b)

    @classmethod
    def _identity(cls, a, b):
        if b == 0 or a == b:
            return a
        if b == -1:
            return sympy.Integer(-1)
        return None


class BitwiseXor(_Bitwise):
    op = staticmethod(lambda a, b: a ^ b)

    @classmethod
    def _identity(cls, a, b):
        if b == 0:
            return a
        if a == b:
            return sympy.S.Zero
        return None


def LShift(a, b) -> sympy.Expr:
    """`a << b` (b >= 0): a * 2**b."""
    b = sympy.sympify(b)
    if b.is_Integer:
        if b < 0:
            raise ValueError("negative shift count")
        return a * sympy.Integer(2) ** int(b)
    return a * sympy.Pow(2, b)


def RShift(a, b) -> sympy.Expr:
    """`a >> b` (b >= 0): floor(a / 2**b), as Python rounds toward -inf."""
    b = sympy.sympify(b)
    if b.is_Integer:
        if b < 0:
            raise ValueError("negative shift count")
        return FloorDiv(a, sympy.Integer(2) ** int(b))
    return FloorDiv(a, sympy.Pow(2, b))
