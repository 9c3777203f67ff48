"""ShapeEnv: the per-compile state of symbolic sizes, guards, ranges and facts.

It creates symbols for input sizes, decides conditions on them by their
hints, and records each decision as a guard that refines what it knows:
ranges (`s0 > 4` makes `s0` in `[5, int_oo]`), replacements (`Eq(s0, 4)`
substitutes 4 everywhere) and facts about linear forms (`s0 - s1 <= -1`).

>>> env = ShapeEnv()
>>> s0 = env.create_symbol(5, LocalSource("x"))  # doctest: +SKIP
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

import sympy

from .errors import DataDependentError, InvalidHintError
from .functions import Mod
from .printer import sympy_str
from .ranges import ValueRanges, bound_sympy, exact, int_oo
from .symbols import symbol as _symbol
from .constraints import DimConstraint, Violation, raise_violations
from .relations import EQ, LE, LT, NE, canon, negate, normalise_sign, rebuild
from . import tracehook as _th
from .sources import Source
from .userloc import Location, user_location

log = logging.getLogger("dynashape.dynamic")


class DimDynamic(enum.Enum):
    STATIC = 0  # a constant; no symbol
    DUCK = 1  # a symbol, shared with other sizes of the same hint
    DYNAMIC = 2  # a fresh symbol of its own
    UNBACKED = 3  # no hint: reasoned about by ranges only, never guarded
    OBLIVIOUS_SIZE = 4  # backed, but framework checks treat it as >= 2 (no 0/1 guards)


@dataclass
class Guard:
    expr: sympy.Basic  # a condition that held on the example inputs
    location: Location | None


@dataclass
class RuntimeAssert:
    expr: sympy.Basic  # checked when the compiled code runs
    message: str | None
    location: Location | None


@dataclass
class SymbolInfo:
    sources: list[Source] = field(default_factory=list)
    dynamic: DimDynamic = DimDynamic.DUCK
    size_like: bool = False  # a size: >= 0, and >= 2 for size-oblivious checks
    location: Location | None = None
    initial_range: ValueRanges | None = None  # at creation: 0/1 specialization and user min/max
    description: str | None = None  # unbacked: what the user knows it as, `x.nonzero().size(0)`


class ShapeEnv:
    def __init__(self, *, specialize_zero_one: bool = True, duck_shape: bool = True,
                 backed_size_oblivious: bool = False):
        self.specialize_zero_one = specialize_zero_one
        self.duck_shape = duck_shape
        self.backed_size_oblivious = backed_size_oblivious
        # fn(expr, location) -> value or None: decides a data-dependent condition of the user's by the
        # call's real values (speculation, set by the tracer); not while framework code asks (depth > 0)
        self.speculate = None
        self.framework_depth = 0
        self.var_to_val: dict[sympy.Symbol, object] = {}  # hints
        self.var_to_range: dict[sympy.Symbol, ValueRanges] = {}
        self.var_info: dict[sympy.Symbol, SymbolInfo] = {}
        self.replacements: dict[sympy.Symbol, sympy.Expr] = {}
        self.replacement_locations: dict[sympy.Symbol, Location | None] = {}  # the line that decided it
        self.bound_locations: dict[tuple[sympy.Symbol, str], Location | None] = {}  # (sym, "lo"|"hi")
        self.expr_ranges: dict[sympy.Expr, ValueRanges] = {}  # facts on linear forms
        self.expr_subs: dict[sympy.Expr, sympy.Expr] = {}  # e.g. Mod(s0, 8) -> 0
        self.not_equal: set[tuple[sympy.Expr, sympy.Expr]] = set()  # (d0, value): d0 != value
        self.guards: list[Guard] = []
        self.runtime_asserts: list[RuntimeAssert] = []
        self.constraints: dict[sympy.Symbol, DimConstraint] = {}
        self.violations: list[Violation] = []
        self.specializations: list[tuple[Source, object, Location | None]] = []
        self._duck: dict[tuple[object, bool], sympy.Symbol] = {}
        self._nsym = 0
        self._nunbacked = 0
        self._unbacked: set[sympy.Symbol] = set()
        self.unbacked_fallback: dict[sympy.Symbol, int] = {}  # sizes meta tensors, decides nothing
        self._static_cache: dict = {}
        self.generation = 0  # moves whenever what is known changes (a symbol, a guard, a fact, a replacement)
        self._simplify_cache: dict = {}
        # every condition decided without a guard, (expr, size_oblivious) -> value, and a count of the
        # facts that did not come from a guard: symbolic/widen.py decides them again on a wider range
        self.decisions: dict = {}
        self.outside_facts = 0
        self._loc: Location | None = None  # where the decision being recorded came from

    # ---------------------------------------------------------------- symbols
    def create_symbol(self, hint, source: Source, dynamic: DimDynamic = DimDynamic.DUCK,
                      min=None, max=None, *, is_size: bool = True, constraint: DimConstraint | None = None):
        """A sympy expression for one input size (or int, with is_size=False).

        Returns an Integer when the value stays static (STATIC, or 0/1 sizes).
        """
        if dynamic is DimDynamic.UNBACKED:  # mark_unbacked: the example only sizes meta tensors
            return self.create_unbacked_symint(source=source, size_like=is_size, fallback=hint,
                                               description=source.pretty())
        if isinstance(hint, bool) or not isinstance(hint, (int, float)):
            raise TypeError(f"hint for {source.name()} must be an int or float, got {type(hint).__name__}")
        is_float = isinstance(hint, float)
        if dynamic is DimDynamic.STATIC:
            return sympy.Float(hint) if is_float else sympy.Integer(hint)
        oblivious = dynamic is DimDynamic.OBLIVIOUS_SIZE or (is_size and self.backed_size_oblivious)
        if is_size and hint in (0, 1) and self.specialize_zero_one and not oblivious:
            return sympy.Integer(hint)
        if is_size:
            lo = 0 if oblivious or not self.specialize_zero_one else 2
            vr = ValueRanges(lo, int_oo)
        elif is_float:
            vr = ValueRanges.unknown()
        else:
            vr = ValueRanges(-int_oo, int_oo)
        if min is not None or max is not None:
            user = ValueRanges(-int_oo if min is None else min, int_oo if max is None else max)
            if hint not in user:
                raise InvalidHintError(
                    f"{source.pretty()} = {hint} is outside the range you gave for it "
                    f"[{user.lo}, {user.hi}]: pass an example inside the range or widen min/max")
            vr = vr & user
            if constraint is not None and constraint.vr is None:
                constraint.vr = user
        key = (hint, is_size)
        if dynamic is DimDynamic.DUCK and self.duck_shape and key in self._duck:
            sym = self._duck[key]
            if vr == self.var_to_range[sym] or vr.issubset(self.var_to_range[sym]):
                self.var_info[sym].sources.append(source)
                if vr != self.var_to_range[sym]:
                    self.outside_facts += 1
                self._update_range(sym, vr)
                if constraint is not None:
                    self.constraints.setdefault(sym, constraint)
                return sym
        sym = _symbol(self._nsym, "float" if is_float else "size" if is_size else "int")
        self._nsym += 1
        self.var_to_val[sym] = hint
        self.var_to_range[sym] = vr
        loc = user_location(2)
        self.var_info[sym] = SymbolInfo([source], dynamic, is_size and oblivious, loc, vr)
        if constraint is not None:
            constraint.hint = hint
            self.constraints[sym] = constraint
        if dynamic is DimDynamic.DUCK and key not in self._duck:
            self._duck[key] = sym
        if _th.on: _th.emit("create_symbol", self, sym, hint, source, vr, loc)  # noqa: E701
        if log.isEnabledFor(logging.INFO):
            at = f" at {loc.short()} in {loc.function}" if loc else ""
            log.info("create_symbol %s = %s for %s %s%s", sym, hint, source.name(), _vr_str(vr), at)
        self._changed()
        return sym

    def create_unbacked_symint(self, *, source: Source | None = None, size_like: bool = False,
                               min=None, max=None, description: str | None = None,
                               fallback: int | None = None) -> sympy.Symbol:
        """A symbol for an int known only at run time (`nonzero().size(0)`, `item()`).

        `fallback` only sizes meta tensors while tracing; it never decides anything."""
        sym = sympy.Symbol(f"u{self._nunbacked}", integer=True)
        self._nunbacked += 1
        vr = ValueRanges(0 if size_like else -int_oo, int_oo)
        if min is not None or max is not None:
            vr = vr & ValueRanges(-int_oo if min is None else min, int_oo if max is None else max)
        self.var_to_range[sym] = vr
        self._unbacked.add(sym)
        if fallback is None:  # small, so meta kernels accept it next to other sizes; >= 2 like sizes
            fallback = 2
        self.unbacked_fallback[sym] = fallback
        loc = user_location(2)
        self.var_info[sym] = SymbolInfo([source] if source else [], DimDynamic.UNBACKED, size_like, loc,
                                        description=description)
        if _th.on: _th.emit("create_unbacked_symbol", self, sym, vr, loc)  # noqa: E701
        if log.isEnabledFor(logging.INFO):
            log.info("create_unbacked_symint %s %s%s", sym, _vr_str(vr), f" at {loc.short()}" if loc else "")
        self._changed()
        return sym

    def create_unbacked_symfloat(self) -> sympy.Symbol:
        sym = sympy.Symbol(f"zuf{self._nunbacked}", real=True)
        self._nunbacked += 1
        self.var_to_range[sym] = ValueRanges.unknown()
        self._unbacked.add(sym)
        self.var_info[sym] = SymbolInfo([], DimDynamic.UNBACKED, False, user_location(2))
        log.info("create_unbacked_symfloat %s", sym)
        return sym

    def create_unbacked_symbool(self) -> sympy.Basic:
        u = self.create_unbacked_symint(min=0, max=1)
        return sympy.Eq(u, 1)

    def is_unbacked(self, sym: sympy.Symbol) -> bool:
        return sym not in self.var_to_val

    def is_size_like(self, sym: sympy.Symbol) -> bool:
        return self.var_info[sym].size_like if sym in self.var_info else False

    def mark_size_like(self, sym: sympy.Symbol) -> None:
        """`check_is_size`: the symbol is a size (>= 0, and >= 2 for size-oblivious checks)."""
        self.var_info[sym].size_like = True
        self.outside_facts += 1
        self._update_range(sym, ValueRanges(0, int_oo))

    def sources_of(self, sym: sympy.Symbol) -> list[Source]:
        return self.var_info[sym].sources if sym in self.var_info else []

    # ---------------------------------------------------------------- wrapped values
    def wrap(self, expr, pytype: type, hint=None):
        """An expression as this env's SymInt/SymFloat/SymBool, or a plain constant."""
        from .symnode import SymNode
        from .symtypes import wrap_node
        return wrap_node(SymNode(self.simplify(sympy.sympify(expr)), self, pytype, hint))

    def symint(self, hint, source: Source, dynamic: DimDynamic = DimDynamic.DUCK, min=None, max=None,
               *, is_size: bool = True, constraint: DimConstraint | None = None):
        """`create_symbol`, wrapped as a SymInt/SymFloat (a plain number when static)."""
        expr = self.create_symbol(hint, source, dynamic, min, max, is_size=is_size, constraint=constraint)
        return self.wrap(expr, float if isinstance(hint, float) else int, self.hint(expr))

    def unbacked_symint(self, *, size_like: bool = False, min=None, max=None, source=None):
        """`create_unbacked_symint`, wrapped as a SymInt."""
        sym = self.create_unbacked_symint(source=source, size_like=size_like, min=min, max=max)
        return self.wrap(sym, int, None)

    # ---------------------------------------------------------------- hints
    def hint(self, expr):
        """The expression's value on the example inputs, or None if it has unbacked symbols."""
        if isinstance(expr, (int, float, bool)):
            return expr
        expr = sympy.sympify(expr)
        if expr.is_Symbol:
            return self.var_to_val.get(expr)
        subs = {}
        for s in expr.free_symbols:
            v = self.var_to_val.get(s)
            if v is None:
                return None
            subs[s] = v
        return _to_python(expr.xreplace({s: sympy.sympify(v) for s, v in subs.items()}))

    def size_hint(self, expr):
        """The hint, with unbacked symbols at their fallback: only for sizing meta tensors."""
        v = self.hint(expr)
        if v is not None:
            return v
        expr = self.simplify(sympy.sympify(expr))
        subs = {s: sympy.Integer(self.var_to_val[s] if s in self.var_to_val else self._fallback(s))
                for s in expr.free_symbols}
        return _to_python(expr.xreplace(subs))

    def _fallback(self, s) -> int:
        """An unbacked symbol's meta size, inside what is known of its range when first asked, then
        fixed: meta tensors sized before a later fact (`if n > 2:` decided on data) stay consistent."""
        used = self.__dict__.setdefault("_fallback_used", {})
        if s in used:
            return used[s]
        v = self.unbacked_fallback.get(s, 2)
        vr = self.var_to_range.get(s)
        if vr is not None:
            if vr.hi != int_oo and v > vr.hi:
                v = int(vr.hi)
            if vr.lo != -int_oo and v < vr.lo:
                v = int(vr.lo)
        used[s] = v
        return v

    def describe(self, expr) -> str:
        """An expression in the user's terms: `x.nonzero().size(0) == 0` rather than `Eq(u0, 0)`."""
        from .printer import pyexpr

        def name(s):
            info = self.var_info.get(s)
            if info is not None and info.description:
                return info.description
            if info is not None and info.sources:
                return info.sources[0].pretty()
            return str(s)
        try:
            return pyexpr(expr, name)
        except (TypeError, ValueError):
            return sympy_str(expr)

    # ---------------------------------------------------------------- simplify
    def substitute(self, expr: sympy.Basic) -> sympy.Basic:
        """Apply replacements only (each is emitted as a guard of its own)."""
        if self.replacements and not expr.free_symbols.isdisjoint(self.replacements):
            return expr.xreplace(self.replacements)
        return expr

    def simplify(self, expr: sympy.Basic) -> sympy.Basic:
        """Apply replacements and known sub-expression values."""
        if expr.is_Number or expr.is_Boolean and expr in (sympy.true, sympy.false):
            return expr
        hit = self._simplify_cache.get(expr)
        if hit is not None:
            return hit
        out = expr
        if self.replacements and not out.free_symbols.isdisjoint(self.replacements):
            out = out.xreplace(self.replacements)
        if self.expr_subs:
            out = out.xreplace(self.expr_subs)
        self._simplify_cache[expr] = out
        return out

    # ---------------------------------------------------------------- deciding
    def _ranges(self, size_oblivious: bool, backed: bool = False) -> dict:
        if not size_oblivious:
            return self.var_to_range
        out = dict(self.var_to_range)
        # backed sizes have hints: their 0/1 questions get exact guards, unless `backed` (below)
        syms = self._unbacked if not backed else [s for s, i in self.var_info.items() if i.size_like]
        for s in syms:
            vr = out.get(s)
            if self.var_info[s].size_like and vr is not None and vr.lo < 2 <= vr.hi:  # a size known < 2 stays
                out[s] = ValueRanges(2, vr.hi)
        return out

    def static_value(self, expr: sympy.Basic, size_oblivious: bool = False):
        """The value of a condition or expression when it holds for every value the
        symbols can take (by ranges, replacements and facts); otherwise None. Adds no guard."""
        expr = self.simplify(sympy.sympify(expr))
        if expr.is_Number:
            return _to_python(expr)
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        key = (expr, size_oblivious)
        if key in self._static_cache:
            return self._static_cache[key]
        out = self._decide(expr, size_oblivious)
        self._static_cache[key] = out
        if out is not None:
            self.decisions[key] = out
        return out

    def _decide(self, expr, size_oblivious, backed: bool = False):
        ranges = self._ranges(size_oblivious, backed) if size_oblivious else self.var_to_range
        if isinstance(expr, sympy.And):
            vals = [self._decide(a, size_oblivious, backed) for a in expr.args]
            return False if False in vals else (True if all(v is True for v in vals) else None)
        if isinstance(expr, sympy.Or):
            vals = [self._decide(a, size_oblivious, backed) for a in expr.args]
            return True if True in vals else (False if all(v is False for v in vals) else None)
        if isinstance(expr, sympy.Not):
            v = self._decide(expr.args[0], size_oblivious, backed)
            return None if v is None else not v
        c = canon(expr) if isinstance(expr, sympy.Rel) else None
        if c is None:
            vr = bound_sympy(expr, ranges)
            return _to_python(vr.lo) if vr.is_singleton() else None
        kind, d0, k = c
        e, sign = normalise_sign(d0)
        vr = self._bound_linear(e, ranges)
        if sign < 0:
            vr = ValueRanges(-vr.hi, -vr.lo)
        target = -k  # the relation is: d0 kind target
        fast = target.is_Number and not vr.is_bool  # exact Python numbers: sympy compares ~50x slower
        lo, hi, t = (exact(vr.lo), exact(vr.hi), exact(target)) if fast else (vr.lo, vr.hi, target)
        if kind == LE:
            return True if hi <= t else (False if lo > t else None)
        if kind == LT:
            return True if hi < t else (False if lo >= t else None)
        equal = None
        if vr.is_singleton() and lo == t:
            equal = True
        elif not (lo <= t <= hi) or (e, sign * target) in self.not_equal:
            equal = False
        if equal is None:
            return None
        return equal if kind == EQ else not equal

    def implied_by_ranges(self, expr) -> bool:
        """True when the symbols' ranges alone (no facts on forms) prove `expr`."""
        saved = self.expr_ranges, self.not_equal
        self.expr_ranges, self.not_equal = {}, set()
        try:
            return self._decide(self.substitute(expr), False) is True
        finally:
            self.expr_ranges, self.not_equal = saved

    def _bound_linear(self, e, ranges):
        vr = bound_sympy(e, ranges)
        known = self.expr_ranges.get(e)
        if known is not None:
            vr = _intersect_or(vr, known)
        return vr

    def evaluate(self, expr, hint=None, *, size_oblivious: bool = False, location: Location | None = None,
                 speculate: bool = False):
        """Decide a condition (or an int/float expression) and return its Python value.

        Statically known answers add nothing; otherwise the example's value (hint)
        decides and a guard is recorded. Unbacked expressions raise DataDependentError.
        """
        expr = sympy.sympify(expr)
        v = self.static_value(expr, size_oblivious)
        if v is not None:
            return v
        expr = self.simplify(expr)
        if hint is None or expr.free_symbols & self._unbacked_set():
            hint = self.hint(expr)
        if hint is None:
            if speculate and self.speculate is not None and not self.framework_depth:
                v = self.speculate(expr, location)
                if v is not None:
                    return v
            raise self._data_dependent(expr, location)
        loc = location or user_location(2)
        if isinstance(hint, bool) or expr.is_Boolean or isinstance(expr, sympy.Rel):
            cond = expr if hint else _negate(expr)
            self.add_guard(cond, loc)
            return bool(hint)
        # an int or float expression converted to a concrete value: specialize it
        self.add_guard(sympy.Eq(expr, hint), loc)
        return hint

    def _unbacked_set(self) -> set:
        return self._unbacked

    def guard_int(self, expr, hint=None, location=None, speculate: bool = False):
        """`int(n)`/`__index__`: specialize to the example's value with an equality guard."""
        return self.evaluate(expr, hint, location=location or user_location(2), speculate=speculate)

    def statically_known_true(self, expr) -> bool:
        return self.static_value(expr) is True

    def guard_or_false(self, expr, hint=None) -> bool:
        """Decide by hint when there is one; False (no error) when the answer depends on data."""
        try:
            return bool(self.evaluate(expr, hint, location=user_location(2)))
        except DataDependentError:
            return False

    def guard_or_true(self, expr, hint=None) -> bool:
        try:
            return bool(self.evaluate(expr, hint, location=user_location(2)))
        except DataDependentError:
            return True

    def evaluate_size_oblivious(self, expr, hint=None):
        """Framework checks (is this dim 1?): size-like symbols count as >= 2."""
        v = self.static_value(expr, size_oblivious=True)
        if v is not None:
            return v
        return self.evaluate(expr, hint, location=user_location(2))

    def oblivious_value(self, expr):
        """`expr` decided with every size-like symbol, backed ones included (OBLIVIOUS_SIZE, export
        Dims whose range holds 0/1), counted as >= 2; None when that does not decide it. Adds no
        guard: for framework checks whose result is right either way (is this dim 1, to broadcast?)."""
        expr = self.simplify(sympy.sympify(expr))
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        if expr.free_symbols & self._unbacked_set():
            return None  # data-dependent sizes keep their runtime checks
        return self._decide(expr, True, backed=True)  # not in `decisions`: right at 0 and 1 too

    def _data_dependent(self, expr, location) -> DataDependentError:
        loc = location or user_location(3)
        unbacked = sorted((s for s in expr.free_symbols if s not in self.var_to_val), key=str)
        made = [f"{s} ({self.var_info[s].description or 'a data-dependent value'}) was produced at "
                f"{self.var_info[s].location}" for s in unbacked
                if s in self.var_info and self.var_info[s].location]
        at = f" at {loc}" if loc else ""
        cond = self.describe(expr)
        msg = (f"Could not decide `{cond}`{at}: it depends on data "
               f"({', '.join(map(str, unbacked))} known only when the code runs).\n"
               + "".join(f"  {m}\n" for m in made)
               + f"What to do: if the condition always holds, state it with `dynashape.check({cond})` "
                 "before this line; or compute both sides with torch.where; or move the branch "
                 "out of the compiled function.")
        return DataDependentError(msg, expr, loc)

    # ---------------------------------------------------------------- facts
    def add_guard(self, cond: sympy.Basic, location: Location | None = None) -> None:
        """Record that `cond` held on the example inputs, and learn from it."""
        cond = self.simplify(cond)
        if cond is sympy.true:
            return
        self.guards.append(Guard(cond, location))
        if _th.on: _th.emit("guard_added", self, cond, location)  # noqa: E701
        if log.isEnabledFor(logging.INFO):
            log.info("eval %s [guard added]%s", sympy_str(cond), f" at {location}" if location else "")
        self.add_fact(cond, location, guard=True)

    def expect_true(self, cond, message: str | None = None, location: Location | None = None) -> bool:
        """A fact the program asserts (`dynashape.check`): no guard, a runtime assert instead."""
        cond = self.simplify(sympy.sympify(cond))
        v = self.static_value(cond)
        loc = location or user_location(2)
        if v is True:
            return True
        if v is False or self.hint(cond) is False:
            at = f" at {loc}" if loc else ""
            raise RuntimeError(f"check failed{at}: {message or sympy_str(cond)}")
        self.runtime_asserts.append(RuntimeAssert(cond, message, loc))
        log.info("runtime_assert %s%s", sympy_str(cond), f" at {loc}" if loc else "")
        self.add_fact(cond, loc)
        return True

    def constrain_range(self, sym, min=None, max=None) -> None:
        vr = ValueRanges(-int_oo if min is None else min, int_oo if max is None else max)
        sym = self.simplify(sympy.sympify(sym))
        if sym.is_Number:
            if sym not in vr:
                raise ValueError(f"{sym} is not in [{vr.lo}, {vr.hi}]")
            return
        if not sym.is_Symbol:
            raise TypeError(f"constrain_range takes a symbol, got {sym}")
        self.outside_facts += 1
        self._update_range(sym, vr)

    def add_fact(self, cond, location=None, guard: bool = False) -> None:
        """Learn from a condition known true: ranges, replacements, facts on forms."""
        if not guard:
            self.outside_facts += 1
        self._loc = location
        try:
            self._learn(cond)
        finally:
            self._loc = None
        self._changed()

    def _learn(self, cond):
        if isinstance(cond, sympy.And):
            for a in cond.args:
                self._learn(a)
            return
        if isinstance(cond, sympy.Not):
            inner = cond.args[0]
            if isinstance(inner, sympy.Rel):
                self._learn(_negate(inner))
            return
        if not isinstance(cond, sympy.Rel):
            return
        c = canon(cond)
        if c is None:
            return
        kind, d0, k = c
        e, sign = normalise_sign(d0)
        target = -k * sign  # the relation on e: e (kind') target
        if kind == NE:
            self.not_equal.add((e, target))
            if e.is_Symbol:  # excluding an endpoint narrows the range
                vr = self.var_to_range.get(e)
                if vr is not None and e.is_integer:
                    if vr.lo == target:
                        self._update_range(e, ValueRanges(target + 1, vr.hi))
                    elif vr.hi == target:
                        self._update_range(e, ValueRanges(vr.lo, target - 1))
            return
        if kind == EQ:
            self._learn_equal(e, target)
            return
        # e <= target (sign > 0) or e >= target (sign < 0), strict for LT on floats
        vr = ValueRanges(-int_oo, target) if sign > 0 else ValueRanges(target, int_oo)
        self._restrict(e, vr)

    def _restrict(self, e, vr):
        """Intersect what is known about the linear form `e` with `vr`."""
        coeff, rest = e.as_coeff_Mul()
        if rest.is_Symbol and rest in self.var_to_range and coeff.is_Integer and coeff > 0:
            lo = vr.lo if vr.lo in (-int_oo,) else sympy.ceiling(vr.lo / coeff)
            hi = vr.hi if vr.hi in (int_oo,) else sympy.floor(vr.hi / coeff)
            self._update_range(rest, ValueRanges(lo, hi))
            return
        old = self.expr_ranges.get(e)
        new = vr if old is None else old & vr
        self.expr_ranges[e] = new
        if new.is_singleton() and not e.is_Add:
            if e.is_integer is True:
                self.expr_subs[e] = new.lo
            elif new.lo != 0:  # a float form: a float (0 stays the form: `v * 0` is -0.0 for v < 0)
                self.expr_subs[e] = sympy.Float(new.lo)
        if e.is_Add:
            self._propagate(e, new)

    def _propagate(self, e, vr):
        """From `e in vr` with e a sum, bound each symbol by the others' ranges:
        `s0 + s1 <= 10` with s1 >= 2 gives s0 <= 8."""
        for term in e.args:
            coeff, s = term.as_coeff_Mul()
            if not (s.is_Symbol and coeff.is_Integer and s in self.var_to_range):
                continue
            rest = bound_sympy(e - term, self.var_to_range)
            lo, hi = vr.lo - rest.hi, vr.hi - rest.lo  # range of coeff * s
            if coeff < 0:
                lo, hi, coeff = -hi, -lo, -coeff
            lo = lo if lo in (-int_oo, int_oo) or lo.is_infinite else sympy.ceiling(lo / coeff)
            hi = hi if hi in (-int_oo, int_oo) or hi.is_infinite else sympy.floor(hi / coeff)
            if lo == -int_oo and hi == int_oo:
                continue
            try:
                self._update_range(s, ValueRanges(lo, hi))
            except (ValueError, AssertionError):
                pass  # nan/oo corner cases: keep what we know

    def _learn_equal(self, e, value):
        if e.is_Symbol:
            self._set_replacement(e, value, "solve")
            return
        if isinstance(e, Mod) and value == 0:
            self.expr_subs[e] = sympy.Integer(0)
            self.expr_ranges[e] = ValueRanges(0, 0)
            return
        sym, solution = self._solve(e, value)
        if sym is not None:
            self._set_replacement(sym, solution, "solve")
        else:
            self._restrict(e, ValueRanges(value, value))

    def _solve(self, e, value):
        """Pick a symbol to eliminate from `e == value`: linear, coefficient +-1;
        prefer unbacked, then the newest symbol, and never replace a backed symbol
        by an unbacked expression."""
        if not e.is_Add:
            coeff, rest = e.as_coeff_Mul()
            if rest.is_Symbol and coeff in (1, -1):
                return rest, sympy.Integer(value) * coeff
            return None, None
        cands = []
        for term in e.args:
            coeff, rest = term.as_coeff_Mul()
            if rest.is_Symbol and coeff in (1, -1) and rest in self.var_to_range:
                others = e - term
                if rest in others.free_symbols:
                    continue
                cands.append((rest, (value - others) * coeff))
        unbacked = self._unbacked_set()
        best = None
        for sym, sol in cands:
            if sym not in unbacked and sol.free_symbols & unbacked:
                continue
            rank = (sym in unbacked, _index(sym))
            if best is None or rank > best[0]:
                best = (rank, sym, sol)
        return (best[1], best[2]) if best else (None, None)

    def _set_replacement(self, sym, expr, reason):
        expr = self.simplify(sympy.sympify(expr))
        if expr == sym:
            return
        if expr.is_Number and sym.is_integer is not True:  # a float symbol, backed or from .item()
            if expr == 0 and sym in self._unbacked_set():
                return  # -0.0 == 0: the value stays the call's own (a backed one's guard refuses -0.0)
            expr = sympy.Float(expr)  # a float argument equal to 0 is 0.0 where the program returns it
        old_vr = self.var_to_range[sym]
        if expr.is_Number and expr not in old_vr:
            # contradicts what we knew: only possible for a bad fact; keep it loud
            raise AssertionError(f"{sym} = {expr} contradicts its range {old_vr}")
        self.replacements[sym] = expr
        self.replacement_locations[sym] = self._loc
        if _th.on and expr.is_Number: _th.emit("specialization", self, sym, expr, reason, self._loc)  # noqa: E701
        for k, v in list(self.replacements.items()):
            if k is not sym and sym in v.free_symbols:
                self.replacements[k] = v.xreplace({sym: expr})
        if log.isEnabledFor(logging.INFO):
            log.info("set_replacement %s = %s (%s)", sym, expr, reason)
        self._changed()
        if expr.is_Number:
            self._check_constraint(sym, ValueRanges(expr, expr))
            for k, v in self.replacements.items():
                if v.is_Number and k in self.constraints and k is not sym:
                    self._check_constraint(k, ValueRanges(v, v))
        else:  # carry the old range over to the expression
            con = self.constraints.get(sym)
            if con is not None and not con.allow_relations and not con.warn_only:
                if not any(v.symbol == sym for v in self.violations):
                    self.violations.append(Violation(
                        sym, con, f"is tied to other dims: {sym} = {sympy_str(expr)}", self._loc,
                        f"declare {con.source.pretty()} as a dim derived from the one it equals",
                        "relation", expr))
            if old_vr.lo != -int_oo:
                self._learn(sympy.Ge(expr, old_vr.lo, evaluate=False))
            if old_vr.hi != int_oo:
                self._learn(sympy.Le(expr, old_vr.hi, evaluate=False))

    def _update_range(self, sym, vr):
        if sym in self.replacements:
            rep = self.replacements[sym]
            if not rep.is_Number:
                if vr.lo != -int_oo:
                    self._learn(sympy.Ge(rep, vr.lo, evaluate=False))
                if vr.hi != int_oo:
                    self._learn(sympy.Le(rep, vr.hi, evaluate=False))
            return
        old = self.var_to_range[sym]
        new = _intersect_or(old, vr)
        if new == old:
            return
        self.var_to_range[sym] = new
        if new.lo != old.lo:
            self.bound_locations[(sym, "lo")] = self._loc
        if new.hi != old.hi:
            self.bound_locations[(sym, "hi")] = self._loc
        if log.isEnabledFor(logging.INFO):
            log.info("_update_var_to_range %s = %s (update)", sym, new)
        self._changed()
        self._check_constraint(sym, new)
        if new.is_singleton():
            self._set_replacement(sym, new.lo, "range_refined_to_singleton")

    def _check_constraint(self, sym, new):
        con = self.constraints.get(sym)
        if con is None:
            return
        loc = self._loc
        if new.is_singleton():
            kind, value = "specialized", new.lo
            detail = f"specialized to {new.lo}"
            sug = (f"the code needs {con.source.pretty()} == {new.lo}: remove the dynamic mark, "
                   f"or use maybe_mark_dynamic to allow specialization")
        elif con.vr is not None and not con.vr.issubset(new):
            kind, value = "narrowed", new
            detail = f"narrowed to [{new.lo}, {new.hi}], inside the requested [{con.vr.lo}, {con.vr.hi}]"
            sug = f"declare the range min={new.lo if new.lo != -int_oo else None}, " \
                  f"max={new.hi if new.hi != int_oo else None}"
        else:
            return
        if any(v.symbol == sym for v in self.violations):
            return  # one report per dim: the first line that specialized it
        v = Violation(sym, con, detail, loc, sug, kind, value)
        if con.warn_only:  # automatic dynamic: a specialization is allowed, and logged
            log.info("specialization of a dynamic dim: %s", v)
            return
        self.violations.append(v)

    def raise_constraint_violations(self) -> None:
        """Raise one ConstraintViolationError listing every violated dynamic mark."""
        raise_violations(self.violations)

    def _changed(self):
        self.generation += 1
        self._static_cache.clear()
        self._simplify_cache.clear()

    def bound(self, expr) -> ValueRanges:
        """The range of an expression given everything known (read as a fact: widen.py cannot check it)."""
        self.outside_facts += 1
        expr = self.simplify(sympy.sympify(expr))
        e, sign = normalise_sign(expr.as_coeff_Add()[1]) if expr.is_Add else (expr, 1)
        if expr.is_Add:
            c = expr.as_coeff_Add()[0]
            vr = self._bound_linear(e, self.var_to_range)
            vr = vr if sign > 0 else ValueRanges(-vr.hi, -vr.lo)
            return ValueRanges(vr.lo + c, vr.hi + c)
        return bound_sympy(expr, self.var_to_range)


def _index(sym) -> int:
    name = sym.name.lstrip("zuf").lstrip("su")
    return int(name) if name.isdigit() else -1


def _negate(expr):
    if isinstance(expr, sympy.Rel):
        c = canon(expr)
        if c is not None:
            kind, d0, k = c
            return rebuild(*negate(kind, d0, k, bool(d0.is_integer)))
    return sympy.Not(expr)


def _intersect_or(a: ValueRanges, b: ValueRanges) -> ValueRanges:
    try:
        return a & b
    except ValueError:
        raise AssertionError(f"contradictory ranges {a} and {b}") from None


def _to_python(v):
    if v is sympy.true or v is True:
        return True
    if v is sympy.false or v is False:
        return False
    if isinstance(v, sympy.Basic):
        if v.is_Integer:
            return int(v)
        if v.is_Number:
            return float(v)
        return None
    return v


def _vr_str(vr: ValueRanges) -> str:
    return repr(vr)[2:] if repr(vr).startswith("VR") else repr(vr)

