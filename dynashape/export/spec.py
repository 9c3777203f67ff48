"""Parsing and checking a `dynamic_shapes` spec against the example inputs.

The spec mirrors the inputs: a dict keyed by argument name or a tuple/list by
position; per tensor a dict `{dim: spec}` or a tuple/list with one spec per
dim; containers nest like the inputs. `resolve_spec` walks it next to the
example values and returns one `Site` per input dim (or int) that the spec
makes symbolic; `plan_roots` checks the example sizes against the Dims (same
Dim, same size; derived dims of the right form; inside the ranges) and
`create_symbols` makes the ShapeEnv symbols the trace will use.

Every malformed spec raises `SpecError` (a ValueError) naming the path into it:

    dynamic_shapes['x'][2]: dim 2 is out of range for args[0], a tensor of rank 2
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from functools import cached_property

import sympy
import torch

from ..symbolic.errors import DynashapeError
from ..symbolic.ranges import ValueRanges, int_oo
from ..symbolic.shape_env import DimConstraint, DimDynamic, ShapeEnv
from ..symbolic.sources import ItemSource, LocalSource, SizeSource, Source
from .dims import MIN_DYNAMIC, DerivedDim, Dim, DimHint, _is_int


class SpecError(DynashapeError, ValueError):
    """A `dynamic_shapes` spec that does not fit the inputs, or examples that do not fit it."""


@dataclass(frozen=True, eq=True)
class RootSource(Source):
    """The source of a Dim that no input has as a size (only derived dims of it appear)."""

    dim_name: str

    @cached_property
    def _name(self) -> str:
        return self.dim_name

    @cached_property
    def _pretty(self) -> str:
        return self.dim_name


# ---------------------------------------------------------------------------- argument paths
class ArgPaths:
    """Spells an input by how the caller passed it: `args[1][0]`, `kwargs['mask']`.

    Keys are paths into the bound arguments `L`: `("ys", 0)` is item 0 of argument `ys`.
    """

    def __init__(self, sig: inspect.Signature, args: tuple, kwargs: dict):
        self.where: dict[str, str] = {}
        params = list(sig.parameters.values())
        self.var_pos = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
        self.var_kw = next((p.name for p in params if p.kind is p.VAR_KEYWORD), None)
        self.npos = 0
        for p in params:
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and self.npos < len(args):
                self.where[p.name] = f"args[{self.npos}]"
                self.npos += 1
            elif p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                self.where[p.name] = f"kwargs[{p.name!r}]"

    def path(self, key: tuple) -> str:
        name, rest = key[0], list(key[1:])
        if name == self.var_pos and rest:
            head = f"args[{self.npos + rest.pop(0)}]"
        elif name == self.var_kw and rest:
            head = f"kwargs[{rest.pop(0)!r}]"
        else:
            head = self.where.get(name, name)
        return head + "".join(f"[{k!r}]" for k in rest)


def source_of(key: tuple) -> Source:
    src: Source = LocalSource(key[0])
    for k in key[1:]:
        src = ItemSource(src, k)
    return src


# ---------------------------------------------------------------------------- sites
@dataclass
class Site:
    """One input dim (or int input) the spec makes symbolic."""

    key: tuple  # path into the bound arguments: ("x",), ("ys", 0)
    dim: int | None  # the tensor dim; None for an int input
    size: int  # the example's value
    spec: object  # Dim, DerivedDim or DimHint
    spec_path: str  # "dynamic_shapes['x'][0]"
    arg_path: str  # "args[0].shape[0]", as the example was passed
    expr: sympy.Expr | None = None  # the symbolic size given to the trace
    value: object = None  # the SymInt the trace sees

    @property
    def source(self) -> Source:
        src = source_of(self.key)
        return src if self.dim is None else SizeSource(src, self.dim)

    @property
    def kind(self) -> str:
        if isinstance(self.spec, DimHint):
            return self.spec.kind  # "AUTO" | "DYNAMIC"
        return "DERIVED" if isinstance(self.spec, DerivedDim) else "DIM"


@dataclass
class Root:
    """A Dim by name, with every site that uses it (directly or derived)."""

    dim: Dim
    sites: list[Site] = field(default_factory=list)
    hint: int | None = None
    symbol: sympy.Symbol | None = None
    value: object = None  # the root as a SymInt
    source: Source | None = None

    @property
    def name(self) -> str:
        return self.dim.name

    @property
    def direct(self) -> list[Site]:
        return [s for s in self.sites if s.kind == "DIM"]

    @property
    def declared(self) -> ValueRanges:
        """The range the program must accept: the Dim's; 0 and 1 only when the user's min includes
        them (`Dim("b", min=1)`), otherwise they stay specialized as in torch.compile."""
        hi = int_oo if self.dim._max is None else self.dim._max
        return ValueRanges(self.small_min if self.small_min is not None else max(self.dim.min, MIN_DYNAMIC), hi)

    @property
    def small_min(self) -> int | None:
        """The user's explicit min when it is 0 or 1: the symbol is then traced size-obliviously."""
        m = self.dim._min
        return m if m is not None and m < MIN_DYNAMIC and type(self.dim) is Dim else None


