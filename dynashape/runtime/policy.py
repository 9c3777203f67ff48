"""Which values are symbolic in a compile, in order of precedence:

1. `config.dynamic_sources` / `config.unbacked_sources` (names or regexes of sources)
2. `ds.mark_static`, then `force_parameter_static_shapes` for parameters
3. `ds.mark_unbacked`, `ds.mark_dynamic` (an error if specialized), `ds.maybe_mark_dynamic`
4. `dynamic=False`: static; `dynamic=True` or `assume_static_by_default=False`: dynamic
5. automatic dynamic (the default): static first; a source seen with two values is dynamic
   from then on (a specialization of it only warns).

Going past PyTorch on 0/1: a size made dynamic automatically is compiled size-obliviously
(no 0/1 specialization up front: the program's own questions about 0 and 1 get exact
guards), and a dynamic size that recompiles only because it became 0 or 1 is made
size-oblivious the same way. Sound, and one graph instead of one per 0/1 size.
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch: our own answers are plain, faster
import re

import torch

from ..guards.build import plain_float
from ..symbolic.shape_env import DimConstraint, DimDynamic
from ..symbolic.ranges import ValueRanges
from ..symbolic.sources import AttrSource, ItemSource, LocalSource, SizeSource, Source
from ..tracing.tracer import DimPolicy
from .annotations import marks_of
from .config import config


class FrameState:
    """Per compiled function: the value each source had, and what turned dynamic."""

    def __init__(self):
        self.seen: dict[Source, object] = {}  # source -> value at the first compile
        self.dynamic: set[Source] = set()  # sources that changed: symbolic from now on
        self.oblivious: set[Source] = set()  # dynamic sizes that recompiled for 0/1: no 0/1 specialization
        self.why: dict[Source, str] = {}  # how each dynamic source became dynamic
        self.ranks: dict[Source, int] = {}  # tensor source -> its rank at the first compile
        self.any_rank: set[Source] = set()  # tensors seen with two ranks: every size dynamic (as torch's)

    def update(self, L: dict) -> None:
        ranks: dict = {}
        self.update_pairs(_walk(L, ranks))
        for src, n in ranks.items():  # a rank change makes all of the tensor's sizes dynamic, any rank
            old = self.ranks.setdefault(src, n)
            if old != n and src not in self.any_rank:
                self.any_rank.add(src)
                self.why[src] = f"automatic: seen with rank {old} and {n}"
            if src in self.any_rank:
                for i in range(n):
                    size = SizeSource(src, i)
                    if size not in self.dynamic:
                        self.dynamic.add(size)
                        self.why[size] = self.why[src]

    def update_pairs(self, pairs) -> None:
        """Record (source, value) observations; a changed value makes its source dynamic."""
        for src, v in pairs:
            old = self.seen.setdefault(src, v)
            if old != v and src not in self.dynamic:
                self.dynamic.add(src)
                self.why[src] = f"automatic: seen with {old} and {v}"

    def _size_sources(self, L):
        return [src for src, _ in _walk(L) if isinstance(src, SizeSource)]

    def dynamic_names(self) -> tuple:
        return tuple(sorted(s.name() for s in self.dynamic))

    def advise(self, reasons: list[str], L: dict, cf) -> list[str]:
        """Learn from the reasons (0/1 churn) and add the concrete fix to size-change reasons."""
        out = []
        for r in reasons:
            m = re.match(r"tensor '([^']+)' size mismatch at index (\d+)", r)
            if m:
                name, dim = m.groups()
                base = _base_name(name)
                r += (f"; to compile this dynamically from the start, call ds.mark_dynamic({name}, {dim}) "
                      f"or set DYNASHAPE_DYNAMIC_SOURCES=\"{base}\"")
            m01 = re.match(r"(.+\.size\(\)\[\d+\]) >= [12] failed \(.* = ([01])\)", r)
            if m01:
                for src in self._size_sources(L):
                    if src.name() == m01.group(1) and src not in self.oblivious:
                        self.oblivious.add(src)
                        self.why[src] = self.why.get(src, "dynamic") + "; size-oblivious after a 0/1 recompile"
                        r += "; this size is now compiled without 0/1 specialization"
            out.append(r)
        return out


def _base_name(pretty: str) -> str:
    parts = pretty.split(".")
    return f"L['{parts[0]}']" + "".join(f".{p}" for p in parts[1:])


_MAX_DEPTH = 64  # as deep as the tracer looks into nested arguments


def _walk(L: dict, ranks: dict | None = None):
    """(source, value) of every size and int in the arguments; `ranks` gets each tensor's rank."""
    for name, v in L.items():
        yield from _walk_value(v, LocalSource(name), 0, ranks)


def _walk_value(v, src, depth=0, ranks=None):
    if isinstance(v, torch.Tensor):
        if not v.is_nested:  # nested tensors have no sizes (and run eagerly)
            if ranks is not None:
                ranks[src] = v.dim()
            for i, s in enumerate(v.shape):
                yield SizeSource(src, i), int(s)
    elif isinstance(v, bool):
        return
    elif isinstance(v, (int, float)):
        if depth == 0 or not isinstance(src, AttrSource):  # an object's ints are guarded constants
            yield src, v
    elif depth >= _MAX_DEPTH:
        return
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            yield from _walk_value(x, ItemSource(src, i), depth + 1, ranks)
    elif isinstance(v, dict):
        for k, x in v.items():
            if isinstance(k, (str, int)):
                yield from _walk_value(x, ItemSource(src, k), depth + 1, ranks)
    elif _plain_object(v):  # a cache or config object passed in: its tensors' sizes (as runtime/pystate.py names them)
        for k, x in vars(v).items():
            if isinstance(k, str) and not k.startswith("__") and isinstance(x, (torch.Tensor, list, tuple, dict)) \
                    or _plain_object(x):
                yield from _walk_value(x, AttrSource(src, k) if k.isidentifier()
                                       else ItemSource(AttrSource(src, "__dict__"), k), depth + 1, ranks)


