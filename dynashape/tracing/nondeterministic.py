"""Python calls whose value differs on every call (random draws, clocks, entropy) inside a trace.

The trace runs the user's Python once: such a value would be frozen into the graph and returned by
every later call. While a trace runs (pyenv.trace_environment) these calls are patched, by family
rather than by name, so that the user's call is replayed when the compiled code runs (scalar draws
and reseeds of `random` and `numpy.random`, pyrandom.py) or is a graph break (the call runs eagerly):

- `random`: every public function of the module bound to its hidden generator (`random._inst`);
  `random._urandom`, from which SystemRandom and `secrets` draw.
- `numpy.random`: every public function of the module (`default_rng(seed)` given a seed draws nothing).
- clocks: every function of `time` but those that read no clock (`sleep`, `mktime`...); `localtime`,
  `gmtime`, `ctime`, `asctime` and `strftime` only when their time argument is left out.
- entropy: `os.urandom`, `os.getrandom`, `os.times`, `uuid.uuid1`, `uuid.uuid4`.
- the call stack: `inspect.stack`, `currentframe` & co, `traceback.extract_stack` & co (a graph break:
  the trace runs under dynashape's frames).

Whose call it is: the user's code is intercepted; dynashape's, torch's and their kin's run the
original (pyenv._caller_is_user). A standard-library module between them (`secrets`, `uuid`,
`tempfile`) only forwards a call for time or entropy: the code that called it decides.

What cannot be patched is found another way:
- `RngStates`: the generator objects the trace can reach (a `random.Random` of the user's; numpy's
  Generator, RandomState and bit generators; a torch.Generator): their states before the trace (or
  when the walk of the user's state meets one during it); one the trace changed is put back, and
  the call graph-breaks. (random.Random's methods are not patched on the class: the walk of the
  user's state snapshots a class it meets, and would take the patch for the trace's change. Not
  torch's default generator: other threads draw from it while a trace runs; `torch.manual_seed` is
  replayed, global_state.py.) A generator made in the function and seeded there draws the same
  numbers on every call, as the graph does.
- `clock_read`: a C function read through a global in the user's code (`datetime.datetime.now`,
  `date.today`, or one of the above imported by name, `from time import time`) is a graph break
  when the trace first runs that code.
"""
from __future__ import annotations

import builtins
import dis
import functools
import inspect
import itertools
import linecache
import random
import sys
import types

import torch

from ..symbolic.userloc import Location, location_at, user_location
from . import pyrandom
from .errors import GraphBreak
from .state import current_tracer

# standard-library modules that pass a call for time or entropy on (`secrets.token_hex` -> os.urandom);
# the ones that decide themselves are logging & co (a log record's timestamp is theirs)
FORWARDERS = frozenset(sys.stdlib_module_names).difference(
    ("logging", "threading", "warnings", "inspect", "linecache", "traceback", "importlib", "dis"))
_NOT_CLOCKS = ("sleep", "get_clock_info", "clock_getres", "clock_settime", "clock_settime_ns", "mktime",
               "strptime", "tzset", "pthread_getcpuclockid")
