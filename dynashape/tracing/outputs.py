"""What a compiled call returns: a template rebuilt per call from the graph's values.

The trace's result (and every value its side effects store) is walked once into a
template: trace values (FakeTensors, symbolic values, tensors) become slots of one
flat tuple the graph returns; containers and Python objects become recipes that
make a fresh object of the same type per call, as eager does (dict subclasses such
as OrderedDict or transformers' ModelOutput, dataclasses, namedtuples,
`torch.Size`, a KV-cache object created in the forward). Objects that existed
before the trace are read again from where they live (`L['cache']`), never reused
from the trace.

>>> t = Template(tracer, readers={})             # doctest: +SKIP
>>> spec = t.of(out); graph.output(tuple(t.flat)) # doctest: +SKIP
>>> build(spec, flat, L, {})                      # doctest: +SKIP
"""
from __future__ import annotations

import collections
import enum
import types

import torch

from ..symbolic.symtypes import SymBase
from .fake import FakeTensor

_ATOMS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format, enum.Enum, type, types.FunctionType, types.BuiltinFunctionType,
          types.ModuleType, type(Ellipsis), range)

# spec kinds (tuples: cheap to build and to walk)
LEAF, CONST, READ, SEQ, SIZE, DICT, OBJ, SLICE = range(8)


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
            items = []
            spec = (DICT, type(v), items, [], _dict_setitem(type(v)), getattr(v, "default_factory", None))
            self._memo[id(v)] = spec
            self._keep.append(v)
            items += [(k, self.of(x)) for k, x in v.items()]
            spec[3].extend((k, self.of(x)) for k, x in vars_of(v).items())
            return spec
        if not self.holds_trace_values(v):
            return (CONST, v)  # an object untouched by the trace: the same object, as eager returns it
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
        if isinstance(v, torch.Tensor) or isinstance(v, _ATOMS) or depth > 8 or id(v) in self.readers:
            return False
        self._traced[id(v)] = False  # cycles
        if isinstance(v, (list, tuple, set, frozenset)):
            out = any(self.holds_trace_values(x, depth + 1) for x in v)
        elif isinstance(v, dict):
            out = any(self.holds_trace_values(x, depth + 1) for x in v.values())
        else:
            out = any(self.holds_trace_values(x, depth + 1) for x in state_of(v).values())
        self._traced[id(v)] = out
        self._keep.append(v)
        return out


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
        if spec[1] is list:
            out = []
            memo[id(spec)] = out
            out.extend(build(s, flat, L, memo) for s in spec[2])
            return out
        out = spec[3]([build(s, flat, L, memo) for s in spec[2]])
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
