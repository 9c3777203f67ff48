"""What a compiled call returns: a template rebuilt per call from the graph's values.

The trace's result (and every value its side effects store) is walked once into a
template: trace values (FakeTensors, symbolic values, tensors) become slots of one
flat tuple the graph returns; containers and Python objects become recipes that
make a fresh object of the same type per call, as eager does (dict subclasses such
as OrderedDict or transformers' ModelOutput, dataclasses, namedtuples,
`torch.Size`, a KV-cache object created in the forward, sets and deques). Objects
that existed before the trace are read again from where they live (`L['cache']`),
never reused from the trace.

An object whose state is not all in its attributes (a function's closure cells, a
`functools.partial`, an exception's args, an iterator or generator, a class made in
the call) cannot be rebuilt that way: where a bounded scan of what it references finds
a trace value (`Template.reaches`), the call is a graph break naming the line
(`Template.refuse`). An iterator made in the call is one too (eager's is fresh).

>>> t = Template(tracer, readers={})             # doctest: +SKIP
>>> spec = t.of(out); graph.output(tuple(t.flat)) # doctest: +SKIP
>>> build(spec, flat, L, {})                      # doctest: +SKIP
"""
from __future__ import annotations

import collections
import enum
import gc
import inspect
import linecache
import sys
import types

import torch

from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import Location, is_library_file, is_ours, user_location
from .errors import GraphBreak
from .fake import FakeTensor

# (functions and classes are not atoms: a closure cell or a class made in the call may hold a trace value)
_ATOMS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format, enum.Enum, types.BuiltinFunctionType, types.ModuleType, type(Ellipsis), range)
# what a scan for trace values does not look into: no trace value lives there (or none we may blame)
_OPAQUE = _ATOMS + (torch.Tensor, types.CodeType, types.FrameType)
_SCAN_BUDGET = 5000  # objects one template's scans look at, in all (a trace runs them once)

# spec kinds (tuples: cheap to build and to walk)
LEAF, CONST, READ, SEQ, SIZE, DICT, OBJ, SLICE, SET = range(9)


