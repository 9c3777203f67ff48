"""What a compiled function's code reads (global names, attribute chains of globals), and the
cache every CompiledFunction of one code object shares."""
from __future__ import annotations

import functools
import types
import weakref

from .config import config
from .dispatch import EntryCache
from .policy import FrameState


class _SharedCache:
    """What every CompiledFunction of one code object (same closure, same options) shares."""

    def __init__(self, bound):
        self.cache = EntryCache()
        self.frame_state = FrameState()
        self.bound = bound


_SHARED: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _shared_cache(code_fn, closure, bound, dynamic, fullgraph, backend) -> _SharedCache:
    code = getattr(code_fn, "__code__", None)
    if code is None:
        return _SharedCache(bound)
    knobs = tuple(sorted((k, v) for k, v in config.knobs().items() if isinstance(v, (bool, int, float, str))))
    key = (code, id(getattr(code_fn, "__globals__", None)), tuple(map(id, closure)), id(bound), dynamic,
           fullgraph, backend if isinstance(backend, str) else id(backend), knobs)  # the config compiled under
    shared = _SHARED.get(key)
    if shared is None or shared.bound is not bound:
        shared = _SHARED[key] = _SharedCache(bound)
    return shared


@functools.lru_cache(maxsize=4096)  # a code object's instructions never change: read once per process
def _global_names(code) -> tuple:
    """Names the function (and functions nested in it) loads as globals; not attribute names."""
    if code is None:
        return ()
    import dis
    import types as _types
    names: dict = {}
    todo = [code]
    while todo:
        c = todo.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names[ins.argval] = None
        todo += [k for k in c.co_consts if isinstance(k, _types.CodeType)]
    return tuple(names)


@functools.lru_cache(maxsize=4096)
def _attr_chains(code) -> tuple:
    """`settings.SCALE`, `pkg.mod.Cfg.scale`: (global name, attribute names) as the code reads them."""
    if code is None:
        return ()
    import dis
    chains: dict = {}
    todo = [code]
    while todo:
        c = todo.pop()
        ins = list(dis.get_instructions(c))
        for i, x in enumerate(ins):
            if x.opname != "LOAD_GLOBAL":
                continue
            attrs = []
            for y in ins[i + 1:]:
                if y.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                    attrs.append(y.argval)
                else:
                    break
            if attrs:
                chains[(x.argval, tuple(attrs))] = None
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return tuple(chains)
