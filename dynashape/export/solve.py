"""From what the trace learned to torch.export's verdict on the user's dims.

After the trace, each Dim is compared with what the ShapeEnv knows about its
symbol: replaced by a number (the program needs it static), replaced by an
expression of other symbols (the program ties it to another dim), or its range
narrowed (the program only works for part of the declared range). Guards that
no range or relation expresses (`x.size(0) % 2 == 0`, `s0 < s1`) are violations
for Dims, and input checks of the exported program for AUTO/DYNAMIC dims.

The error reads like torch.export's, with fixes to paste:

    Constraints violated (dim)! For more information, run with DYNASHAPE_LOGS="+dynamic".
      - Not all values of dim = L['x'].size()[0] in the specified range dim >= 3 satisfy the
        generated guard L['x'].size()[0] <= 6 (at model.py:4 'if x.shape[0] <= 6:').
    Suggested fixes:
      dim = Dim('dim', min=3, max=6)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from ..symbolic.errors import ConstraintViolationError
from ..symbolic.functions import FloorDiv, Mod
from ..symbolic.ranges import bound_sympy
from ..symbolic.printer import pyexpr
from ..symbolic.ranges import ValueRanges, int_oo
from ..symbolic.relations import EQ, canon
from ..symbolic.shape_env import ShapeEnv
from ..symbolic.userloc import Location
from .dims import MIN_DYNAMIC, _affine_str
from .spec import Root, Site


@dataclass
class ExportViolation:
    kind: str  # "specialized" | "relation" | "narrowed" | "guard"
    names: list[str]  # the dims it concerns, for the heading
    detail: str  # one line of the body
    suggestions: list[str] = field(default_factory=list)  # code to paste (or a `# comment`)
    location: Location | None = None


@dataclass
class InputCheck:
    """A condition on input sizes the exported program checks before it runs."""

    expr: sympy.Basic  # over the program's symbols
    text: str  # in PyTorch's notation over the inputs
    location: Location | None = None


def _at(loc) -> str:
    return f" (at {loc})" if loc else ""


def _range_text(name: str, vr: ValueRanges) -> str:
    lo = None if vr.lo == -int_oo else vr.lo
    hi = None if vr.hi == int_oo else vr.hi
    if lo is not None and hi is not None:
        return f"{lo} <= {name} <= {hi}"
    if lo is not None:
        return f"{name} >= {lo}"
    return f"{name} <= {hi}" if hi is not None else f"any value of {name}"


def _dim_code(name: str, vr: ValueRanges) -> str:
    args = [repr(name)]
    if vr.lo != -int_oo and vr.lo > MIN_DYNAMIC:
        args.append(f"min={vr.lo}")
    if vr.hi != int_oo:
        args.append(f"max={vr.hi}")
    return f"{name} = Dim({', '.join(args)})"


def _affine(expr: sympy.Expr):
    """(symbol, a, b) when expr == a*symbol + b with integers a, b; else None."""
    free = expr.free_symbols
    if len(free) != 1:
        return None
    (sym,) = free
    poly = sympy.Poly(expr, sym) if expr.is_polynomial(sym) else None
    if poly is None or poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer):
        return None
    return sym, int(a), int(b)


ENUMERATE_MAX = 2048  # a one-symbol guard over at most this many values is checked value by value


def holds_on_ranges(expr, ranges) -> bool:
    """True when `expr` holds for every value of its symbols in `ranges`, proved more closely than
    interval arithmetic alone: `a // k` becomes `(a - m) / k` and `a % k` becomes `m` with a fresh
    `m` in [0, k-1], so `s - s // 2 >= 1` is seen as `s/2 + m/2 >= 1`; a guard of one symbol over a
    small range is checked at every value.

    >>> s = sympy.Symbol("s", integer=True)
    >>> holds_on_ranges(sympy.Ge(s - FloorDiv(s, 2), 1), {s: ValueRanges(2, 64)})
    True
    """
    if isinstance(expr, sympy.And):
        return all(holds_on_ranges(a, ranges) for a in expr.args)
    if not isinstance(expr, sympy.Rel) or not all(s in ranges for s in expr.free_symbols):
        return False
    for prove in (_holds_without_division, _holds_at_every_value):
        try:
            if prove(expr, ranges):
                return True
        except (TypeError, ValueError, ZeroDivisionError, RecursionError):  # sympy could not decide a part
            pass
    return False


def _holds_without_division(expr, ranges) -> bool:
    ranges = dict(ranges)
    rests: dict = {}
    for _ in range(16):
        inner = [f for f in expr.atoms(FloorDiv, Mod) if not f.args[0].atoms(FloorDiv, Mod)]
        inner = [f for f in inner if f.args[1].is_Integer and f.args[1] > 0]
        if not inner:
            break
        sub = {}
        for f in inner:
            a, k = f.args
            m = rests.get((a, k))
            if m is None:
                m = rests[(a, k)] = sympy.Dummy("m", integer=True)
                ranges[m] = ValueRanges(0, int(k) - 1)
            sub[f] = (a - m) / k if isinstance(f, FloorDiv) else m
        expr = expr.xreplace(sub)
    if expr.atoms(FloorDiv, Mod):
        return False
    vr = bound_sympy(sympy.expand(expr.lhs - expr.rhs), ranges)
    if isinstance(expr, sympy.Ge):
        return bool(vr.lo >= 0)
    if isinstance(expr, sympy.Gt):
        return bool(vr.lo > 0)
    if isinstance(expr, sympy.Le):
        return bool(vr.hi <= 0)
    if isinstance(expr, sympy.Lt):
        return bool(vr.hi < 0)
    if isinstance(expr, sympy.Ne):
        return bool(vr.lo > 0 or vr.hi < 0)
    return False


def _holds_at_every_value(expr, ranges) -> bool:
    if len(expr.free_symbols) != 1:
        return False
    (sym,) = expr.free_symbols
    vr = ranges[sym]
    if vr.lo == -int_oo or vr.hi == int_oo or int(vr.hi) - int(vr.lo) >= ENUMERATE_MAX:
        return False
    return all(expr.xreplace({sym: sympy.Integer(v)}) is sympy.true for v in range(int(vr.lo), int(vr.hi) + 1))


class Solver:
    def __init__(self, env: ShapeEnv, sites: list[Site], roots: dict[str, Root]):
        self.env = env
        self.sites = sites
        self.roots = roots
        self.root_of = {r.symbol: r for r in roots.values()}  # strict Dims by symbol
        self.dynamic_of = {s.expr: s for s in sites if s.kind == "DYNAMIC" and s.expr is not None}
        self.violations: list[ExportViolation] = []
        self.checks: list[InputCheck] = []
        self.pins: dict = {}  # AUTO symbols a guard holds to one value (`int(x.size(0) / 1) == 28`)

    # ------------------------------------------------------------ spelling
    def source_name(self, sym) -> str:
        srcs = self.env.sources_of(sym)
        return srcs[0].name() if srcs else str(sym)

    def dim_name(self, sym) -> str:
        """A Dim's name; otherwise the input size it came from, in PyTorch's notation."""
        r = self.root_of.get(sym)
        return r.name if r is not None else self.source_name(sym)

    def named(self, expr) -> str:
        return pyexpr(expr, self.dim_name)

    def over_inputs(self, expr) -> str:
        return pyexpr(expr, self.source_name)

    # ------------------------------------------------------------ analysis
    def run(self) -> tuple[list[InputCheck], dict]:
        for r in self.roots.values():
            self.root(r)
        for s in self.sites:
            if s.kind == "DYNAMIC" and s.expr is not None:
                self.dynamic_site(s)
        self.guards()
        if self.violations:
            raise ConstraintViolationError(self.message(), self.violations)
        return self.checks, self.pins

    def root(self, r: Root, pinned=None) -> None:
        env, sym = self.env, r.symbol
        rep = env.replacements.get(sym) if pinned is None else sympy.Integer(pinned[0])
        loc = env.replacement_locations.get(sym) if pinned is None else pinned[1]
        if rep is not None and rep.is_Number:
            value = int(rep)
            lines = [f"solving the guards generated for {s.spec} resulted in a specialized value of "
                     f"{s.spec.coeff * value + s.spec.offset} ({s.arg_path})" for s in r.sites]
            v = ExportViolation("specialized", [r.name], lines[0] + _at(loc), [f"{r.name} = {value}"], loc)
            self.violations.append(v)
            self.violations += [ExportViolation("specialized", [r.name], ln) for ln in lines[1:]]
        elif rep is not None:
            others = sorted(rep.free_symbols, key=str)
            related = ", ".join(f"{self.dim_name(o)}" + (f" = {self.source_name(o)}" if o in self.root_of else "")
                                for o in others)
            detail = (f"The values of {r.name} = {r.source.name()} must always be related to the values of "
                      f"{related} by {r.name} = {self.named(rep)}{_at(loc)}.")
            aff = _affine(rep)
            if aff is not None and aff[0] in self.root_of and aff[1] >= 1:
                fix = f"{r.name} = {_affine_str(self.root_of[aff[0]].name, aff[1], aff[2])}"
            else:
                fix = (f"# {r.name} equals {self.named(rep)}, which is not an increasing affine form of one "
                       f"Dim: use Dim.AUTO for the sizes marked {r.name}, or mark the other sizes with Dims "
                       f"and derive {r.name} from them")
            self.violations.append(ExportViolation("relation", [r.name], detail, [fix], loc))
        else:
            vr, declared = env.var_to_range[sym], r.declared
            if declared.issubset(vr):
                return
            guard, loc = self.narrowing(sym, vr, declared, r.source.name())
            detail = (f"Not all values of {r.name} = {r.source.name()} in the specified range "
                      f"{_range_text(r.name, declared)} satisfy the generated guard {guard}{_at(loc)}.")
            self.violations.append(ExportViolation("narrowed", [r.name], detail, [_dim_code(r.name, vr)], loc))

    def narrowing(self, sym, vr, declared, spelled):
        env = self.env
        parts, loc = [], None
        if vr.lo > declared.lo:
            parts.append(f"{spelled} >= {vr.lo}")
            loc = env.bound_locations.get((sym, "lo"))
        if vr.hi < declared.hi:
            parts.append(f"{spelled} <= {vr.hi}")
            loc = env.bound_locations.get((sym, "hi")) or loc
        return " and ".join(parts), loc

    def dynamic_site(self, s: Site, pinned=None) -> None:
        env = self.env
        sym = s.expr
        rep = env.replacements.get(sym) if pinned is None else sympy.Integer(pinned[0])
        name = s.source.pretty()
        if rep is not None and rep.is_Number:
            loc = env.replacement_locations.get(sym) if pinned is None else pinned[1]
            detail = (f"You marked {s.arg_path} as dynamic with Dim.DYNAMIC ({s.spec_path}), but your code "
                      f"specialized it to be a constant ({int(rep)}){_at(loc)}. If this is intended, use "
                      f"Dim.STATIC or Dim.AUTO for it.")
            fix = f"# {s.spec_path}: use Dim.STATIC (or {int(rep)}, or Dim.AUTO) instead of Dim.DYNAMIC"
            self.violations.append(ExportViolation("specialized", [name], detail, [fix], loc))
        elif rep is None and (s.spec.min is not None or s.spec.max is not None):
            declared = ValueRanges(max(MIN_DYNAMIC, s.spec.min or 0), int_oo if s.spec.max is None else s.spec.max)
            vr = env.var_to_range[sym]
            if declared.issubset(vr):
                return
            guard, loc = self.narrowing(sym, vr, declared, s.source.name())
            detail = (f"Not all values of {s.arg_path} in the specified range {_range_text(name, declared)} "
                      f"satisfy the generated guard {guard}{_at(loc)}.")
            lo = "" if vr.lo <= MIN_DYNAMIC else f"min={vr.lo}"
            hi = "" if vr.hi == int_oo else f"max={vr.hi}"
            fix = f"# {s.spec_path}: use Dim.DYNAMIC({', '.join(x for x in (lo, hi) if x)})"
            self.violations.append(ExportViolation("narrowed", [name], detail, [fix], loc))

    def guards(self) -> None:
        """Guards that no range or relation captured: violations for Dims, input checks otherwise."""
        env = self.env
        seen = set()
        for g in env.guards:
            expr = env.substitute(g.expr)
            if expr is sympy.true or expr in seen:
                continue
            seen.add(expr)
            if any(env.is_unbacked(s) for s in expr.free_symbols):
                continue  # data-dependent: the graph's own runtime asserts cover it
            if env.implied_by_ranges(expr) or holds_on_ranges(expr, env.var_to_range):
                continue  # the symbols' (declared) ranges hold it (e.g. a bound the range absorbed)
            value = self.pinned(expr)
            if value is not None:  # not a replacement, but only one value passes: a specialization
                (sym,) = expr.free_symbols
                if sym in self.root_of:
                    self.root(self.root_of[sym], (value, g.location))
                elif sym in self.dynamic_of:
                    self.dynamic_site(self.dynamic_of[sym], (value, g.location))
                else:
                    self.pins[sym] = value
                continue
            strict = sorted((s for s in expr.free_symbols if s in self.root_of), key=str)
            text = self.over_inputs(expr)
            if not strict:
                self.checks.append(InputCheck(expr, text, g.location))
                continue
            names = [self.root_of[s].name for s in strict]
            detail = (f"Not all values of {', '.join(names)} satisfy the generated guard {text}"
                      f"{_at(g.location)}.")
            self.violations.append(ExportViolation("guard", names, detail, self.guard_fix(expr, names),
                                                   g.location))

    def pinned(self, expr):
        """The one value of its symbol that satisfies an equality guard, if no neighbour does
        (`int(s0 / 1) == 28`); None otherwise."""
        if not isinstance(expr, sympy.Eq) or len(expr.free_symbols) != 1:
            return None
        (sym,) = expr.free_symbols
        hint, vr = self.env.var_to_val.get(sym), self.env.var_to_range[sym]
        if not isinstance(hint, int):
            return None
        for v in range(hint - 64, hint + 65):
            if v == hint or v not in vr:
                continue
            try:
                holds = expr.xreplace({sym: sympy.Integer(v)})
            except Exception:
                return None
            if holds is not sympy.false:
                return None
        return hint

    def guard_fix(self, expr, names) -> list[str]:
        c = canon(expr) if isinstance(expr, sympy.Rel) else None
        if c is not None and c[0] == EQ and isinstance(c[1], Mod) and c[2] == 0:
            base, k = c[1].args
            if base in self.root_of and k.is_Integer:
                r = self.root_of[base]
                vr = self.env.var_to_range[base]
                k = int(k)
                lo = max(MIN_DYNAMIC, -(-int(vr.lo) // k))
                inner = ValueRanges(lo, int_oo if vr.hi == int_oo else int(vr.hi) // k)
                return [_dim_code(f"_{r.name}", inner), f"{r.name} = {k}*_{r.name}"]
        return [f"# {', '.join(names)}: no Dim range or relation expresses this guard; use Dim.AUTO for "
                f"{'these dims' if len(names) > 1 else 'it'}, or change the program"]

    # ------------------------------------------------------------ the message
    def message(self) -> str:
        violated = [v for v in self.violations if v.kind != "specialized"]
        special = [v for v in self.violations if v.kind == "specialized"]
        lines = []
        hint = ' For more information, run with DYNASHAPE_LOGS="+dynamic".'
        if violated:
            lines.append(f"Constraints violated ({', '.join(_names(violated))})!{hint}")
            lines += [f"  - {v.detail}" for v in violated]
        if special:
            lines.append(f"Specializations unexpectedly required ({', '.join(_names(special))})!"
                         + ("" if violated else hint))
            lines += [f"  - {v.detail}" for v in special]
        fixes = []
        order = {"narrowed": 0, "guard": 1, "specialized": 2, "relation": 3}
        for v in sorted(self.violations, key=lambda v: order[v.kind]):
            for f in v.suggestions:
                if f not in fixes:
                    fixes.append(f)
        if fixes:
            lines.append("Suggested fixes:")
            lines += [f"  {f}" for f in fixes]
        return "\n".join(lines)


def _names(vs) -> list[str]:
    return list(dict.fromkeys(n for v in vs for n in v.names))


def solve(env: ShapeEnv, sites: list[Site], roots: dict[str, Root]) -> tuple[list[InputCheck], dict]:
    """Raise ConstraintViolationError for dims the program does not keep as declared;
    return the checks the exported program must make on its inputs, and the AUTO symbols
    a guard pins to one value (they become static)."""
    return Solver(env, sites, roots).run()


__all__ = ["ExportViolation", "InputCheck", "solve"]