def resolve_spec(sig: inspect.Signature, bound: dict, dynamic_shapes, paths: ArgPaths) -> list[Site]:
    """The symbolic sites of `dynamic_shapes` for the arguments in `bound` (name -> value, as passed)."""
    sites: list[Site] = []
    if dynamic_shapes is None:
        return sites
    names = list(bound)
    if isinstance(dynamic_shapes, dict):
        params = list(sig.parameters)
        for k in dynamic_shapes:
            if k not in sig.parameters:
                raise SpecError(f"dynamic_shapes[{k!r}]: {k!r} is not an argument of the exported function "
                                f"(its arguments are {', '.join(params)})")
        pairs = [(k, dynamic_shapes[k], f"dynamic_shapes[{k!r}]") for k in names if k in dynamic_shapes]
        for k in dynamic_shapes:
            if k not in bound and dynamic_shapes[k] is not None:
                raise SpecError(f"dynamic_shapes[{k!r}]: argument {k!r} was not passed in the example inputs")
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(names):
            raise SpecError(f"dynamic_shapes: has {len(dynamic_shapes)} entries, but the example passes "
                            f"{len(names)} argument(s) ({', '.join(names)}); give one spec per argument "
                            f"(None for static), or a dict keyed by argument name")
        pairs = [(k, s, f"dynamic_shapes[{i}]") for i, (k, s) in enumerate(zip(names, dynamic_shapes))]
    else:
        raise SpecError(f"dynamic_shapes: must be a dict keyed by argument name or a tuple/list by position, "
                        f"got {type(dynamic_shapes).__name__}")
    walker = _Walker(paths, sites)
    for name, spec, spath in pairs:
        walker.walk(bound[name], spec, (name,), spath)
    return sites


