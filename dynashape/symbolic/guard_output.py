"""Turning a ShapeEnv's knowledge into guards over sources, in PyTorch's notation.

`produce_guards(env)` lists what must hold for a trace to be reused:
duck-sizing equalities (`L['y'].size()[0] == L['x'].size()[0]`),
specializations (`L['x'].size()[0] == 4`), every recorded guard
(`L['x'].size()[0] <= 30`) and range bounds (`2 <= L['x'].size()[0]`).
`compile_guards` makes one Python predicate of them; `explain_failure`
says in words which one failed and with what values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy

from .printer import is_atom_text, pyexpr
from .ranges import int_oo
from .sources import Source
from .userloc import Location, evaluate


@dataclass
class ShapeGuard:
    code: str  # Python over L: `L['x'].size()[0] <= 30`
    sources: list[Source] = field(default_factory=list)  # the values it reads, for messages
    location: Location | None = None  # the user's line that added it
    why: str = ""  # for guards not from a user line: "sizes 0 and 1 are specialized"
    bounds: tuple | None = None  # a range guard: (lo, hi, lo_location, hi_location), None ends open

    def __str__(self) -> str:
        return self.code


def produce_guards(env, source_code=None) -> list[ShapeGuard]:
    """Every shape guard of the trace, as Python expressions over sources.

    `source_code(source)` spells a source in the output (default: `source.name()`,
    PyTorch's notation); the guard compiler passes local variable names instead.
    """
    return _render(_templates(env), source_code or (lambda s: s.name()))


def produce_guard_spellings(env, *spellings) -> list[list[ShapeGuard]]:
    """`[produce_guards(env, spell) for spell in spellings]` (None: PyTorch's notation), working
    out the guards once: only their spelling differs."""
    found = _templates(env)
    return [_render(found, spell or (lambda s: s.name())) for spell in spellings]


_TOKEN = re.compile("__dsTOK([0-9]+)__")


def _bound(v) -> str:
    """A range bound as text: an int's digits without sympy's printer."""
    return str(int(v)) if type(v) is int or getattr(v, "is_Integer", False) else str(v)


def _name(sym) -> str:
    """A symbol's name: what `str(sym)` gives, without sympy's printer (~10 us a call cold)."""
    return sym.name


def _render(found, spell) -> list[ShapeGuard]:
    """The templates of `_templates` with each source spelled by `spell`."""
    sources, templates = found
    names = [n if is_atom_text(n) else f"({n})" for n in map(spell, sources)]
    out = []
    for code, srcs, location, why, bounds in templates:
        out.append(ShapeGuard(_TOKEN.sub(lambda m: names[int(m.group(1))], code), list(srcs), location, why,
                              bounds))
    return out


def _templates(env):
    """(sources, [(code, sources, location, why, bounds)]): each guard once, its code with every
    source written as a token (`__dsTOK3__` for sources[3]; the code holds no other name)."""
    sources: list[Source] = []
    index: dict = {}

    def spell(src):
        i = index.get(src)
        if i is None:
            i = index[src] = len(sources)
            sources.append(src)
        return f"__dsTOK{i}__"

    primary: dict[sympy.Symbol, Source] = {}
    for sym, info in env.var_info.items():
        if info.sources and sym not in env._unbacked:
            primary[sym] = info.sources[0]

    def name_of(sym):
        return spell(primary[sym])

    def printable(expr) -> bool:
        return all(s in primary for s in expr.free_symbols)

    out: list = []
    seen: set[str] = set()

    def emit(code, srcs, location=None, why="", bounds=None):
        if code not in seen:
            seen.add(code)
            out.append((code, srcs, location, why, bounds))

    for sym, info in env.var_info.items():
        if sym not in primary:
            continue
        rep = env.replacements.get(sym)
        if rep is not None:
            if not printable(rep):
                continue
            for src in info.sources:
                why = "specialized" if rep.is_Number else "related to other sizes"
                syms = [sym] + sorted(rep.free_symbols, key=_name)
                emit(f"{spell(src)} == {pyexpr(rep, name_of)}", [primary[s] for s in syms if s in primary],
                     env.replacement_locations.get(sym), why)
                primary.setdefault(sym, src)
        else:
            for src in info.sources[1:]:
                emit(f"{spell(src)} == {spell(primary[sym])}", [src, primary[sym]], None,
                     "sizes equal at compile time share one symbol (duck sizing)")

    for g in env.guards:
        expr = env.substitute(g.expr)  # not the facts learned from this very guard
        if expr is sympy.true or not printable(expr):
            continue
        if env.implied_by_ranges(expr):
            continue  # the range guards below imply it (proven, never assumed: a guard learned
            # while it had two symbols narrowed no range, even if a replacement left it one)
        emit(pyexpr(expr, name_of), [primary[s] for s in sorted(expr.free_symbols, key=_name) if s in primary],
             g.location)

    for sym, info in env.var_info.items():
        if sym not in primary or sym in env.replacements:
            continue
        vr = env.var_to_range[sym]
        lo = None if vr.lo == -int_oo else vr.lo
        hi = None if vr.hi == int_oo else vr.hi
        if lo is None and hi is None:
            continue
        code = name_of(sym)
        code = (f"{_bound(lo)} <= " if lo is not None else "") + code + (f" <= {_bound(hi)}" if hi is not None else "")
        lo_loc, hi_loc = env.bound_locations.get((sym, "lo")), env.bound_locations.get((sym, "hi"))
        why = "sizes 0 and 1 are specialized" if lo == 2 and lo_loc is None else "range of the symbol"
        if code not in seen:
            seen.add(code)
            out.append((code, [primary[sym]], None, why, (lo, hi, lo_loc, hi_loc)))
    return sources, out


def compile_guards(guards: list[ShapeGuard], name: str = "shape_guards"):
    """One Python predicate `fn(L) -> bool` checking every guard (no sympy at call time)."""
    body = " and ".join(f"({g.code})" for g in guards) or "True"
    src = (f"def {name}(L, G=None):\n    try:\n        return {body}\n"
           "    except Exception:  # a guard that cannot be evaluated (e.g. x // 0) fails\n        return False\n")
    ns: dict = {}
    exec(compile(src, f"<dynashape-guards {name}>", "exec"), ns)
    fn = ns[name]
    fn.source = src
    return fn


def explain_failure(guards: list[ShapeGuard], L: dict, G: dict | None = None, C=None) -> str | None:
    """In words, the first guard that fails on `L` and the values it read; None if all hold.
    `G` and `C` are the function's globals and closure cells, for sources that read them."""
    ns = {"L": L, "G": G, "C": C}
    for g in guards:
        try:
            ok = evaluate(g.code, ns)
        except Exception as e:  # a source that no longer exists
            return f"{g.code} could not be checked ({type(e).__name__}: {e})"
        if ok:
            continue
        if g.bounds is not None:
            return _explain_range(g, ns)
        values = []
        for s in dict.fromkeys(g.sources):
            try:
                values.append(f"{s.pretty()} = {evaluate(s.name(), ns)}")
            except Exception:
                pass
        msg = f"{g.code} failed ({', '.join(values)})"
        if g.location is not None:
            msg += f"; added at {g.location}"
        elif g.why:
            msg += f"; {g.why}"
        return msg
    return None


def _explain_range(g: ShapeGuard, ns) -> str:
    lo, hi, lo_loc, hi_loc = g.bounds
    src = g.sources[0]
    v = evaluate(src.name(), ns)
    if isinstance(v, float) and v != v:  # nan: outside every range (sympy refuses to compare it)
        return f"{g.code} failed ({src.pretty()} = nan)" + (f"; added at {g.location}" if g.location else "")
    if hi is not None and v > hi:
        msg = f"{src.name()} <= {hi} failed ({src.pretty()} = {v})"
        return msg + (f"; added at {hi_loc}" if hi_loc else "")
    msg = f"{src.name()} >= {lo} failed ({src.pretty()} = {v})"
    if lo_loc:
        return msg + f"; added at {lo_loc}"
    return msg + ("; sizes 0 and 1 are specialized" if lo == 2 else
                  "; size 0 is specialized (this graph, traced for sizes >= 2, took size 1)" if lo == 1 else "")