def _plain_object(v) -> bool:
    return (hasattr(v, "__dict__") and not isinstance(v, (torch.nn.Module, type, torch.Tensor))
            and not callable(v) and not (type(v).__module__ or "").startswith("dynashape"))


def _matcher(spec: str):
    """A predicate over source names from `L['x'],L['y']` or regexes like `L\\['x.*'\\]`."""
    items = [s.strip() for s in spec.split(",") if s.strip()] if spec else []
    if not items:
        return None  # nothing listed: no source name needs building
    pats = []
    for it in items:
        try:
            pats.append(re.compile(it))
        except re.error:
            pats.append(re.compile(re.escape(it)))
    return lambda name: any(name == it for it in items) or any(p.fullmatch(name) for p in pats)


def make_policy(dynamic, frame_state: FrameState, L: dict, explain: dict | None = None):
    """The tracer's policy for this compile; `explain[source name]` records why each is dynamic."""
    if dynamic is None and config.automatic_dynamic_shapes:
        frame_state.update(L)
    dyn_src = _matcher(config.dynamic_sources)
    unb_src = _matcher(config.unbacked_sources)
    explain = explain if explain is not None else {}
    all_dynamic = dynamic is True or (dynamic is None and not config.assume_static_by_default)

    def listed(match, source, tensor_source):
        return match is not None and (match(source.name()) or (tensor_source is not None
                                                                and match(tensor_source.name())))

    def policy(source, value, kind, tensor=None, dim=None) -> DimPolicy:
        tsrc = source.base if isinstance(source, SizeSource) else None
        duck = DimDynamic.DUCK if kind in ("size", "param") else DimDynamic.DYNAMIC
        if listed(unb_src, source, tsrc):
            explain[source.name()] = "config.unbacked_sources"
            return DimPolicy(DimDynamic.UNBACKED)
        if listed(dyn_src, source, tsrc):
            explain[source.name()] = "config.dynamic_sources"
            return DimPolicy(duck)
        mark = marks_of(tensor).get(dim) if tensor is not None else None
        if mark is not None and mark.kind == "static":
            return DimPolicy(DimDynamic.STATIC)
        if kind == "param" and (config.force_parameter_static_shapes if isinstance(tensor, torch.nn.Parameter)
                                else config.force_nn_module_property_static_shapes):
            return DimPolicy(DimDynamic.STATIC)
        if (kind == "int" and config.specialize_int) or (kind == "float" and config.specialize_float):
            return DimPolicy(DimDynamic.STATIC)
        if kind == "float" and not plain_float(value):  # nan, inf, -0.0: no symbol can stand for them
            return DimPolicy(DimDynamic.STATIC)
        if mark is not None:
            if mark.kind == "unbacked":
                explain[source.name()] = "ds.mark_unbacked"
                return DimPolicy(DimDynamic.UNBACKED)
            explain[source.name()] = f"ds.{'mark_dynamic' if mark.kind == 'dynamic' else 'maybe_mark_dynamic'}"
            con = DimConstraint(source, None, warn_only=mark.kind == "maybe")
            if mark.min is not None or mark.max is not None:
                con.vr = ValueRanges(mark.min if mark.min is not None else 2,
                                     mark.max if mark.max is not None else ValueRanges.unknown_int().hi)
            return DimPolicy(DimDynamic.DYNAMIC, mark.min, mark.max, con)
        if dynamic is False:
            return DimPolicy(DimDynamic.STATIC)
        oblivious = DimDynamic.OBLIVIOUS_SIZE if kind == "size" else duck
        if all_dynamic:
            explain[source.name()] = "dynamic=True" if dynamic else "assume_static_by_default=False"
            if source in frame_state.oblivious:
                explain[source.name()] += "; size-oblivious after a 0/1 recompile"
                return DimPolicy(oblivious)
            return DimPolicy(duck)
        if dynamic is None and source in frame_state.dynamic:
            explain[source.name()] = frame_state.why.get(source, "automatic") + (
                "; size-oblivious (0/1 guarded only where asked)" if kind == "size" else "")
            return DimPolicy(oblivious, constraint=DimConstraint(source, warn_only=True))
        return DimPolicy(DimDynamic.STATIC)

    def static_param(tensor) -> bool:
        """Whether `policy` answers STATIC for every dim of this module parameter/buffer (checked
        once per tensor instead of once per dim: no source list can name it, the config pins it)."""
        return unb_src is None and dyn_src is None and (
            config.force_parameter_static_shapes if isinstance(tensor, torch.nn.Parameter)
            else config.force_nn_module_property_static_shapes)

    policy.static_param = static_param
    return policy


def static_for(policy, names: frozenset):
    """`policy`, with the numbers of the arguments `names` static: defaults the caller left out. The trace
    reads the function's default itself (it is not passed), so a symbol for it would be unused and the
    value baked; static, the guard compares it (`L['n'] == 2`) with the default the next call gets."""
    if not names:
        return policy

    def static(source, value, kind, tensor=None, dim=None) -> DimPolicy:
        if kind in ("int", "float") and isinstance(source, LocalSource) and source.local in names:
            return DimPolicy(DimDynamic.STATIC)
        return policy(source, value, kind, tensor, dim)
    return static