_NOW_BY_DEFAULT = {"localtime": 0, "gmtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}  # its time argument
_ENTROPY = (("os", ("urandom", "getrandom", "times")), ("uuid", ("uuid1", "uuid4")))
# the call stack: a trace runs the function under dynashape's frames, and the compiled code under others
_STACK = (("inspect", ("stack", "currentframe", "getouterframes", "getinnerframes", "trace")),
          ("traceback", ("extract_stack", "format_stack", "print_stack", "walk_stack")))
_CLOCK_CLASSES = ("now", "utcnow", "today")  # of datetime.datetime and datetime.date (C classmethods)


def _passes(owner: str, name: str, args, kwargs) -> bool:
    """A call of a patched function whose value is the same on every call."""
    if owner == "numpy.random" and name == "default_rng":
        return (args[0] if args else kwargs.get("seed")) is not None  # seeded: draws nothing
    i = _NOW_BY_DEFAULT.get(name) if owner == "time" else None
    return i is not None and len(args) > i and args[i] is not None  # localtime(t): not the clock


def _call(owner: str, name: str, orig, in_trace, is_user):
    """`owner.name(...)` while a trace runs: the user's call is replayed (pyrandom) or a graph break."""
    def fn(*args, **kwargs):
        if in_trace() and is_user(2, FORWARDERS) and not _passes(owner, name, args, kwargs):
            kind = pyrandom.scalar_kind(owner, name, orig, args, kwargs)
            tracer = current_tracer()
            if kind is not None and tracer is not None:  # drawn (reseeded) when the compiled code runs
                return pyrandom.draw(tracer, owner, name, orig, args, kwargs, kind)
            advice = ("What to do: call it outside the compiled function and pass the value in" +
                      (", or use torch's random functions (torch.rand), which run at run time."
                       if "random" in owner else "."))
            what = " (the call stack differs while tracing" if owner in ("inspect", "traceback") else " (its value"
            raise GraphBreak(f"{owner}.{name}() inside the compiled function{what}, and would be baked into "
                             f"the graph)", _location(), advice)
        return orig(*args, **kwargs)
    fn.__wrapped__ = orig
    fn._dynashape = True
    return fn


def _location():
    """The user's line that called (through `secrets`, `uuid`... : FORWARDERS) the function asking."""
    f = sys._getframe(2)
    while f is not None and ((f.f_globals.get("__name__") or "").split(".", 1)[0] in FORWARDERS
                             or f.f_code in WRAPPERS):
        f = f.f_back
    return user_location() if f is None else location_at(f, f.f_lineno)


WRAPPERS = frozenset((_call("", "", None, None, None).__code__,))  # (ours pass a call on, as FORWARDERS do)


def patches(in_trace, is_user) -> list:
    """(owner, name, replacement) of every patch point (see the module docstring). `in_trace()`: this
    thread traces, not for an export; `is_user(depth, forwarders)`: pyenv._caller_is_user."""
    import os
    import time
    import uuid
    out = []
    for n in dir(random):
        f = getattr(random, n)
        if not n.startswith("_") and getattr(f, "__self__", None) is random._inst:
            out.append((random, n, _call("random", n, f, in_trace, is_user)))
    if hasattr(random, "_urandom"):
        out.append((random, "_urandom", _call("os", "urandom", random._urandom, in_trace, is_user)))
    out += [(time, n, _call("time", n, getattr(time, n), in_trace, is_user)) for n in dir(time)
            if not n.startswith("_") and n not in _NOT_CLOCKS and inspect.isroutine(getattr(time, n))]
    import traceback
    for mod, names in _ENTROPY + _STACK:
        m = {"os": os, "uuid": uuid, "inspect": inspect, "traceback": traceback}[mod]
        out += [(m, n, _call(mod, n, getattr(m, n), in_trace, is_user)) for n in names if hasattr(m, n)]
    np = sys.modules.get("numpy")
    npr = getattr(np, "random", None) if np is not None else None
    if npr is not None:
        out += [(npr, n, _call("numpy.random", n, getattr(npr, n), in_trace, is_user)) for n in dir(npr)
                if not n.startswith("_") and inspect.isroutine(getattr(npr, n))]
    _ORIGINALS.clear()
    for owner, n, fn in out:
        if n not in _NOW_BY_DEFAULT and n != "default_rng":
            _ORIGINALS[id(fn.__wrapped__)] = (fn.__wrapped__, f"{owner.__name__}.{n}")
    return out


# id -> (a patched module function, its name): imported by name (`from time import time`), a user's
# global holds the original, which the patch on the module does not replace (`clock_read`); not those
# whose value is the same on every call given an argument (`default_rng(0)`, `localtime(t)`)
_ORIGINALS: dict = {}


# ------------------------------------------------------------------ C functions read by the user's code
@functools.lru_cache(maxsize=4096)
def _global_chains(code) -> tuple:
    """(global name, attribute names, line) of each `name.a.b` the code itself reads (not nested code)."""
    out, ins = {}, list(dis.get_instructions(code))
    for i, x in enumerate(ins):
        if x.opname not in ("LOAD_GLOBAL", "LOAD_NAME"):
            continue
        attrs = []
        for y in ins[i + 1:]:
            if y.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                break
            attrs.append(y.argval)
        out.setdefault((x.argval, tuple(attrs)), x.positions.lineno if x.positions else code.co_firstlineno)
    return tuple((name, attrs, line) for (name, attrs), line in out.items())


def _clock(v) -> str | None:
    """The name of `v` when it is a nondeterministic function that the patches do not reach."""
    hit = _ORIGINALS.get(id(v))
    if hit is not None and hit[0] is v:
        return hit[1]
    dt = sys.modules.get("datetime")
    if dt is not None and type(v) is types.BuiltinMethodType and getattr(v, "__name__", "") in _CLOCK_CLASSES \
            and v.__self__ in (dt.datetime, dt.date):
        return f"datetime.{v.__self__.__name__}.{v.__name__}"
    return None


_MISSING = object()


def clock_read(code, g: dict) -> GraphBreak | None:
    """The graph break for `code` (the user's, about to run for the first time in this trace) when it
    reads through a global a function whose value differs on every call and that no patch reaches: a
    C classmethod (`datetime.datetime.now`), or a patched function imported by name (`from time
    import time`), which the patch on its module does not replace."""
    for name, attrs, line in _global_chains(code):
        v = g.get(name, _MISSING)
        if v is _MISSING:
            v = getattr(builtins, name, _MISSING)
        what = _clock(v)
        for a in attrs:
            if what is not None or not isinstance(v, (types.ModuleType, type)):
                break
            v = getattr(v, a, _MISSING)
            what = _clock(v)
        if what is None:
            continue
        loc = Location(code.co_filename, line, code.co_name, linecache.getline(code.co_filename, line).strip())
        return GraphBreak(f"{what}() is read by {code.co_name} (its value would be baked into the graph)", loc,
                          f"What to do: call it outside the compiled function and pass the value in"
                          + (f", or call it as {what}() through its module, which a trace replays or breaks on."
                             if what.split(".")[0] in ("random", "numpy") and "datetime" not in what else "."))
    return None


# ------------------------------------------------------------------ generators of C types
def _kind(v):
    """'torch' / 'numpy' / 'random' for a random generator object whose methods are not patched, else None."""
    if isinstance(v, torch.Generator):
        return "torch"
    if isinstance(v, random.Random) and not isinstance(v, random.SystemRandom):  # (no state: draws from the OS)
        return "random"
    np = sys.modules.get("numpy")
    npr = getattr(np, "random", None) if np is not None else None
    if npr is not None and isinstance(v, (npr.Generator, npr.RandomState, npr.BitGenerator)):
        return "numpy"
    return None


def _state(v):
    if isinstance(v, torch.Generator):
        return v.get_state()
    if isinstance(v, random.Random):
        return v.getstate()
    if hasattr(v, "bit_generator"):  # a numpy Generator
        return v.bit_generator.state
    if hasattr(v, "get_state"):  # a RandomState (its cached gauss draw included)
        return v.get_state(legacy=False)
    return v.state  # a bit generator


def _put(v, state) -> None:
    if isinstance(v, torch.Generator):
        v.set_state(state)
    elif isinstance(v, random.Random):
        v.setstate(state)
    elif hasattr(v, "bit_generator"):
        v.bit_generator.state = state
    elif hasattr(v, "set_state"):
        v.set_state(state)
    else:
        v.state = state


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "tobytes") and hasattr(a, "dtype"):  # a numpy array (MT19937's key)
        return hasattr(b, "tobytes") and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


