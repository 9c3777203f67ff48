"""Finding the cache entry whose guards accept a call, in about constant time.

A function with few entries tries them newest first. Past a handful, entries
whose tensor arguments all have static sizes are indexed by those sizes (one
dict lookup finds the candidates, usually one); the others (dynamic sizes,
no tensor arguments) are tried newest first after the index. Any entry whose
guards accept a call is a correct one to run: the index changes which one
wins only between entries that all accept.
"""
from __future__ import annotations

from ..symbolic.sources import LocalSource
from ..symbolic.widen import widened

SCAN = 4  # up to this many entries a linear scan is cheapest


def static_spec(entry):
    """(argument names, their sizes) when every tensor argument of the entry has static sizes."""
    names, sizes = [], []
    for t in entry.guard_set.tensors:
        if t.example is not None:  # a pinned parameter: checked by identity, not a key
            continue
        if not isinstance(t.source, LocalSource) or any(s is None for s in t.sizes):
            return None
        names.append(t.source.local)
        sizes.append(tuple(t.sizes))
    return (tuple(names), tuple(sizes)) if names else None


class EntryCache:
    def __init__(self):
        self.entries: list = []  # newest first
        self._index: dict = {}  # names -> {sizes: [entries, newest first]}
        self._rest: list = []  # entries not in the index, newest first

    def add(self, entry) -> None:
        self.entries.insert(0, entry)
        spec = static_spec(entry)
        if spec is None:
            self._rest.insert(0, entry)
        else:
            self._index.setdefault(spec[0], {}).setdefault(spec[1], []).insert(0, entry)

    def clear(self) -> None:
        self.entries.clear()
        self._index.clear()
        self._rest.clear()

    def lookup(self, L, call_shape=0, tried=None):
        """The entry to run for the arguments `L` (called as `call_shape`), or None. `tried`: an entry
        whose guards already refused `L`."""
        entries = self.entries
        if len(entries) <= SCAN:
            for e in entries:
                if e is not tried and e.call_shape == call_shape and e.guard_set.fn(L):
                    return e
            return None
        for names, table in self._index.items():
            try:
                key = tuple(tuple(L[n].shape) for n in names)
            except (KeyError, AttributeError, TypeError):
                continue
            for e in table.get(key, ()):
                if e is not tried and e.call_shape == call_shape and e.guard_set.fn(L):
                    return e
        for e in self._rest:
            if e is not tried and e.call_shape == call_shape and e.guard_set.fn(L):
                return e
        return None


_CODE: dict = {}  # a source's name -> its compiled expression (compile() costs ~30 us)


def _compiled(name: str):
    code = _CODE.get(name)
    if code is None:
        if len(_CODE) > 1024:
            _CODE.clear()
        code = _CODE[name] = compile(name, "<dynashape-source>", "eval")
    return code


def widen_for(entry, L) -> bool:
    """Let `entry`, traced for dynamic sizes >= 2, take `L` in which some of them are 1, when its trace
    decided nothing that size 1 would decide otherwise (symbolic/widen.py): its range guards then
    start at 1. False (the entry unchanged) when it cannot, or when another guard rejects `L`;
    `entry.refused` then says why not, when that was the trace."""
    entry.refused = None
    if entry.tree is not None or entry.graph is None:
        return False
    gs, env = entry.guard_set, entry.env
    ns = {"L": L, "G": gs.ns.get("G"), "C": gs.ns.get("C")}
    ones = []
    for g in gs.shape_guards:
        if g.bounds is None or g.bounds[0] != 2 or g.bounds[2] is not None or not g.sources:
            continue  # not a range guard from 0/1 specialization
        try:
            if eval(_compiled(g.sources[0].name()), ns) != 1:
                continue
        except Exception:  # noqa: BLE001 - a source this call does not have
            continue
        ones += [s for s, i in env.var_info.items() if i.sources and i.sources[0] == g.sources[0]]
    for sym in ones:
        why = entry.unwidenable.get(sym)
        if why is None:
            new_env, why = widened(env, sym, 1)
            if new_env is not None:
                env = new_env
                continue
            if env is entry.env:  # the same answer at every later call: asked once
                entry.unwidenable[sym] = why
        entry.refused = why
        return False
    if not ones:
        return False
    new = gs.with_env(env)
    if new is None or not new.fn(L):
        return False
    entry.guard_set, entry.env = new, env
    return True
