"""The sympy symbols of sizes and scalars, by number and kind: `s3` (a size: an integer >= 0, or any
integer), `zf3` (a float). Every ShapeEnv names its symbols s0, s1, ... again; sympy's own cache
sits behind its slow handling of assumptions, so they are kept here (they are immutable)."""
from __future__ import annotations

import sympy

_SYMBOLS: dict = {}  # (number, kind) -> Symbol


def symbol(n: int, kind: str) -> sympy.Symbol:
    sym = _SYMBOLS.get((n, kind))
    if sym is None:
        sym = (sympy.Symbol(f"zf{n}", real=True) if kind == "float" else
               sympy.Symbol(f"s{n}", integer=True, nonnegative=(kind == "size") or None))
        if len(_SYMBOLS) < 65536:
            _SYMBOLS[(n, kind)] = sym
    return sym
