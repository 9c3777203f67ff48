"""The Python state a trace can read and change: guarded, restored, and replayed per call.

The trace runs the user's Python for real, so it reads argument objects, module
state and globals, and may change them (`self.cache = ...`, `layer.keys = cat(...)`,
`acc.append(y)`). Before the trace we walk what it can reach from its roots (the
arguments, the modules, the globals it names), giving every object a source
(`L['cache'].layers[0]`):

- guards: the types, lengths, keys and plain values met on the way (checked on
  every call, not only after `Module.__setattr__`; those over modules' own dicts
  whenever one of those dicts was written, guards/native.py), tensors become
  inputs read from their source;
- snapshot: a shallow copy of every list, dict, object `__dict__` and closure cell met,
  and of the globals of the modules whose code the trace runs (runtime/outer.py);
- after the trace, the difference from the snapshot is the trace's side effects:
  they are turned into *effects* replayed with this call's values when the
  compiled code runs, once, and the objects are restored to the snapshot, so no
  FakeTensor or trace-time object stays behind (also when the trace fails).
"""
from __future__ import annotations

import collections
import copy
import functools
import logging
import types
import weakref

import torch
from torch.nn.modules import module as nn_module

from ..guards import module_epoch, native
from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import evaluate
from ..symbolic.sources import AttrSource, ItemSource, NamespaceSource, Source
from ..tracing.errors import GraphBreak
from ..tracing.outputs import Template, build, builder
from ..tracing.pyenv import WeakStandIn
from .annotations import ANY as _MARKED_ANY
from .pystate_classes import _ATOMIC, _PLAIN, ClassState, _library_class, _plain, exact_text, _exactly
from .pystate_containers import _contents, _set_items, _target
from .pystate_swaps import ARGUMENT, SwapState
from .pystate_why import _module_attributes_text, _why_attrs, _why_dicts, _why_keys, _why_modules, _why_replaced

# loggers and their machinery: what the user's code asks of them (a record, isEnabledFor) is decided
# when the compiled code runs or guarded by its answer (tracing/py_output.py), not by walking them
_BY_IDENTITY = (logging.Logger, logging.LoggerAdapter, logging.Handler, logging.Formatter, logging.Filter,
                logging.Manager, logging.PlaceHolder)
_MAX_DEPTH = 6
# nn.Module's own members (parameters, buffers, submodules, hooks: guarded and read apart); a module's
# other attributes, private ones (`self._steps`, `self._kv`) included, are the user's state
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module())) | {"_compiled_call_impl"}
_MODULE_DICTS = tuple(k for k, v in vars(torch.nn.Module()).items() if isinstance(v, dict))
_MAX_NODES = 4000


def _key_ok(k) -> bool:
    return isinstance(k, (str, int)) and not isinstance(k, bool)


