"""A `functools.lru_cache` function the user's code calls while a trace runs.

Eager runs the function's body on a miss (and stores what it returns) and skips it on a hit. A
trace that ran the body would store its stand-ins in the user's cache (a FakeTensor that the next
eager call gets back) and record the body in the graph, which every compiled call would then run
where eager hits. So, while a trace runs, the user's cached functions (globals, module attributes,
closure cells: runtime/outer.py swaps them) are stand-ins that ask the cache without running the
body: a hit gives the stored value (a real tensor: a constant of the graph, the object eager's hit
returns), a miss runs the call eagerly, which fills the cache, and the next call traces. A graph
that read the cache is guarded by its miss count: a cache cleared or an entry evicted since (eager
would run the body again) traces again.
"""
from __future__ import annotations

import functools
import sys
import weakref
from dataclasses import dataclass

import torch

from ..symbolic.symtypes import SymBase, SymBool, SymFloat, SymInt
from ..symbolic.sources import Source
from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .fake import FakeTensor
from .inputs import ValueInput
from .tree import leaves

LRU_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def is_user_cache(v) -> bool:
    """A functools.lru_cache (or functools.cache) wrapper around a Python function."""
    return type(v) is LRU_WRAPPER and hasattr(getattr(v, "__wrapped__", None), "__code__")


class _Miss(BaseException):
    """Raised at the first line of the body, which a miss was about to run (not an Exception: no
    handler of the user's catches it)."""


@dataclass(frozen=True)
class CacheMisses(Source):
    """How many misses an lru_cache function has had (`f.cache_info().misses`)."""
    base: Source

    @property
    def _name(self) -> str:
        return f"{self.base.name()}.cache_info().misses"

    @property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.cache_info().misses"


class CachedStandIn:
    """In the place of a user's lru_cache function while a trace runs (`src`: where it is read)."""

    def __init__(self, wrapper, src: Source, tracer):
        self._w, self._src = wrapper, src
        self._tracer = weakref.ref(tracer) if tracer is not None else None  # (not kept alive by the stand-in)
        self._misses = wrapper.cache_info().misses
        self._guarded = False
        functools.update_wrapper(self, wrapper)

    def __call__(self, *args, **kwargs):
        args, kwargs = _plain_key(self._w, args, kwargs)
        hit, value = _ask(self._w, args, kwargs)
        tracer = self._tracer() if self._tracer is not None else None
        if hit and tracer is not None:
            if not self._guarded:  # guarded once
                tracer.value_inputs.append(ValueInput(CacheMisses(self._src), self._misses, "const"))
                self._guarded = True
            # eager's hit moves the key to the cache's newest end and counts a hit: the compiled code asks
            # the cache again where eager does (else a later miss evicts another key than eager's)
            loc = user_location()
            if not tracer.visible_effects:
                tracer.visible_effects.append(f"{self._w.__qualname__}(...) asks its lru_cache before it (at {loc})")
            tracer.graph.call(_Touch(self._w, args, kwargs), (), {}, None, loc, torch.is_grad_enabled(),
                              name_hint="cache_hit")
        if not hit:
            raise GraphBreak(f"{self._w.__qualname__}(...) is not in its functools.lru_cache yet: eager runs its "
                             "body once and stores the result, which a trace cannot do", user_location(),
                             "(This call runs eagerly and fills the cache; the next call is traced.)", once=True)
        return value

    def __get__(self, obj, objtype=None):  # (a cached method read through a class)
        return self if obj is None else functools.partial(self, obj)

    def __getattr__(self, name):  # cache_info, cache_clear, __wrapped__...
        return getattr(self._w, name)


class _Touch:
    """The graph's call of the cache with the hit's key: the value is the graph's constant already."""

    def __init__(self, wrapper, args, kwargs):
        self.wrapper, self.args, self.kwargs = wrapper, args, kwargs
        self.__name__ = f"{wrapper.__qualname__}_cache_hit"
        self._codegen_name = "_cache_hit"
        self.asked = True  # by the trace, for the call that compiles: its run of the graph does not ask again

    def __call__(self):
        if self.asked:
            self.asked = False
            return
        self.wrapper(*self.args, **self.kwargs)

    def __repr__(self) -> str:
        return f"{self.wrapper.__qualname__}(*{self.args!r}) (its lru_cache asked)"


def _plain_key(wrapper, args, kwargs):
    """The call's arguments as eager's key: symbolic ints and floats as their values (guarded); a
    traced tensor cannot be a key (its hash is the stand-in's)."""
    def plain(x):
        if isinstance(x, FakeTensor):
            raise GraphBreak(f"{wrapper.__qualname__}(...), a functools.lru_cache function, called with a traced "
                             "tensor (eager's key is the caller's tensor object)", user_location(),
                             "What to do: call it outside the compiled function, or key the cache by sizes.")
        if isinstance(x, SymInt):
            return int(x)
        if isinstance(x, SymFloat):
            return float(x)
        if isinstance(x, SymBool):
            return bool(x)
        return x
    if not any(isinstance(x, (FakeTensor, SymBase)) for x in leaves((args, kwargs))):
        return args, kwargs
    return tuple(_rebuild(a, plain) for a in args), {k: _rebuild(v, plain) for k, v in kwargs.items()}


def _rebuild(x, fn):
    if type(x) in (list, tuple):
        return type(x)(_rebuild(y, fn) for y in x)
    if type(x) is dict:
        return {k: _rebuild(v, fn) for k, v in x.items()}
    return fn(x)


def _ask(wrapper, args, kwargs):
    """(True, the stored value) on a hit; (False, None) on a miss, with the body not run and nothing
    stored: a trace function raises at the body's first event."""
    body = wrapper.__wrapped__.__code__
    prev = sys.gettrace()

    def stop(frame, event, arg):
        if frame.f_code is body:
            raise _Miss
        return prev(frame, event, arg) if prev is not None else None

    sys.settrace(stop)
    try:
        return True, wrapper(*args, **kwargs)
    except _Miss:
        return False, None
    finally:
        sys.settrace(prev)