class Template:
    """Collects the flat graph outputs while turning Python values into specs."""

    def __init__(self, tracer, readers: dict):
        self.tracer = tracer
        self.readers = readers  # id(object that existed before the trace) -> fn(L) reading it now
        self.flat: list = []  # IR values the graph returns
        self._slot: dict = {}  # id(trace value) -> its index in flat
        self._memo: dict = {}  # id(python object) -> its spec (aliasing and cycles)
        self._keep: list = []
        self._traced: dict = {}  # id -> whether the object holds trace values
        self._found: dict = {}  # id -> the trace value an object reaches where attributes do not rebuild it
        self._scanned: set = set()  # ids the scans met (without a trace value: a scan that finds one breaks)
        self._budget = _SCAN_BUDGET

    def leaf(self, v):
        i = self._slot.get(id(v))
        if i is None:
            i = len(self.flat)
            self.flat.append(self.tracer.to_ir(v))
            self._slot[id(v)] = i
            self._keep.append(v)
        return (LEAF, i)

    def of(self, v):
        if isinstance(v, (torch.Tensor, SymBase)):
            return self.leaf(v)
        if isinstance(v, _ATOMS) and not isinstance(v, tuple):
            return (CONST, v)
        reader = self.readers.get(id(v))
        if reader is not None:  # lived before the trace: read it from where it lives now
            return (READ, reader)
        spec = self._memo.get(id(v))
        if spec is not None:
            return spec
        if isinstance(v, torch.Size):
            return (SIZE, [self.of(x) for x in v])
        if isinstance(v, slice):
            return (SLICE, self.of(v.start), self.of(v.stop), self.of(v.step))
        if isinstance(v, (list, tuple)):
            items: list = []
            spec = (SEQ, type(v), items, _seq_maker(type(v)))
            self._memo[id(v)] = spec
            self._keep.append(v)
            items += [self.of(x) for x in v]
            if isinstance(v, list) and vars_of(v):  # a list subclass with attributes
                return self._obj(v, spec)
            return spec
        if isinstance(v, dict):
            for k in v:  # a tensor as a key: the trace's own object
                if not isinstance(k, (str, int)) and self.holds_trace_values(k):
                    self.refuse(v, self.reaches(k) if not isinstance(k, (FakeTensor, SymBase)) else k)
            items = []
            spec = (DICT, type(v), items, [], _dict_setitem(type(v)), getattr(v, "default_factory", None))
            self._memo[id(v)] = spec
            self._keep.append(v)
            items += [(k, self.of(x)) for k, x in v.items()]
            spec[3].extend((k, self.of(x)) for k, x in vars_of(v).items())
            return spec
        if type(v) in (set, frozenset):  # a fresh set per call, of this call's values
            items = []
            spec = (SET, type(v), items)
            self._memo[id(v)] = spec
            self._keep.append(v)
            items += [self.of(x) for x in v]
            return spec
        if type(v) is collections.deque:
            items = []
            spec = (SEQ, collections.deque, items, v.maxlen)
            self._memo[id(v)] = spec
            self._keep.append(v)
            items += [self.of(x) for x in v]
            return spec
        if not _attributes_are_state(type(v)):  # a function, a class, a partial, an exception...
            found = self.reaches(v)
            if found is not None or hasattr(type(v), "__next__"):  # (an iterator: the same one each call)
                self.refuse(v, found)
            return (CONST, v)  # nothing of the trace in it: the same object
        if not self.holds_trace_values(v) and (id(v) in self.readers or not _users_class(type(v))):
            return (CONST, v)  # an object untouched by the trace: the same object, as eager returns it
        # (an object of the user's class made in the call, with or without trace values: a fresh one per
        # call, as eager makes; the same one each call would carry one call's changes into the next)
        attrs: list = []
        spec = (OBJ, type(v), attrs)
        self._memo[id(v)] = spec
        self._keep.append(v)
        attrs += [(k, self.of(x)) for k, x in state_of(v).items()]
        return spec

    def _obj(self, v, seq_spec):
        attrs = [(k, self.of(x)) for k, x in vars_of(v).items()]
        return (OBJ, type(v), attrs, seq_spec)

    def holds_trace_values(self, v, depth=0) -> bool:
        """Whether a Python object (transitively) holds a trace value: then it was built by the trace."""
        known = self._traced.get(id(v))
        if known is not None:
            return known
        if isinstance(v, (FakeTensor, SymBase)):
            return True
        if isinstance(v, torch.Tensor) or isinstance(v, _ATOMS) or id(v) in self.readers:
            return False
        self._traced[id(v)] = False  # cycles
        if depth > 8:  # deep: the bounded scan decides
            out = self.reaches(v) is not None
        elif isinstance(v, (list, tuple, set, frozenset)):
            out = any(self.holds_trace_values(x, depth + 1) for x in v)
        elif isinstance(v, dict):
            out = any(self.holds_trace_values(x, depth + 1) for x in v.values())
        elif _attributes_are_state(type(v)):
            out = any(self.holds_trace_values(x, depth + 1) for x in state_of(v).values())
        else:  # a function, a partial, an exception, an iterator...: what it references
            out = self.reaches(v) is not None
        self._traced[id(v)] = out
        self._keep.append(v)
        return out

    def reaches(self, v):
        """The first trace value (FakeTensor, symbolic value) object `v` references, directly or not,
        or None: a bounded scan of what the garbage collector sees it hold, minus what cannot hold
        one of this trace (modules, code, frames, classes not made in a function, a function's
        globals, objects that lived before the trace and are read from where they live)."""
        if id(v) in self._found:
            return self._found[id(v)]
        found = None
        todo = [v]
        seen = {id(v)}  # (kept for later scans only when this one is clean)
        scanned, readers, kinds = self._scanned, self.readers, _scan_kinds
        while todo and found is None:
            for r in _referents(todo.pop()):
                t = type(r)
                kind = kinds.get(t)
                if kind is None:
                    kind = _scan_kind(t)
                if kind == _SKIP or id(r) in seen or id(r) in scanned or id(r) in readers:
                    continue
                if kind == _FOUND:
                    found = r
                    break
                if kind == _CLASS and "<locals>" not in r.__qualname__ \
                        or t is dict and "__builtins__" in r and "__name__" in r:  # a module's globals
                    continue
                self._budget -= 1
                if self._budget < 0:  # more than a scan looks at: it may hold one (when in doubt, break)
                    found = _UNSCANNED
                    break
                seen.add(id(r))
                todo.append(r)
        if found is None:
            scanned |= seen
        self._found[id(v)] = found
        self._keep.append(v)
        return found

    def refuse(self, v, found):
        """A graph break: `v` holds trace value `found` (None: `v` is an iterator) where no recipe can
        put this call's value. It names the line that made `v` where its code says (a function, a
        generator, a class), else the line that computed `found`, else the call."""
        kind = _kind(v)
        node = getattr(found, "ds_node", None)
        computed = _node_location(node)
        at = _made_at(v) or computed or user_location()
        if found is None:
            raise GraphBreak(f"the function returns or stores {kind}, an iterator: a compiled call would hand "
                             "back the same iterator, drawn from, every time", at, _ITERATOR_ADVICE)
        if found is _UNSCANNED:
            what = f"more objects than a scan for trace values looks at ({_SCAN_BUDGET}), any of which may be one"
        elif isinstance(found, SymBase):
            what = f"a symbolic value ({_describe(found)}) that differs between calls"
        elif computed is not None:
            what = "a tensor computed in the trace" + (f" (at {computed})" if computed != at else "")
        elif hasattr(getattr(node, "target", None), "pretty"):
            what = f"the trace's placeholder for the input `{node.target.pretty()}`"
        else:
            what = "a tensor of the trace"
        if hasattr(type(v), "__next__") or isinstance(v, types.CoroutineType):
            advice = _ITERATOR_ADVICE
        elif callable(v) and not isinstance(v, type):
            advice = ("What to do: return (or store) the values it uses and make the function outside the "
                      "compiled function, or call it inside and return its result.")
        else:
            advice = (f"What to do: return (or store) the tensors and sizes themselves (in a tuple, list, dict "
                      f"or dataclass) and make the {getattr(v, '__name__', type(v).__name__)} outside the "
                      "compiled function.")
        raise GraphBreak(f"the function returns or stores {kind} holding {what}, which the compiled code cannot "
                         "rebuild with each call's values (its state is not in attributes it can fill)", at, advice)