class PyState(ClassState, SwapState):
    """Guards, snapshot and effects for the Python objects one trace can reach."""

    def __init__(self, tracer, globals_=None, closure=()):
        self.tracer = tracer
        self.env = {"G": globals_ if globals_ is not None else {}, "C": closure or ()}
        self.lines: list[str] = []  # the guard function's body
        self.texts: list = []  # what check i says when it fails
        self.listed: list = []  # the checks shown in entry.guards (a str, or a function that writes it)
        self.ns: dict = {}
        self.containers: list = []  # (kind, obj, source): 'list', 'dict' or 'attrs' (an object's __dict__)
        self._seen: dict = {}  # id -> source
        self._var: dict = {}  # id -> variable in the guard function
        self._keep: list = []
        self.readers: dict = {}  # id -> fn(L) reading the object at run time
        self.effects: list = []
        self.out_spec = None
        self.template: Template | None = None
        self.module_targets = False
        self.skip_attrs: set = set()  # (id(module), name) traced as SymInts: not guarded as constants
        self._mod_plain: list = []  # (module __dict__, source, name, value): every module's plain attributes
        self._walked: list = []  # (module, source): the modules whose members the guard checks
        self._class_dicts: list = []  # the user classes' dicts (class_dict), watched with the modules'
        self._user_classes: list = []  # the user classes walked (their methods' code: ran_methods)
        self._library_classes: list = []  # library module classes whose forward is guarded
        self.module_lines: list[str] = []  # checks that read only the walked modules' dicts (see guard())
        self._cells: list = []  # (closure cell, its int) holding a SymInt while tracing
        self.frame_state = None  # automatic dynamic for closed-over ints (runtime.policy.FrameState)
        self.ignored: set = set()  # (id(dict), key): put there for the trace only (runtime/outer.py)
        self.stored: set = set()  # names the user's code the trace ran stores as globals or attributes
        self._iterators: list = []  # (the copy of an iterator the trace draws from, source, its position)
        self._swaps: list = []  # (container, key, what the trace sees there, the user's object)
        self._twins: dict = {}  # id(iterator) -> the copy or stand-in the trace draws from
        self._refused = None  # a GraphBreak the walk found before the trace (pystate_swaps.py)
        self.on_module = None  # fn(module) for each module met on the way (runtime/outer.py watches its reads)
        self.order = None  # runtime/raise_order.py's markers: the changes made before calls that may raise

    # ------------------------------------------------------------ walking
    def _const(self, v, hint="k") -> str:
        name = f"_S{hint}{len(self.ns)}"  # _S: apart from guards/build.py's names, whose function inlines these
        self.ns[name] = v
        return name

    def _name(self, hint: str) -> str:
        self._n = getattr(self, "_n", 0) + 1
        return f"{hint}{self._n}_"

    def _check(self, cond: str, text, listed: bool = True) -> None:
        """`text` (or text(L)) says why it failed; `listed`: shown in entry.guards."""
        self.lines.append(f"if not ({cond}): return {len(self.texts)}")
        self.texts.append(text)
        if listed:
            self.listed.append(getattr(text, "text", text))

    def _reader(self, src: Source):
        return _Reader(src, self.env)

    def root(self, v, src: Source, holder=None):
        """An argument or global the trace may read: guard and track what it reaches. `holder`: (the
        dict, list or closure cell, the key) where it sits, or ARGUMENT (pystate_swaps.py). Returns what
        the trace sees in its place (an iterator argument's copy or stand-in; `v` itself otherwise)."""
        var = self._name("v")
        self.lines.append(f"{var} = {src.name()}")
        self._visit(v, src, var, 0, holder)
        return self.given(v, holder)

    def copied(self, copy, src: Source) -> None:
        """A list/dict argument the tracer rebuilt with symbolic values (ints may be dynamic): the
        trace's changes to the copy are replayed on the caller's object, which an output reads back."""
        if isinstance(copy, tuple):  # immutable itself; the lists and dicts in it are copies too
            for i, x in enumerate(copy):
                self.copied(x, ItemSource(src, i))
            return
        if type(copy) not in (list, dict) or id(copy) in self.readers:
            return
        self.readers[id(copy)] = self._reader(src)
        self._keep.append(copy)
        self._contain("list" if type(copy) is list else "dict", copy, src)
        items = enumerate(copy) if type(copy) is list else copy.items()
        for k, x in items:
            if isinstance(x, (list, dict, tuple)) and _key_ok(k):
                self.copied(x, ItemSource(src, k))

    def module(self, m: torch.nn.Module, src: Source) -> None:
        """A module's own state (not its parameters, which are tensor inputs)."""
        if id(m) in self._seen:
            return
        self._seen[id(m)] = src
        self._keep.append(m)
        self.readers[id(m)] = self._reader(src)
        mv = self._const(m, "m")
        self._var[id(m)] = mv
        d = vars(m)
        self._contain("attrs", m, src)
        for k in _MODULE_DICTS:  # members, hooks (one a trace that then broke registered is taken off again)
            if isinstance(d.get(k), dict):
                self._contain("dict", d[k], AttrSource(src, k))
        self._walked.append((m, src))
        self._mod_plain.append((d, src, "training", m.training))
        self._class_attrs(type(m), src)
        self._library_forwards(type(m))
        self._attrs(m, src, mv, 1, module=True)
        for k in module_epoch.HOOKS:  # the hooks the trace ran: what they reach (a closed-over list
            if d.get(k):  # they append to) is guarded and their changes replayed like the forward's
                self._child(d[k], AttrSource(src, k), f"{mv}.{k}", 1)
        if "_nn_module" not in self.env:  # and the global module hooks, once
            self.env["_nn_module"] = nn_module
            for k in module_epoch.GLOBAL_HOOKS:
                if getattr(nn_module, k, None):
                    self._child(getattr(nn_module, k), AttrSource(_NNModule(), k), f"_nn_module.{k}", 1)

    def _visit(self, v, src: Source, var: str, depth: int, holder=None) -> None:
        """`holder`: (container, key) where `v` sits, when an iterator there can be swapped for the trace."""
        tr = self.tracer
        if isinstance(v, torch.Tensor):
            tr.lift_sources.setdefault(id(v), src)
            tr._keep.append(v)
            return
        if isinstance(v, _PLAIN):
            if v is None or isinstance(v, bool):
                self._check(f"{var} is {v}", f"{src.pretty()} is {v}")
            elif type(v) is float:  # by its text: -0.0 is not 0.0 (`x * s`), and a NaN is a NaN
                self._check(f"type({var}) is float and repr({var}) == {exact_text(v)!r}", f"{src.pretty()} == {v!r}")
            else:
                self._check(f"type({var}) is {type(v).__name__} and {var} == {self._const(v)}",
                            f"{src.pretty()} == {v!r}")
            return
        if isinstance(v, _ATOMIC):
            self._check(f"{var} == {self._const(v)}", f"{src.pretty()} == {v!r}")
            return
        if isinstance(v, (type, types.ModuleType, types.BuiltinFunctionType)):
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is {getattr(v, '__name__', v)}")
            if isinstance(v, types.ModuleType) and self.on_module is not None:
                self.on_module(v)
            elif isinstance(v, types.BuiltinFunctionType):  # `from warnings import warn`: intercepted
                self._route(v, holder)
            return
        first = self._seen.get(id(v))
        if first is not None:  # met before on another path: the same object again
            other = self._var.get(id(v))
            if other is not None:
                self._check(f"{var} is {other}", f"{src.pretty()} is {first.pretty()}")
            if id(v) in self._twins:  # an iterator: its copy or stand-in here too
                self._met_again(v, src, holder)
            elif isinstance(v, types.FunctionType):
                self._route(v, holder)
            return
        if isinstance(v, torch.nn.Module):
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same module")
            self.module(v, src)
            return
        self._seen[id(v)] = src
        self._var[id(v)] = var
        self._keep.append(v)
        if len(self._seen) > _MAX_NODES or depth > _MAX_DEPTH:
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same object")
            return
        self.readers[id(v)] = self._reader(src)
        t = self._const(type(v), "t")
        if isinstance(v, (list, tuple)) or type(v) is collections.deque:
            if type(v) in (list, collections.deque):  # (a deque's changes replayed as a list's)
                self._contain("list", v, src)
            if type(v) is collections.deque and _plain(list(v)):
                self._check(f"type({var}) is {t} and list({var}) == {self._const(copy.deepcopy(list(v)))}", f"{src.pretty()} == {v!r}")
                return
            if _plain(v):
                self._check(f"type({var}) is {t} and {var} == {self._const(copy.deepcopy(list(v) if type(v) is list else v))}"
                            + _exactly(var, v), f"{src.pretty()} == {v!r}")
                self._contain_nested(v, src)
                return
            self._check(f"type({var}) is {t} and len({var}) == {len(v)}",
                        f"type({src.pretty()}) is {type(v).__name__} and len({src.pretty()}) == {len(v)}")
            for i, x in enumerate(v):
                self._child(x, ItemSource(src, i), f"{var}[{i}]", depth, (v, i) if type(v) is not tuple else None)
            if vars_or_none(v):
                self._attrs(v, src, var, depth)
            return
        if isinstance(v, dict):
            if "__builtins__" in v and "__name__" in v:  # a module's globals: read through their own guards
                self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same namespace")
                return
            self._contain("dict", v, src)
            if _plain(v):
                self._check(f"type({var}) is {t} and {var} == {self._const(copy.deepcopy(dict(v)))}" + _exactly(var, v),
                            f"{src.pretty()} == {v!r}")
                self._contain_nested(v, src)
                return
            self._check(f"type({var}) is {t} and tuple({var}) == {self._const(tuple(v))}",
                        f"type({src.pretty()}) is {type(v).__name__} and its keys are {tuple(v)!r}")
            for k, x in v.items():
                if _key_ok(k):
                    self._child(x, ItemSource(src, k), f"{var}[{k!r}]", depth, (v, k))
            if vars_or_none(v):
                self._attrs(v, src, var, depth)
            return
        if isinstance(v, (weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet)):
            # what it holds comes and goes with the caller's objects: a stand-in that breaks at any use
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same {type(v).__name__}")
            holder = self._holder(holder, v, src)
            if holder is not None and holder is not ARGUMENT:
                self._place(holder, WeakStandIn(v, src.pretty()), v)
            return
        if isinstance(v, (set, frozenset)):
            self._check(f"{var} == {self._const(set(v))}", f"{src.pretty()} == {v!r}")
            return
        if isinstance(v, types.FunctionType):  # by code object and closure contents, not identity
            self._check(f"type({var}) is {t} and {var}.__code__ is {self._const(v.__code__, 'code')}",
                        f"{src.pretty()} is a function of {v.__qualname__}'s code")
            self._route(v, holder)  # `self.seed = torch.manual_seed`: intercepted as torch.manual_seed is
            self._walk_cells(v, src, var, depth, int_policy=True)
            self._attrs(v, src, var, depth)
            return
        if isinstance(v, types.MethodType):
            self._check(f"type({var}) is {t} and {var}.__func__ is {self._const(v.__func__, 'o')}",
                        f"{src.pretty()} is a bound {v.__func__.__qualname__}")
            self._child(v.__self__, AttrSource(src, "__self__"), f"{var}.__self__", depth)
            return
        if type(v) is functools.partial:  # the same partial (func and args are read-only), and what its
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same partial")  # keywords
            self._child(v.args, AttrSource(src, "args"), f"{var}.args", depth)  # dict and args hold now
            self._child(v.func, AttrSource(src, "func"), f"{var}.func", depth)  # (its defaults: eager reads them)
            self._child(v.keywords, AttrSource(src, "keywords"), f"{var}.keywords", depth)
            return
        d = vars_or_none(v)
        if d is None and not _is_c_callable(v) and not isinstance(v, _BY_IDENTITY) and \
                not _library_class(type(v)) and self._slots(v, src, var, depth):  # a user's __slots__ object
            self._check(f"type({var}) is {t}", f"type({src.pretty()}) is {type(v).__qualname__}")
            self._class_attrs(type(v), src)
            return
        if d is None or callable(v) and not hasattr(type(v), "__dataclass_fields__") and _is_c_callable(v) \
                or (type(v).__module__ or "").startswith("dynashape.") or isinstance(v, _BY_IDENTITY):
            self._check(f"{var} is {self._const(v, 'o')}", f"{src.pretty()} is the same {type(v).__name__}")
            if hasattr(type(v), "__next__"):  # an iterator (itertools.count()): the trace may advance it
                self._iterator(v, src, holder)
            return
        self._check(f"type({var}) is {t}", f"type({src.pretty()}) is {type(v).__qualname__}")
        self._class_attrs(type(v), src)
        self._attrs(v, src, var, depth)

    def _contain_nested(self, v, src: Source) -> None:
        """The lists and dicts inside a plain one (guarded by its value): changed in place (`k[0] += 1` of
        a `{'k': [0]}`), their changes are replayed and undone like any container's."""
        for k, x in (v.items() if isinstance(v, dict) else enumerate(v)):
            if type(x) in (list, dict) and _key_ok(k) and id(x) not in self.readers:
                self.container("list" if type(x) is list else "dict", x, ItemSource(src, k))
                self._contain_nested(x, ItemSource(src, k))

    def container(self, kind: str, obj, src: Source) -> None:
        """A list, dict, object (`attrs`) or closure cell (`cell`) whose changes by the trace are
        replayed at run time and undone after it. One met after the snapshot (while the trace runs:
        another module's globals, runtime/outer.py) is snapshotted now, before its code runs."""
        if id(obj) not in self.readers:
            self.readers[id(obj)] = self._reader(src)
            self._keep.append(obj)
        self._contain(kind, obj, src)

    def _contain(self, kind: str, obj, src: Source) -> None:
        self.containers.append((kind, obj, src))
        if hasattr(self, "_snap"):
            self._snap.append((kind, obj, src, _contents(kind, obj)))
            if kind == "attrs":
                self._contained_attrs(obj, src)
            self._written = None  # its writes are not watched: every container is compared

    def absent(self, space: NamespaceSource, name: str, src: Source) -> None:
        """A module attribute the trace looked for and did not find (`getattr(config, "EXTRA", 1.0)`)."""
        self._check(f"{name!r} not in {space.name()}", f"{src.pretty()} is not defined")

    def _int_cell(self, cell, x: int, src: Source) -> bool:
        """A closed-over int of a function argument follows the int policy (automatic dynamic: a
        new lambda closing over another value reuses one graph); True when it is handled here."""
        if self.frame_state is not None:
            self.frame_state.update_pairs([(src, x)])
        value = self.tracer.wrap_input(x, src)  # guarded there: by value when static, by type when symbolic
        if value is not x:
            cell.cell_contents = value  # while tracing only: restore() puts the int back
            self._cells.append((cell, x))
        return True

    def _child(self, x, src, expr, depth, holder=None):
        if isinstance(x, torch.Tensor):
            self._visit(x, src, expr, depth + 1)
            return
        var = self._name("v")
        self.lines.append(f"{var} = {expr}")
        self._visit(x, src, var, depth + 1, holder)

    def _attrs(self, obj, src, var, depth, module=False):
        """An object's __dict__: its keys, its plain values in one comparison, the rest one by one."""
        d = vars(obj)
        if not module:
            self._contain("attrs", obj, src)
        dv = self._name("d")
        if not module:
            self.lines.append(f"{dv} = {var}.__dict__")
            self._check(f"{dv}.keys() == {self._const(set(d), 'keys')}",
                        f"{src.pretty()} has the attributes {sorted(d)}")
        plain, rest = [], []
        for k, x in d.items():
            if module and (k in _MODULE_INTERNALS or (id(obj), k) in self.skip_attrs):
                continue
            if not _key_ok(k):
                continue
            if k.startswith("__"):
                continue
            immutable = isinstance(x, _PLAIN) or type(x) in (tuple, frozenset) and _plain(x)  # kernel_size=(3, 3)
            (plain if immutable and (module or isinstance(x, _PLAIN)) else rest).append((k, x))
        if module:  # checked together with every other module's, in one comparison
            self._mod_plain += [(d, src, k, copy.deepcopy(x)) for k, x in plain]
            if any(not isinstance(x, torch.nn.Module) for _, x in rest):
                self.lines.append(f"{dv} = {var}.__dict__")
        elif plain:
            get = ", ".join(f"{dv}[{k!r}]" for k, _ in plain)
            tv = self._name("p")
            self.lines.append(f"{tv} = ({get},)")
            vals = tuple(x for _, x in plain)
            self._check(f"{tv} == {self._const(vals, 'vals')} and tuple(map(type, {tv})) == "
                        f"{self._const(tuple(map(type, vals)), 'types')}" + _exactly(tv, vals, typed=True),
                        _why_attrs(self._reader(src), src, plain))
        for k, x in rest:
            if module and isinstance(x, torch.nn.Module):
                continue
            self._child(x, AttrSource(src, k) if k.isidentifier() else ItemSource(AttrSource(src, "__dict__"), k),
                        f"{dv}.get({k!r})" if module else f"{dv}[{k!r}]", depth, (d, k))

    def marks(self, t: torch.Tensor, src: Source, attr: str, dynamic_dims) -> None:
        """A tensor argument's ds.mark_dynamic & co, as PyTorch checks them: a later tensor needs no
        marks to reuse this entry, but the marks it does carry must hold here (a dim marked dynamic
        is dynamic in this entry, one marked static is not); else it recompiles."""
        now = getattr(t, attr, None)
        self.ns["_marks_ok"], self.ns["_marked"] = _marks_ok, _MARKED_ANY
        m = f"getattr({src.name()}, {attr!r}, None)"
        self._check(f"not _marked[0] or {m} is None or _marks_ok({m}, {self._const(now)}, "
                    f"{self._const(frozenset(dynamic_dims))})",
                    f"the ds.mark_* annotations of {src.pretty()} are not those of this entry "
                    f"(dynamic dims here: {sorted(dynamic_dims)})", listed=False)

    def environ(self, reads: dict) -> None:
        """os.environ values the trace read (None: the variable was unset)."""
        if reads:
            import os
            self.ns["_environ"] = os.environ
            for k, v in reads.items():
                self._check(f"_environ.get({k!r}) == {self._const(v)}", f"os.environ.get({k!r}) == {v!r}")

    # ------------------------------------------------------------ the guard
    def _module_checks(self) -> None:
        """Every walked module's plain attributes, and what its `_parameters`, `_buffers` and `_modules`
        hold, in a few comparisons over all modules (a per-module check costs more than the lookups).
        They read nothing but the modules' dicts (`module_epoch.state_dicts`): the guard runs them only
        when one of those dicts was written since they last passed (guards/native.py)."""
        if self._walked:  # `m.__dict__ = {...}`: the dicts below are no longer the module's
            import operator
            self.ns["_is"] = operator.is_
            mods = tuple([m for m, _ in self._walked])
            self._check_module(f"all(map(_is, map(vars, {self._const(mods, 'mods')}), "
                               f"{self._const(tuple(map(vars, mods)), 'mds')}))",
                               _why_replaced(self._walked), None)
            # `m.__class__ = Other` (a parametrization, a user's swap) writes no dict: the watch compares
            # the classes too, and this says which (a submodule's forward of another class ran stale)
            self._check_module(f"all(map(_is, map(type, {self._const(mods, 'mods')}), "
                               f"{self._const(tuple(map(type, mods)), 'mts')}))",
                               "the class of a module is the one traced (its __class__ was set since)", None)
            # no attribute added or deleted: one the trace looked for and did not find
            # (`getattr(m, "calls", 0)`) may be there now
            self.ns["_keys"] = dict.keys
            self._check_module(f"list(map(_keys, {self._const(tuple(map(vars, mods)), 'mds')})) == "
                               f"{self._const([set(vars(m)) for m in mods], 'mkeys')}",
                               _why_keys(self._walked), None)
        if self._mod_plain:
            self.ns["_get"] = dict.get
            dicts, _, keys, vals = zip(*self._mod_plain)
            ds_ = self._const(dicts, "mds")
            ks = self._const(keys, "mks")
            self.module_lines.append(f"mp_ = tuple(map(_get, {ds_}, {ks}))")
            self._check_module(f"mp_ == {self._const(vals, 'vals')} and tuple(map(type, mp_)) == "
                               f"{self._const(tuple(map(type, vals)), 'types')}" + _exactly("mp_", vals, typed=True), _why_modules(self._mod_plain),
                               functools.partial(_module_attributes_text, list(self._mod_plain)))
        members = []  # (module __dict__, name, the dict it holds, source)
        for m, src in self._walked:
            d = vars(m)
            for k in module_epoch.MEMBERS:
                t = d.get(k)
                if isinstance(t, dict):
                    members.append((d, k, t, src))
        if not members:
            return
        import itertools
        import operator
        self.ns.update(_get=dict.get, _is=operator.is_, _chain=itertools.chain.from_iterable, _values=dict.values)
        owners, names, held, _ = zip(*members)
        self._keep.append(tuple([tuple(t.values()) for t in held]))
        why = _why_dicts(members)
        # the dicts are still the modules' own (replaced without __setattr__: `vars(m)[k] = {}`)
        self._check_module(f"all(map(_is, map(_get, {self._const(owners, 'mds')}, "
                           f"{self._const(names, 'mks')}), {self._const(held, 'mdicts')}))",
                           why, None)
        empty = tuple([t for t in held if not t])
        if empty:  # nothing added since (`register_buffer`, `Sequential.append`: no __setattr__)
            self._check_module(f"not any({self._const(empty, 'empty')})", why, None)
        full = tuple([t for t in held if t])
        if full:  # the same names, in the same order, holding the same objects (by identity: an equal
            # one-element tensor is not the same parameter)
            md = self._const(full, "mdicts")
            keys = tuple([k for t in full for k in t])
            members_now = tuple([v for t in full for v in t.values()])
            self._check_module(f"tuple(_chain({md})) == {self._const(keys, 'keys')} "
                               f"and all(map(_is, _chain(map(_values, {md})), "
                               f"{self._const(members_now, 'members')}))", why, None)

    def _check_module(self, cond, why, listed) -> None:
        """A check of the walked modules' dicts: the guard runs these first, when one of the dicts changed."""
        self.module_lines.append(f"if not ({cond}): return {len(self.texts)}")
        self.texts.append(why)
        if listed:
            self.listed.append(listed)

    def guard(self):
        """fn(L) -> None when the state matches, else the index of the failed check (its text in
        `fn.texts`), for explaining a miss. The guard function of the entry inlines the same checks:
        `fn.lines` on every call, `fn.module_lines` when a dict of `fn.modules` changed."""
        self._module_checks()
        tensors = self._tensor_attr_checks()
        if not self.lines and not self.module_lines and self.env.keys() <= {"G", "C"}:
            return None  # (another module's globals, runtime/outer.py: the guard's namespace names them)
        ns = dict(self.ns, **self.env, torch=torch)
        body = self.module_lines + self.lines
        src = "def state_guard(L):\n" + "".join(f"    {ln}\n" for ln in body) + "    return None\n"

        def safe(L):  # a guard that cannot be evaluated fails, never raises
            if "state_guard" not in ns:  # compiled when a miss is explained: the entry's guard inlines the lines
                from ..ir.codegen import exec_source
                exec_source(src, "state-guards", ns)
            try:
                return ns["state_guard"](L)
            except Exception:
                return -1
        safe.source = src
        safe.texts = self.texts
        safe.listed = self.listed
        safe.ns = ns
        safe.lines = [_failing(ln) for ln in self.lines]
        safe.module_lines = [_failing(ln) for ln in self.module_lines]
        safe.modules = [m for m, _ in self._walked]
        safe.class_dicts = tuple(self._class_dicts)  # the user classes' own dicts, which the module checks read
        safe.tensors = tensors  # whose `__dict__`s the module checks read
        return safe

    # ------------------------------------------------------------ snapshot, effects, restore
    def snapshot(self) -> None:
        self._snap = [(kind, obj, src, _contents(kind, obj)) for kind, obj, src in self.containers]
        self._note_classes()
        for d, key, twin, _ in self._swaps:
            d[key] = twin
        self._own_dicts = [(obj, vars(obj)) for kind, obj, _ in self.containers if kind == "attrs"]
        # the dicts' version tags (guards/native.py): finish and restore compare contents only when
        # one was written since (lists have no tag: always compared); the stand-in says "written"
        owners = [obj for kind, obj, _ in self.containers if kind == "attrs"]
        dicts = [obj for kind, obj, _ in self.containers if kind == "dict" and isinstance(obj, dict)]
        if len(owners) + len(dicts) == sum(kind not in _UNTAGGED for kind, _, _ in self.containers):
            self._written = native.watch(dicts + [vars(o) for o in owners], owners)
            self._written.commit(self._written.snap())
        else:  # a container the tags cannot cover: everything is compared
            self._written = None

    def _dicts_unwritten(self) -> bool:
        w = getattr(self, "_written", None)
        return w is not None and w()

    def finish(self, out):
        """Called at the end of the trace: the output and the side effects as one flat IR tuple."""
        self._unswap()
        self._refuse_advanced()
        self._refuse_changed_classes()
        tmpl = Template(self.tracer, self.readers)
        self.template = tmpl
        self.out_spec = tmpl.of(out)
        unwritten = self._dicts_unwritten()
        for kind, obj, src, before in self._snap:
            if kind in ("dict", "attrs") and self.stored:  # (a store of the same object writes no dict)
                self._unchanged_stores(kind, obj, src, before, _contents(kind, obj))
            if unwritten and kind not in _UNTAGGED:
                continue
            effect = self.effect(tmpl, kind, obj, src, before, _contents(kind, obj))
            if effect is not None:
                self.effects.append(effect)
                self.module_targets = self.module_targets or _module_target(kind, obj, src)
        return tuple(tmpl.flat)

    def effect(self, tmpl, kind, obj, src, before, now):
        """What replays the change of one container from `before` to `now` (specs of `tmpl`), or None."""
        if kind == "list":
            if len(now) != len(before) or any(a is not b for a, b in zip(now, before)):
                return "list", self.readers.get(id(obj)) or self._reader(src), [tmpl.of(x) for x in now], None
            return None
        sets = [(k, tmpl.of(x)) for k, x in now.items()
                if (k not in before or before[k] is not x) and (id(obj), k) not in self.ignored]
        if any(isinstance(k() if isinstance(k, weakref.ref) else k, (torch.Tensor, SymBase)) for k, _ in sets):
            raise GraphBreak(f"the function stores a traced value as a key of {src.pretty()}: the key would "
                             "be a stand-in of the trace, not the call's value", None,
                             "What to do: key it by something else, or store it outside the compiled function.")
        dels = [k for k in before if k not in now]
        if sets or dels:
            return kind, self.readers.get(id(obj)) or self._reader(src), sets, dels
        return None

    def _unchanged_stores(self, kind, obj, src, before, now) -> None:
        """A store of the object that was there already (`CALLS = 0` where CALLS is 0) leaves no
        difference to replay: where the code stored such a name, its value is guarded instead, so a
        caller changing it between calls traces again (and the store is then replayed)."""
        for k in self.stored.intersection(before):
            x = now.get(k, _MISSING)
            if x is not before[k] or (id(obj), k) in self.ignored or isinstance(x, torch.Tensor) and kind == "dict" \
                    and not isinstance(src, NamespaceSource):
                continue
            var = self._name("s")
            self.lines.append(f"{var} = {'vars(' + src.name() + ')' if kind == 'attrs' else src.name()}.get({k!r})")
            if isinstance(x, _PLAIN):
                cond = f"type({var}) is {self._const(type(x), 't')} and {var} == {self._const(x)}"
            else:
                cond = f"{var} is {self._const(x, 'o')}"
            self._check(cond, f"{src.pretty()}[{k!r}] is {x!r:.60}, as when the trace stored it")

    def restore(self) -> None:
        self._unswap()
        self._put_back_classes()
        for obj, d in getattr(self, "_own_dicts", ()):  # `obj.__dict__ = {...}` in the trace: its own dict back
            if vars(obj) is not d:
                object.__setattr__(obj, "__dict__", d)
        unwritten = self._dicts_unwritten()
        for kind, obj, src, before in getattr(self, "_snap", ()):
            if unwritten and kind not in _UNTAGGED:
                continue
            now = _contents(kind, obj)
            if kind == "list":
                if len(now) != len(before) or any(a is not b for a, b in zip(now, before)):
                    _set_items(obj, before)
                continue
            target = _target(kind, obj)
            if now.keys() != before.keys() or any(before[k] is not x for k, x in now.items()):
                for k in [k for k in now if k not in before]:
                    del target[k]
                for k, x in before.items():
                    if now.get(k, _MISSING) is not x:
                        target[k] = x
        for cell, x in self._cells:  # after the cells' snapshots, which hold the traced SymInt
            cell.cell_contents = x

    def runner(self, fn):
        """fn(L) -> flat graph values becomes fn(L) -> the output, with the effects applied."""
        finish = self.finisher()
        if self.order is not None and self.order.marks:  # what eager had changed when the graph raises
            return _named(self.order.runner(fn, finish), fn)
        i = getattr(finish, "index", None)
        if i is not None:  # one value out, no effects: the common case, one call fewer
            if getattr(type(fn), "forwards_to_fn", False):  # fn(L) is fn.fn(L), fn.fn swapped when ready
                return _named(lambda L: fn.fn(L)[i], fn)
            return _named(lambda L: fn(L)[i], fn)
        return _named(lambda L: finish(fn(L), L), fn)

    def finisher(self):
        """finish(flat, L) -> the output, with the effects applied (one per path of a trace tree)."""
        out_spec, effects = self.out_spec, self.effects
        if not effects:
            build_out = builder(out_spec)
            return build_out
        bump = self.module_targets

        def finish(flat, L):
            memo: dict = {}
            apply_effects(effects, flat, L, memo, bump)
            return build(out_spec, flat, L, memo)
        return finish