class RngStates:
    """The states of the generators (`_kind`) a trace can reach, from before it drew from them.

    What the walk of the user's state met (runtime/pystate.py): `ns`, the objects its guards name
    (those without a `__dict__`); `containers`, (kind, object, source) of those with one; `inputs`,
    the tracer's value inputs. `catch_up()` reads what was added since the last time
    (runtime/outer.py calls it when the walk meets more state during the trace)."""

    def __init__(self, ns: dict, containers: list, inputs: list):
        self._pools = (ns, containers, inputs)
        self._done = [0] * len(self._pools)
        self._before: dict = {}  # id -> (generator, its state before the trace)
        self.catch_up()

    def _met(self, v) -> None:
        if isinstance(v, (types.BuiltinMethodType, types.MethodType)):  # `draw = rng.random`
            v = v.__self__
        if id(v) not in self._before and _kind(v) is not None:
            try:
                self._before[id(v)] = (v, _state(v))
            except Exception:  # a generator whose state cannot be read (a CUDA one before init)
                pass

    def catch_up(self) -> None:
        ns, containers, inputs = self._pools
        for i, (pool, values) in enumerate(((ns, ns.values()), (containers, (c[1] for c in containers)),
                                            (inputs, (x.value for x in inputs)))):
            n = len(pool)
            if n > self._done[i]:
                for v in itertools.islice(values, self._done[i], n):
                    self._met(v)
                self._done[i] = n

    def _changed(self) -> list:
        out = []
        for v, before in self._before.values():
            try:
                if not _same(_state(v), before):
                    out.append((v, before))
            except Exception:  # (its state readable before the trace, not now: left as it is)
                pass
        return out

    def check(self) -> None:
        """At the end of the trace: a generator it drew from is put back, and the call graph-breaks."""
        changed = self._changed()
        if changed:
            self.restore()
            v = changed[0][0]
            what = f"a {type(v).__module__.split('.')[0]}.{type(v).__qualname__}"
            raise GraphBreak(f"the function draws from (or reseeds) {what}, whose draws a compiled call cannot "
                             "replay (their values would be baked into the graph)", None,
                             "What to do: draw outside the compiled function and pass the values in, or use "
                             "torch's random functions (torch.rand(..., generator=g)), which draw at run time.")

    def restore(self) -> None:
        """Every generator the trace changed gets its state from before the trace back."""
        for v, before in self._changed():
            _put(v, before)