class _Walker:
    def __init__(self, paths: ArgPaths, sites: list[Site]):
        self.paths = paths
        self.sites = sites

    def walk(self, value, spec, key: tuple, spath: str) -> None:
        where = self.paths.path(key)
        if isinstance(value, torch.Tensor):
            self.tensor(value, spec, key, spath, where)
        elif spec is None:
            return
        elif isinstance(value, (tuple, list)):
            if not isinstance(spec, (tuple, list)) or len(spec) != len(value):
                raise SpecError(f"{spath}: {where} is a {type(value).__name__} of {len(value)} items, so its spec "
                                f"must be None or a tuple/list of {len(value)} specs, got {spec!r}")
            for i, (v, s) in enumerate(zip(value, spec)):
                self.walk(v, s, key + (i,), f"{spath}[{i}]")
        elif isinstance(value, dict):
            if not isinstance(spec, dict):
                raise SpecError(f"{spath}: {where} is a dict, so its spec must be None or a dict, got {spec!r}")
            for k, s in spec.items():
                if k not in value:
                    raise SpecError(f"{spath}[{k!r}]: {where} has no key {k!r}")
                self.walk(value[k], s, key + (k,), f"{spath}[{k!r}]")
        elif _is_int(value):
            self.int_input(value, spec, key, spath, where)
        else:
            raise SpecError(f"{spath}: {where} is a {type(value).__name__}, which has no dynamic dims; its spec "
                            f"must be None, got {spec!r}")

    def tensor(self, t, spec, key, spath, where) -> None:
        rank = t.dim()
        if spec is None:
            return
        if isinstance(spec, dict):
            items = []
            for d, s in spec.items():
                if not _is_int(d):
                    raise SpecError(f"{spath}: the keys of a tensor's spec are dims (ints), got {d!r}")
                if not -rank <= d < rank:
                    raise SpecError(f"{spath}[{d}]: dim {d} is out of range for {where}, a tensor of rank {rank}")
                items.append((d % rank, s, f"{spath}[{d}]"))
        elif isinstance(spec, (tuple, list)):
            if len(spec) != rank:
                raise SpecError(f"{spath}: has {len(spec)} entries, but {where} is a tensor of rank {rank}; give "
                                f"one spec per dim (None for static), or a dict {{dim: spec}}")
            items = [(d, s, f"{spath}[{d}]") for d, s in enumerate(spec)]
        else:
            raise SpecError(f"{spath}: the spec of a tensor ({where}) is a dict {{dim: spec}} or a tuple/list "
                            f"with one spec per dim, got {spec!r}")
        for d, s, p in items:
            self.dim(int(t.shape[d]), s, key, d, p, f"{where}.shape[{d}]")

    def dim(self, size, spec, key, d, spath, where) -> None:
        if spec is None or spec is Dim.STATIC or (isinstance(spec, DimHint) and spec.kind == "STATIC"):
            return
        if _is_int(spec):
            if spec != size:
                raise SpecError(f"{spath}: the spec says {spec}, but the example has {where} = {size}")
            return
        if isinstance(spec, (Dim, DimHint)):
            self.sites.append(Site(key, d, size, spec, spath, where))
            return
        raise SpecError(f"{spath}: expected a Dim, a derived dim, Dim.AUTO, Dim.STATIC, Dim.DYNAMIC, an int or "
                        f"None, got {spec!r}")

    def int_input(self, value, spec, key, spath, where) -> None:
        if _is_int(spec):
            if spec != value:
                raise SpecError(f"{spath}: the spec says {spec}, but the example has {where} = {value}")
            return
        if isinstance(spec, DimHint):
            if spec.kind != "STATIC":
                self.sites.append(Site(key, None, value, spec, spath, where))
            return
        if isinstance(spec, Dim):
            raise SpecError(f"{spath}: {where} is an int; use Dim.DYNAMIC or Dim.AUTO (not a named Dim) to make "
                            f"it symbolic")
        raise SpecError(f"{spath}: expected Dim.AUTO, Dim.STATIC, Dim.DYNAMIC, an int or None for the int {where}, "
                        f"got {spec!r}")


# ---------------------------------------------------------------------------- checking examples
def plan_roots(sites: list[Site]) -> dict[str, Root]:
    """Group Dim sites by root name and check the example sizes against them."""
    roots: dict[str, Root] = {}
    for s in sites:
        if s.kind not in ("DIM", "DERIVED"):
            _check_hint(s)
            continue
        dim = s.spec.root
        r = roots.get(dim.name)
        if r is None:
            r = roots[dim.name] = Root(dim)
        elif r.dim is not dim and (r.dim._min, r.dim._max) != (dim._min, dim._max):
            raise SpecError(f"{s.spec_path}: two different Dims are named {dim.name!r} ({r.dim!r} and {dim!r}); "
                            f"Dims with the same name are the same dim, so they need the same bounds")
        r.sites.append(s)
    for r in roots.values():
        _root_hint(r)
    return roots


def _root_hint(r: Root) -> None:
    first = r.direct[0] if r.direct else r.sites[0]
    a, b = first.spec.coeff, first.spec.offset
    if (first.size - b) % a:
        raise SpecError(f"Expected input at {first.arg_path} = {first.size} to be of the form {first.spec}, "
                        f"where {r.name} is an integer ({first.spec_path})")
    r.hint = (first.size - b) // a
    for s in r.sites:
        want = s.spec.coeff * r.hint + s.spec.offset
        if s.size != want:
            at = f"Expected input at {s.arg_path} ({s.source.name()}) to be equal to"
            if s.kind == "DIM":
                raise SpecError(f"{at} {r.name}, where {r.name} = {r.hint}, but got {s.size} ({r.name} is "
                                f"{first.arg_path}; {s.spec_path})")
            err = SpecError(f"{at} {s.spec}, where {r.name} = {r.hint}, but got {s.size} ({s.spec_path})")
            err.mismatch = s  # export traces again to suggest the relation the program needs
            raise err
    lo, hi = r.dim.min, r.dim.max
    if not lo <= r.hint <= hi:
        via = "" if first.kind == "DIM" else f" (so {r.name} = {r.hint})"
        raise SpecError(f"{first.spec_path}: the example's {first.arg_path} = {first.size}{via} is not in range "
                        f"[{lo}, {hi}] of {r.dim!r}; pass an example inside the range, or widen min/max")
    if r.hint < MIN_DYNAMIC:
        via = "" if first.kind == "DIM" else f", so {r.name} = {r.hint}"
        raise SpecError(
            f"{first.spec_path}: the example's {first.arg_path} = {first.size}{via}, but sizes 0 and 1 are "
            f"specialized while tracing, so {r.name} would not be dynamic. Pass an example where {r.name} >= 2 "
            f"(the exported program accepts every size in its range), or use Dim.AUTO to allow the "
            f"specialization.")
    if r.declared.lo > r.declared.hi:
        raise SpecError(f"{first.spec_path}: {r.dim!r} allows only sizes below 2, which are specialized; use an "
                        f"int (static size) instead")