def apply_effects(effects, flat, L, memo: dict, bump: bool) -> None:
    """The effects written with this call's values (`flat`: the graph's)."""
    write_effects(read_effects(effects, flat, L, memo), bump)


def read_effects(effects, flat, L, memo: dict) -> list:
    """(kind, target, values) of each effect, with every target read before any is written (a replaced
    attribute's old object is still the one its changes go to)."""
    todo = []
    for kind, read, sets, dels in effects:
        target = read(L)
        if kind == "list":
            todo.append((kind, target, [build(s, flat, L, memo) for s in sets], None))
        else:
            todo.append((kind, target, [(k, build(s, flat, L, memo)) for k, s in sets], dels))
    return todo


def write_effects(todo, bump: bool) -> None:
    for kind, target, sets, dels in todo:
        if kind == "list":
            _set_items(target, sets)
            continue
        d = _target(kind, target)
        for k, v in sets:
            d[k] = v
        for k in dels:
            d.pop(k, None)
    if bump:
        module_epoch.epoch[0] += 1


def _module_target(kind, obj, src) -> bool:
    """A module's own dict or its members' (what the guards' watch of module dicts must hear of)."""
    return isinstance(obj, torch.nn.Module) or (kind == "dict" and isinstance(src, AttrSource)
                                                and src.attr in ("_parameters", "_buffers", "_modules"))