_UNSCANNED = object()  # what a scan that ran out of its budget found
_users: dict = {}


def _users_class(t) -> bool:
    """A class defined in the user's code (not a library's, not ours): cached per class."""
    out = _users.get(t)
    if out is None:
        f = getattr(sys.modules.get(t.__module__), "__file__", None)
        out = _users[t] = not (isinstance(f, str) and (is_library_file(f) or is_ours(f))) and _attributes_are_state(t)
    return out


_ITERATOR_ADVICE = ("What to do: return a list or tuple of the values (`list(...)`) instead of an iterator, "
                    "and iterate over it outside the compiled function.")


def _referents(v):
    """What a scan looks into: a function's closure cells, defaults and attributes (not its code or
    globals), a class's own namespace, or else all the garbage collector sees it reference."""
    if isinstance(v, types.FunctionType):
        out = list(v.__closure__ or ())
        out += v.__defaults__ or ()
        if v.__kwdefaults__:
            out.append(v.__kwdefaults__)
        if v.__dict__:
            out.append(v.__dict__)
        return out
    if isinstance(v, type):
        return list(vars(v).values())
    return gc.get_referents(v)


_SCAN, _SKIP, _FOUND, _CLASS = range(4)
_scan_kinds: dict = {}  # type -> what a scan does with its objects (isinstance on tensors is slow)


def _scan_kind(t) -> int:
    if issubclass(t, (FakeTensor, SymBase)):
        kind = _FOUND
    elif issubclass(t, _OPAQUE):
        kind = _SKIP
    else:
        kind = _CLASS if issubclass(t, type) else _SCAN
    _scan_kinds[t] = kind
    return kind


_state_types: dict = {}


def _attributes_are_state(t) -> bool:
    """Whether `t.__new__(t)` plus the attributes (`__dict__`, `__slots__`) is the whole object: a
    class written in Python over `object`. One with fields of its own in C (an exception's args, a
    set's items, a `functools.partial`, an iterator, a function, a class) is not: its size says so."""
    out = _state_types.get(t)
    if out is None:
        slots = sum(len([n for n in ((s,) if isinstance(s, str) else s) if n not in ("__dict__", "__weakref__")])
                    for s in (vars(k).get("__slots__", ()) for k in t.__mro__))
        own = object.__basicsize__ + 8 * slots + 8 * (t.__weakrefoffset__ > 0) + 8 * (t.__dictoffset__ > 0)
        out = _state_types[t] = t.__itemsize__ == 0 and t.__basicsize__ == own
    return out


def _kind(v) -> str:
    """How a graph break names an object: `a function (f.<locals>.<lambda>)`, `a functools.partial`."""
    if isinstance(v, types.FunctionType):
        return f"a function ({v.__qualname__})"
    if isinstance(v, type):
        return f"a class made in the function ({v.__qualname__})"
    if isinstance(v, types.GeneratorType):
        return f"a generator ({v.__qualname__})"
    t = type(v)
    name = t.__qualname__ if t.__module__ in ("builtins", None) else f"{t.__module__}.{t.__qualname__}"
    return f"a {name}"


def _made_at(v) -> Location | None:
    """The user's line that made a function, generator or class (from its code or source), or None."""
    if isinstance(v, type):
        try:
            filename, line = inspect.getsourcefile(v), inspect.findsource(v)[1] + 1
        except (OSError, TypeError):
            return None
        name = v.__qualname__
    else:
        code = getattr(v, "__code__", None) or getattr(v, "gi_code", None) or getattr(v, "cr_code", None)
        if code is None and isinstance(getattr(v, "func", None), types.FunctionType):  # a partial of one
            code = v.func.__code__
        if not isinstance(code, types.CodeType):
            return None
        filename, line, name = code.co_filename, code.co_firstlineno, code.co_name
    if not filename or is_library_file(filename):
        return None
    return Location(filename, line, name, linecache.getline(filename, line).strip())


