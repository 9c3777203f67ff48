"""`ds.check`, `ds.check_is_size`, `ds.constrain_range`, `ds.bounds`: facts about symbolic values.

Inside a compiled function they teach the engine (ranges, replacements) and
become runtime asserts in the generated code; outside one they are plain checks.

    n = t.item()
    ds.check(n >= 0)                 # then torch.zeros(n, 4) needs no guard on n
"""
from __future__ import annotations

from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import user_location
from .state import current_tracer


ERRORS = {e.__name__: e for e in (RuntimeError, ValueError, IndexError, TypeError, NotImplementedError,
                                   AssertionError)}  # torch._check_*'s error types


def runtime_check(cond, message, error="RuntimeError"):
    """What a recorded check does when the compiled code runs."""
    if not cond:
        raise ERRORS.get(error, RuntimeError)(message)


runtime_check._codegen_name = "ds_check"


def check(cond, msg: str | None = None) -> None:
    """Assert `cond`; inside a compiled function it is also a fact for the engine and a runtime assert."""
    if isinstance(cond, SymBase):
        tracer = current_tracer()
        if tracer is not None:
            tracer.runtime_assert(cond, msg, user_location())
            return
        cond = bool(cond)
    if hasattr(cond, "dim") and callable(getattr(cond, "item", None)):  # a tensor condition, eagerly
        cond = bool(cond)
    if not cond:
        loc = user_location()
        raise RuntimeError((msg or "check failed") + (f" (at {loc})" if loc else ""))


def check_is_size(u) -> None:
    """`u` is a size: `u >= 0`, and size-oblivious checks treat it as >= 2."""
    check(u >= 0, "expected a size (>= 0)")
    if isinstance(u, SymBase):
        expr = u.node.expr
        if expr.is_Symbol and expr in u.node.env.var_info:
            u.node.env.mark_size_like(expr)


def constrain_range(u, min: int | None = None, max: int | None = None) -> None:
    """`min <= u <= max`: narrows the range of a data-dependent value (and checks it at run time)."""
    if min is not None and max is not None and min > max:
        raise ValueError(f"constrain_range: min={min} is greater than max={max}")
    if not isinstance(u, SymBase):
        if (min is not None and u < min) or (max is not None and u > max):
            raise RuntimeError(f"constrain_range: {u} is not in [{min}, {max}]")
        return
    if min is not None:  # checked at run time, and learned as a fact (the range narrows)
        check(u >= min, f"expected >= {min}")
    if max is not None:
        check(u <= max, f"expected <= {max}")
    u.node.env.constrain_range(u.node.expr, min, max)


def bounds(sym) -> tuple:
    """The (lo, hi) the engine knows for a symbolic value (ints give (v, v))."""
    if not isinstance(sym, SymBase):
        return sym, sym
    vr = sym.node.env.bound(sym.node.expr)
    return _py(vr.lo), _py(vr.hi)


def _py(v):
    if v.is_infinite:
        return float("inf") if v > 0 else float("-inf")
    return int(v) if v.is_integer else float(v)