_MISSING = object()
_UNTAGGED = ("list", "cell", "class", "slots")
_REAL_TENSORS = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer) if hasattr(torch.nn, "Buffer") else (
    torch.Tensor, torch.nn.Parameter)  # containers without a dict version tag: always compared


class _NNModule(Source):
    """torch.nn.modules.module, where the global module hooks are kept."""
    _name = "_nn_module"
    _pretty = "torch.nn.modules.module"

    def __eq__(self, other):
        return type(other) is _NNModule

    def __hash__(self):
        return hash("_nn_module")


class _Reader:
    """fn(L) reading a source at run time, compiled on first use (most are never read)."""

    __slots__ = ("src", "env", "fn")

    def __init__(self, src, env):
        self.src, self.env, self.fn = src, env, None

    def __call__(self, L):
        if self.fn is None:
            self.fn = evaluate(f"lambda L: {self.src.name()}", dict(self.env))
        return self.fn(L)


class Runner:
    """The backend's callable with the output rebuilt and effects applied; its attributes (the
    source, a fused backend's regions and state) are the backend callable's."""

    __slots__ = ("run", "graph_fn")

    def __init__(self, run, fn):
        self.run, self.graph_fn = run, fn

    def __call__(self, L):
        return self.run(L)

    def __getattr__(self, name):
        return getattr(self.graph_fn, name)


