"""Print sympy shape formulas as Python source, and as short log text.

`pyexpr` output evaluates with builtins only (no sympy; `math` only for the
`math.sqrt(s)`-style calls of float formulas) to the value sympy gives with
Python ints, floats and bools substituted:

>>> s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
>>> pyexpr(sympy.Eq(Mod(s0 + s1, 8), 0))
'(s0 + s1) % 8 == 0'
>>> pyexpr(2 * FloorDiv(s0, 2), lambda s: f"L['x'].size()[{s.name[1:]}]")
"2*(L['x'].size()[0] // 2)"
"""
from __future__ import annotations

import ast
import functools
from typing import Callable

import sympy
from sympy.logic.boolalg import BooleanAtom
from sympy.printing.str import StrPrinter

from .functions import (
    BitwiseAnd, BitwiseOr, BitwiseXor, CeilToInt, FloatAdd, FloatFloorDiv, FloatMod, FloatMul, FloatPow, FloatSub,
    FloatTrueDiv, FloorDiv, FloorToInt, IntTrueDiv, MATH_CALLS, Mod, ToFloat, TruncToInt,
)

__all__ = ["pyexpr", "sympy_str"]

# Python's binding strengths, loosest first.
OR, AND, NOT, CMP, ADD, MUL, UNARY, POW, ATOM = range(9)

_REL_OP = {
    sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">=",
}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _StrPrinter(StrPrinter):
    def parenthesize(self, item, level, strict=False):
        # sympy ranks a class named `Mod` like `*`; ours prints as a call and needs no parentheses
        if isinstance(item, sympy.Function):
            return self._print(item)
        return super().parenthesize(item, level, strict)


_STR = _StrPrinter()


def sympy_str(expr) -> str:
    """Text for log messages: sympy's spelling (`Eq(s0, 4)`, `2*Mod(s0, 3)`)."""
    return _STR.doprint(expr)


def pyexpr(expr: sympy.Basic, name_of: Callable[[sympy.Symbol], str] | None = None, *,
           integer: bool = False) -> str:
    """Python source computing `expr`; `name_of(sym)` spells each symbol (default: its name).

    `integer`: the value is an int (a size): rational coefficients are cleared so the text
    computes in ints exactly, `(s0*s1 - s1) // 2` rather than `s1*(s0 - 1)/2` (a float).

    >>> pyexpr(sympy.Le(2, sympy.Symbol("s0")))
    's0 >= 2'
    """
    if not isinstance(expr, sympy.Basic):
        expr = sympy.sympify(expr)
    printer = _Printer(name_of, integer)
    if integer and not expr.is_Number and _has_rational(expr):
        num, den = _int_fraction(expr)
        return printer(num)[0] if den == 1 else f"{printer.wrap(num, MUL)} // {den}"
    return printer(expr)[0]


def _int_fraction(expr) -> tuple[sympy.Expr, int]:
    """`expr == num / den` with `num` free of rational coefficients at every level (outside
    function arguments, which print on their own), and `den` a positive int."""
    num, den = sympy.fraction(sympy.together(expr))
    if not den.is_Integer or _has_rational(num):  # e.g. a rational inside a power: leave it
        return expr, 1
    return num, int(den)


def _has_rational(e) -> bool:
    if e.is_Rational:
        return not e.is_Integer
    if isinstance(e, sympy.Function):
        return False
    return any(_has_rational(a) for a in e.args)


