"""Print sympy size/stride/index arithmetic as C (int64_t), the C twin of `symbolic.printer.pyexpr`.

>>> s0, i0 = sympy.symbols("s0 i0", integer=True, positive=True)
>>> cexpr(2 * s0 + i0)
'(i0 + 2L*s0)'
"""
from __future__ import annotations

import sympy

from ...symbolic.functions import (BitwiseAnd, BitwiseOr, BitwiseXor, CeilToInt, FloorDiv, FloorToInt, IntTrueDiv,
                                   MATH_CALLS, Mod, ToFloat, TruncToInt)

__all__ = ["cexpr"]


def cexpr(e) -> str:
    e = sympy.sympify(e)
    if e.is_Symbol:
        return e.name
    if e.is_Integer:
        return f"{int(e)}L"
    if e.is_Rational:
        return f"({int(e.p)}.0/{int(e.q)}.0)"
    if e.is_Float:
        return repr(float(e))
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(cexpr(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        num = [a for a in e.args if not (a.is_Pow and a.exp.is_Integer and a.exp < 0)]
        den = [a.base ** (-a.exp) for a in e.args if a.is_Pow and a.exp.is_Integer and a.exp < 0]
        text = "*".join(cexpr(a) for a in num) or "1L"
        if den:
            return f"((double)({text}) / (double)({'*'.join(cexpr(a) for a in den)}))"
        return f"({text})"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return "(" + "*".join([cexpr(e.base)] * int(e.exp)) + ")"
    if isinstance(e, sympy.Pow):  # a float scalar such as `d ** -0.5`
        return f"std::pow((double){cexpr(e.base)}, (double){cexpr(e.exp)})"
    if isinstance(e, FloorDiv):
        return f"ds_floordiv({cexpr(e.args[0])}, {cexpr(e.args[1])})"
    if isinstance(e, Mod):
        return f"ds_mod({cexpr(e.args[0])}, {cexpr(e.args[1])})"
    if isinstance(e, sympy.Abs):
        x = cexpr(e.args[0])
        return f"({x} < 0 ? -{x} : {x})"
    if isinstance(e, sympy.Max):
        return _fold("std::max<int64_t>", e.args)
    if isinstance(e, sympy.Min):
        return _fold("std::min<int64_t>", e.args)
    if isinstance(e, (BitwiseAnd, BitwiseOr, BitwiseXor)):  # int64 two's complement, as Python's on ints in range
        op = {BitwiseAnd: "&", BitwiseOr: "|", BitwiseXor: "^"}[type(e)]
        return f"({cexpr(e.args[0])} {op} {cexpr(e.args[1])})"
    if isinstance(e, IntTrueDiv):
        return f"((double){cexpr(e.args[0])} / (double){cexpr(e.args[1])})"
    if type(e) in _MATH:  # libm's, which Python's math module calls too
        return f"std::{e._math}((double){cexpr(e.args[0])})"
    if isinstance(e, ToFloat):
        return f"((double){cexpr(e.args[0])})"
    if isinstance(e, (TruncToInt,)):
        return f"((int64_t){cexpr(e.args[0])})"
    if isinstance(e, FloorToInt):
        return f"((int64_t)std::floor({cexpr(e.args[0])}))"
    if isinstance(e, CeilToInt):
        return f"((int64_t)std::ceil({cexpr(e.args[0])}))"
    raise TypeError(f"cexpr cannot print {type(e).__name__}: {e}")


_MATH = frozenset(MATH_CALLS.values())


def _fold(fn: str, args) -> str:
    out = cexpr(args[0])
    for a in args[1:]:
        out = f"{fn}({out}, {cexpr(a)})"
    return out