def _failing(line: str) -> str:
    """A check `if not (c): return 3` as the entry's guard writes it: `if not (c): return False`."""
    head, sep, index = line.rpartition(": return ")
    return f"{head}: return False" if sep and line.startswith("if not (") and index.isdigit() else line


def _named(run, fn):
    return Runner(run, fn)


def vars_or_none(v):
    try:
        return vars(v)
    except TypeError:
        return None


def _is_c_callable(v) -> bool:
    """A callable object implemented in C or by a library (a torch op, a functools.partial, a
    torch.library custom op, whose own bookkeeping changes at its first call)."""
    module = type(v).__module__ or ""
    return not hasattr(type(v), "__call__") or module in ("builtins", "functools") or module.split(".")[0] == "torch"


def _marks_ok(marks, compiled, dynamic_dims) -> bool:
    """Whether a tensor with these ds.mark_* annotations may run an entry compiled with `compiled`
    whose dynamic dims (of this tensor) are `dynamic_dims`."""
    if not marks or marks == compiled:
        return True
    compiled = compiled or {}
    for d, m in marks.items():
        if m.kind == "unbacked" or m.min is not None or m.max is not None:
            if compiled.get(d) != m:  # its own kind of symbol, or a range the entry must have checked
                return False
        elif (m.kind == "static") == (d in dynamic_dims):
            return False
    return True