def _check_hint(s: Site) -> None:
    h = s.spec
    lo = -int_oo if h.min is None else h.min
    hi = int_oo if h.max is None else h.max
    if not lo <= s.size <= hi:
        raise SpecError(f"{s.spec_path}: the example's {s.arg_path} = {s.size} is not in range [{lo}, {hi}] of "
                        f"{h!r}; pass an example inside the range, or widen min/max")
    if s.dim is not None and s.size < MIN_DYNAMIC and h.kind == "DYNAMIC":
        raise SpecError(
            f"{s.spec_path}: the example's {s.arg_path} = {s.size}, but sizes 0 and 1 are specialized while "
            f"tracing, so Dim.DYNAMIC cannot hold. Pass an example where it is >= 2, or use Dim.AUTO to allow the "
            f"specialization.")


# ---------------------------------------------------------------------------- symbols
def create_symbols(env: ShapeEnv, sites: list[Site], roots: dict[str, Root]) -> None:
    """Make the symbols of the sizes: Dims first (so a tie with an AUTO or DYNAMIC size keeps
    the Dim's symbol), then DYNAMIC, then AUTO, each in input order. Ints are made by the trace."""
    for r in roots.values():
        direct = r.direct
        r.source = direct[0].source if direct else RootSource(r.name)
        d = r.declared
        con = DimConstraint(r.source, d, warn_only=False, allow_relations=False, name=r.name)
        # sizes 0/1 in the user's range: reason as if >= 2 about framework checks (broadcasting,
        # contiguity), and guard only where the program itself branches on the size
        policy = DimDynamic.OBLIVIOUS_SIZE if r.small_min is not None else DimDynamic.DYNAMIC
        r.symbol = env.create_symbol(r.hint, r.source, policy, d.lo, None if d.hi == int_oo else d.hi,
                                     constraint=con)
        for s in direct[1:]:
            env.var_info[r.symbol].sources.append(s.source)
        r.value = env.wrap(r.symbol, int, r.hint)
        for s in r.sites:
            s.value = r.value if s.kind == "DIM" else r.value * s.spec.coeff + s.spec.offset
            s.expr = s.spec.coeff * r.symbol + s.spec.offset
    for kind in ("DYNAMIC", "AUTO"):
        for s in sites:
            if s.kind != kind or s.dim is None:
                continue
            if s.size < MIN_DYNAMIC:  # AUTO only: DYNAMIC was rejected by _check_hint
                warnings.warn(f"{s.spec_path}: Dim.AUTO for {s.arg_path} = {s.size} is specialized to {s.size} "
                              f"(sizes 0 and 1 are specialized while tracing); pass an example >= 2 to keep it "
                              f"dynamic", stacklevel=4)
                continue
            con = DimConstraint(s.source, None, warn_only=kind == "AUTO", allow_relations=True)
            sym = env.create_symbol(s.size, s.source, DimDynamic.DYNAMIC, s.spec.min, s.spec.max, constraint=con)
            s.expr = sym
            s.value = env.wrap(sym, int, s.size)


def int_policy(site: Site):
    """The tracer's policy answer for an int input marked AUTO or DYNAMIC."""
    from ..tracing.tracer import DimPolicy
    con = DimConstraint(site.source, None, warn_only=site.kind == "AUTO", allow_relations=True)
    return DimPolicy(DimDynamic.DYNAMIC, site.spec.min, site.spec.max, con)