@functools.lru_cache(maxsize=1024)
def is_atom_text(text: str) -> bool:
    """Whether text parses as an atom: a name, call, subscript or attribute."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ValueError(f"symbol spelling is not a Python expression: {text!r}") from None
    return isinstance(node, (ast.Name, ast.Call, ast.Subscript, ast.Attribute))


class _Printer:
    """Recursive printer returning (text, precedence) pairs."""

    def __init__(self, name_of: Callable[[sympy.Symbol], str] | None, integer: bool = False):
        self.name_of = name_of
        self.integer = integer  # an int-valued formula: so are the operands of //, %, max, min, abs

    def int_operand(self, e: sympy.Basic, min_prec: int) -> str:
        """An operand of an int function in an int formula: `n/2` (sympy's FloorDiv(n, 2) of an n it
        knows is even) prints as `(n // 2)`, exact, so the result stays an int (`n/2 // 2` is a float)."""
        if self.integer and _has_rational(e) and all(x.is_integer for x in e.free_symbols):
            num, den = _int_fraction(e)
            if den != 1:
                return f"({self.wrap(num, MUL)} // {den})"
            if not _has_rational(num):
                return self.wrap(num, min_prec)
        return self.wrap(e, min_prec)

    def __call__(self, e: sympy.Basic) -> tuple[str, int]:
        if e.is_Symbol:
            text = e.name if self.name_of is None else self.name_of(e)
            return (text, ATOM) if is_atom_text(text) else (f"({text})", ATOM)
        if e.is_Number:
            return _number(e)
        if isinstance(e, BooleanAtom):
            return ("True" if e is sympy.true else "False"), ATOM
        method = _DISPATCH.get(type(e))
        if method is None:
            method = next((_DISPATCH[c] for c in type(e).__mro__ if c in _DISPATCH), None)
            if method is None:
                raise TypeError(f"pyexpr cannot print {type(e).__name__}: {e}")
        return method(self, e)

    def wrap(self, e: sympy.Basic, min_prec: int) -> str:
        """e's text, parenthesised unless it binds at least as tight as min_prec."""
        text, prec = self(e)
        return text if prec >= min_prec else f"({text})"

    def add(self, e: sympy.Add) -> tuple[str, int]:
        terms = e.as_ordered_terms()  # sympy's reading order: `s0**2 + s0 + 1`
        if _is_negative_term(terms[0]):
            first_pos = next((i for i, t in enumerate(terms) if not _is_negative_term(t)), 0)
            terms.insert(0, terms.pop(first_pos))  # `s1 - s0`, not `-s0 + s1`
        out = self.wrap(terms[0], ADD)
        for t in terms[1:]:
            if _is_negative_term(t):
                out += " - " + self.wrap(-t, MUL)
            else:
                out += " + " + self.wrap(t, MUL)
        return out, ADD

    def mul(self, e: sympy.Mul) -> tuple[str, int]:
        coeff, rest = e.as_coeff_Mul()
        if coeff.is_Rational:
            num_c, den_c = abs(int(coeff.p)), int(coeff.q)  # exact `3*s0/2`, not `1.5*s0`
        else:
            num_c, den_c = abs(coeff), 1
        num, den = [], []
        for f in rest.as_ordered_factors():
            if f.is_Pow and f.exp.is_Integer and f.exp < 0:
                den.append(f.base if f.exp == -1 else sympy.Pow(f.base, -f.exp))
            elif f != 1:
                num.append(f)
        # any factor looser than unary minus gets parentheses: `2*(s0 % 3)`, never `2*s0 % 3`
        parts = [self.wrap(f, UNARY) for f in num]
        if num_c != 1 or not parts:
            parts.insert(0, _number(sympy.sympify(num_c))[0])
        if den_c != 1:
            den.insert(0, sympy.Integer(den_c))
        text = "*".join(parts)
        if den:
            den_text = "*".join(self.wrap(f, UNARY) for f in den)
            text += f"/({den_text})" if len(den) > 1 else f"/{den_text}"
        simple = len(parts) == 1 and not den
        if coeff.is_negative:
            return f"-{text}", (UNARY if simple else MUL)
        return text, MUL

    def pow(self, e: sympy.Pow) -> tuple[str, int]:
        base, exp = e.args
        if exp.is_Integer and exp < 0:
            inv = base if exp == -1 else sympy.Pow(base, -exp)
            return f"1/{self.wrap(inv, UNARY)}", MUL
        if exp.is_Rational and not exp.is_Integer:
            return f"{self.wrap(base, ATOM)}**({exp.p}/{exp.q})", POW
        return f"{self.wrap(base, ATOM)}**{self.wrap(exp, UNARY)}", POW

    def floordiv(self, e) -> tuple[str, int]:
        return self.binop(e, "//")

    def mod(self, e) -> tuple[str, int]:
        return self.binop(e, "%")

    def truediv(self, e) -> tuple[str, int]:
        return self.binop(e, "/")

    def binop(self, e, op: str) -> tuple[str, int]:
        # left-associative: the right operand needs parentheses at equal precedence
        if op == "/":
            return f"{self.wrap(e.args[0], MUL)} {op} {self.wrap(e.args[1], UNARY)}", MUL
        return f"{self.int_operand(e.args[0], MUL)} {op} {self.int_operand(e.args[1], UNARY)}", MUL

    def float_op(self, e) -> tuple[str, int]:
        # Python's own operator, left-associative: `(s * 0.1) * 3` prints as `s * 0.1 * 3`
        op, prec = _FLOAT_OP[type(e)]
        a, b = e.args
        if op == "**":
            return f"{self.wrap(a, ATOM)} ** {self.wrap(b, UNARY)}", POW
        return f"{self.wrap(a, prec)} {op} {self.wrap(b, prec + 1)}", prec

    def math_call(self, e) -> tuple[str, int]:
        return f"math.{e._math}({self(e.args[0])[0]})", ATOM  # the namespace has `math`

    def bitop(self, e) -> tuple[str, int]:
        # & | ^ bind looser than comparisons' operands need, tighter than comparisons: parenthesise
        op = {BitwiseAnd: "&", BitwiseOr: "|", BitwiseXor: "^"}[type(e)]
        return f"({self.int_operand(e.args[0], UNARY)} {op} {self.int_operand(e.args[1], UNARY)})", ATOM

    def call(self, e) -> tuple[str, int]:
        fn = next(name for cls, name in _CALLS.items() if isinstance(e, cls))
        if isinstance(e, (sympy.Max, sympy.Min, sympy.Abs)):
            return f"{fn}({', '.join(self.int_operand(a, 0) for a in e.args)})", ATOM
        return f"{fn}({', '.join(self(a)[0] for a in e.args)})", ATOM

    def floor_to_int(self, e) -> tuple[str, int]:  # math's: of an infinity OverflowError, as eager's math.floor
        return f"math.floor({self(e.args[0])[0]})", ATOM  # (`int(inf // 1)` raised ValueError)

    def ceil_to_int(self, e) -> tuple[str, int]:
        return f"math.ceil({self(e.args[0])[0]})", ATOM

    def rel(self, e: sympy.Basic) -> tuple[str, int]:
        op = _REL_OP[type(e)]
        lhs, rhs = e.args
        if lhs.is_Number and not rhs.is_Number:
            lhs, rhs, op = rhs, lhs, _FLIP[op]  # `s0 >= 2`: the symbol side first
        if _has_rational(lhs) or _has_rational(rhs):  # sizes compare in ints: scale both sides
            (nl, dl), (nr, dr) = _int_fraction(lhs), _int_fraction(rhs)
            if not (_has_rational(nl * dr) or _has_rational(nr * dl)):
                lhs, rhs = nl * dr, nr * dl
        # operands bind tighter than comparisons, so `a < b == c` chaining never appears
        return f"{self.wrap(lhs, CMP + 1)} {op} {self.wrap(rhs, CMP + 1)}", CMP

    def and_(self, e) -> tuple[str, int]:
        return " and ".join(self.wrap(a, NOT) for a in _sorted_args(e)), AND

    def or_(self, e) -> tuple[str, int]:
        return " or ".join(self.wrap(a, AND) for a in _sorted_args(e)), OR

    def not_(self, e) -> tuple[str, int]:
        return f"not {self.wrap(e.args[0], NOT)}", NOT