def _node_location(node) -> Location | None:
    """The user's line that computed a graph value (or, for `x.split(2)[0]`, its argument)."""
    if node is None:
        return None
    if node.location is not None:
        return node.location
    return next((a.location for a in node.args if getattr(a, "location", None) is not None), None)


def _describe(sym: SymBase) -> str:
    try:
        return sym.node.env.describe(sym.node.expr)
    except Exception:  # noqa: BLE001 - only words for a message
        return str(sym.node)


def vars_of(v) -> dict:
    try:
        return vars(v)
    except TypeError:
        return {}


def state_of(v) -> dict:
    """An object's attributes: its __dict__ and its __slots__."""
    out = dict(vars_of(v))
    for s in _slot_names(type(v)):
        if s not in ("__dict__", "__weakref__") and hasattr(v, s):
            out[s] = getattr(v, s)
    return out


def _seq_maker(t):
    if t in (list, tuple):
        return t
    if hasattr(t, "_fields"):  # namedtuple
        return lambda items: t(*items)
    if issubclass(t, list):
        return lambda items: _new_list(t, items)
    return t  # torch.return_types structseqs take a sequence


def _new_list(t, items):
    obj = t.__new__(t)
    list.extend(obj, items)
    return obj


def _dict_setitem(t):
    for base in t.__mro__:
        if base in (collections.OrderedDict, collections.defaultdict, dict):
            return base.__setitem__
    return dict.__setitem__


def build(spec, flat, L, memo):
    """This call's object for `spec` (`memo`: one object per spec per call, for aliasing)."""
    kind = spec[0]
    if kind == LEAF:
        return flat[spec[1]]
    if kind == CONST:
        return spec[1]
    if kind == READ:
        return spec[1](L)
    done = memo.get(id(spec))
    if done is not None:
        return done
    if kind == SEQ:
        if spec[1] is list or spec[1] is collections.deque:
            out = [] if spec[1] is list else collections.deque(maxlen=spec[3])
            memo[id(spec)] = out
            out.extend(build(s, flat, L, memo) for s in spec[2])
            return out
        out = spec[3]([build(s, flat, L, memo) for s in spec[2]])
        memo[id(spec)] = out
        return out
    if kind == SET:
        out = spec[1](build(s, flat, L, memo) for s in spec[2])
        memo[id(spec)] = out
        return out
    if kind == SIZE:
        return torch.Size([build(s, flat, L, memo) for s in spec[1]])
    if kind == SLICE:
        return slice(build(spec[1], flat, L, memo), build(spec[2], flat, L, memo), build(spec[3], flat, L, memo))
    if kind == DICT:
        t = spec[1]
        out = t.__new__(t) if t is not dict else {}
        if spec[5] is not None:
            out.default_factory = spec[5]
        memo[id(spec)] = out
        setitem = spec[4]
        for k, s in spec[2]:
            setitem(out, k, build(s, flat, L, memo))
        if spec[3]:
            _fill(out, [(k, build(s, flat, L, memo)) for k, s in spec[3]])
        return out
    if kind == OBJ:
        t = spec[1]
        if len(spec) > 3:  # a list subclass with attributes
            out = build(spec[3], flat, L, memo)
        else:
            out = t.__new__(t)
        memo[id(spec)] = out
        _fill(out, [(k, build(s, flat, L, memo)) for k, s in spec[2]])
        return out
    raise AssertionError(kind)


def _fill(obj, items) -> None:
    d = vars_of(obj) if hasattr(obj, "__dict__") else None
    for k, v in items:
        if d is not None and k not in _slot_names(type(obj)):
            d[k] = v
        else:
            object.__setattr__(obj, k, v)


_slots: dict = {}


def _slot_names(t) -> set:
    names = _slots.get(t)
    if names is None:
        names = _slots[t] = _find_slots(t)
    return names


def _find_slots(t) -> set:
    names = set()
    for klass in t.__mro__:
        s = getattr(klass, "__slots__", ())
        names.update((s,) if isinstance(s, str) else s)
    return names


def builder(spec):
    """fn(flat, L) -> the output for one spec, with a fast path for the common shapes."""
    if spec[0] == LEAF:
        i = spec[1]
        leaf = lambda flat, L: flat[i]  # noqa: E731
        leaf.index = i  # a runner may index the graph's result itself (runtime/pystate.py)
        return leaf
    if spec[0] == SEQ and spec[1] is tuple and all(s[0] == LEAF for s in spec[2]):
        idx = [s[1] for s in spec[2]]
        if idx == list(range(len(idx))):
            return lambda flat, L: flat[:len(idx)] if len(flat) != len(idx) else flat
    return lambda flat, L: build(spec, flat, L, {})