def _sorted_args(e: sympy.Basic) -> list:
    # And/Or keep args in a set-like order; sort so the text is stable across runs
    return sorted(e.args, key=sympy.default_sort_key)


def _number(e: sympy.Number) -> tuple[str, int]:
    if e.is_Integer:
        v = int(e)
        return str(v), (ATOM if v >= 0 else UNARY)
    if e is sympy.oo:
        return "float('inf')", ATOM  # no `math` needed in the guard namespace
    if e is sympy.S.NegativeInfinity:
        return "-float('inf')", UNARY
    if e is sympy.nan:  # a float symbol plus a NaN constant (`n + c`, c a NaN closure value)
        return "float('nan')", ATOM
    if e.is_Rational:
        return f"{e.p}/{e.q}", MUL
    if e.is_Float:
        v = float(e)
        return repr(v), (ATOM if v >= 0 else UNARY)
    raise TypeError(f"pyexpr cannot print the number {e}")


def _is_negative_term(t: sympy.Expr) -> bool:
    return t.as_coeff_Mul()[0].is_negative is True


_FLOAT_OP = {FloatAdd: ("+", ADD), FloatSub: ("-", ADD), FloatMul: ("*", MUL), FloatTrueDiv: ("/", MUL),
             FloatFloorDiv: ("//", MUL), FloatMod: ("%", MUL), FloatPow: ("**", POW)}
_CALLS = {sympy.Max: "max", sympy.Min: "min", sympy.Abs: "abs", ToFloat: "float", TruncToInt: "int"}
_P = _Printer
_DISPATCH: dict[type, Callable] = {
    sympy.Add: _P.add,
    sympy.Mul: _P.mul,
    sympy.Pow: _P.pow,
    FloorDiv: _P.floordiv,
    Mod: _P.mod,
    IntTrueDiv: _P.truediv,
    BitwiseAnd: _P.bitop, BitwiseOr: _P.bitop, BitwiseXor: _P.bitop,
    **{fn: _P.float_op for fn in _FLOAT_OP},
    **{fn: _P.math_call for fn in MATH_CALLS.values()},
    **{fn: _P.call for fn in _CALLS},
    FloorToInt: _P.floor_to_int,
    CeilToInt: _P.ceil_to_int,
    sympy.And: _P.and_,
    sympy.Or: _P.or_,
    sympy.Not: _P.not_,
    **{rel: _P.rel for rel in _REL_OP},
}
