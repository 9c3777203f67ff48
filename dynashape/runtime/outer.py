"""What a compiled function reads and writes besides its arguments: globals, closure cells, and
the globals of the modules whose code the trace runs.

Before the trace (`Outer.prepare`), the globals the function names (and the helpers of its own
module name) and its closure cells are walked: their values guarded, tensors made inputs,
modules registered. The function's globals dict and cells are containers of the Python state
(runtime/pystate.py): a store the trace makes (`global step; step += 1`, `nonlocal n`) is replayed
when the compiled code runs and undone after the trace, so no FakeTensor stays in a module.

Which other code runs is known only while the trace runs: a helper in another module
(`helpers.scaled(x)` reading `helpers.SCALE`), a method of a class defined elsewhere, a method of
this module reached through an object. A trace function (`Outer.watching`, calls only) walks each
new code object's global names in its own module the first time it is called, before its first
line runs, and watches that module's dict for stores the same way. Modules of torch, the standard
library, transformers and dynashape are not walked: their globals are taken as constant.

An attribute of a module read by name at run time (`getattr(helpers, "SCALE")`,
`sys.modules["helpers"].SCALE`, `importlib.import_module(name).SCALE`) is not in any code's names:
for the trace's duration the user's modules are of a subclass of ModuleType (`WatchedModule`) whose
attribute reads are walked like globals, an absent one guarded absent. A user module imported for
the first time by the trace (its body would run under the trace, and its stores be replayed on
every call) makes that call run eagerly; the next call traces again.

    >>> import helpers                     # helpers.py: SCALE = 2.0; def scaled(x): return x * SCALE
    >>> f = ds.compile(lambda x: helpers.scaled(x))
    >>> f(x); helpers.SCALE = 3.0; f(x)    # the guard `helpers.SCALE == 2.0` fails: traced again
"""
from __future__ import annotations

import contextlib
import dis
import functools
import sys
import types

import torch

from ..symbolic.sources import (AttrSource, CellSource, ClosureSource, GlobalSource, LocalSource, ModuleGlobalSource,
                                NamespaceSource)
from ..symbolic.userloc import is_library_file, is_ours, user_location
from ..tracing.errors import GraphBreak
from ..tracing.global_state import _FUNCTION_APPLY, function_apply_as_is
from ..tracing.inputs import ValueInput
from ..tracing.nondeterministic import clock_read
from ..tracing.cached import CachedStandIn, is_user_cache
from ..tracing.identity import user_id
from ..tracing.pyenv import (ABSENT as _MISSING, WatchedModule, user_delattr, user_globals, user_setattr, user_type,
                              watchers)
from .code_info import _attr_chains, _global_names

_LIBRARIES = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "sympy", "dynashape", "transformers",
                                                    "typing_extensions"}


class Outer:
    """The reads and writes of one trace outside its arguments (see the module's docstring)."""

    def __init__(self, fn_globals: dict, closure: tuple, freevars: tuple, co_names, chains, tracer, state):
        self.globals, self.closure, self.freevars = fn_globals, closure, freevars
        self.co_names, self.chains = co_names, chains
        self.tracer, self.state = tracer, state
        self.modules: list = []  # (source, module) of every module reached
        self._names: dict = {}  # id(globals dict) -> the names walked there
        self._spaces: dict = {}  # id(globals dict) -> NamespaceSource, or None: a library's (not walked)
        self._codes: set = set()  # code objects met while tracing
        self._chained: set = set()  # (id(globals dict), name, attributes) walked
        self._injected: list = []  # (globals dict, name) given a builtin of ours for the trace's duration
        self._swapped: list = []  # (globals dict or cell, name, the user's value, ours): lru_cache functions
        self._pending: list = []  # swaps met before the trace starts
        self.instead: dict = {}  # id(a swapped value) -> what the trace uses in its place
        self._seen: list = []
        self._watched: list = []  # modules made WatchedModule for the trace's duration
        self._later: list = []  # modules met before it (`prepare`): watched when it starts
        self.on_walked = None  # RngStates (tracing/nondeterministic.py): told when more state was walked
        self.late_break = None  # a break the trace found out only as it ran on (`check()` raises it)
        state.on_module = self.watch

    # ------------------------------------------------------------ before the trace
    def prepare(self, L) -> list:
        """Sources for what the function reads besides its arguments: modules, globals, closures.
        Returns the (source, module) pairs reached."""
        tracer, state = self.tracer, self.state
        for name, v in L.items():
            if isinstance(v, torch.nn.Module):
                tracer.register_module(v, LocalSource(name))
                self.modules += [(_sub(LocalSource(name), n), m) for n, m in v.named_modules()]
        own = self._space(self.globals)
        names = self._names.setdefault(id(self.globals), set())
        todo = [n for n in self.co_names if n not in names]
        names.update(todo)
        while todo:
            name = todo.pop(0)
            v = self.globals.get(name, _MISSING)
            if v is _MISSING:
                continue
            self.read(v, GlobalSource(name), (self.globals, name))
            if isinstance(v, types.FunctionType) and v.__globals__ is self.globals:
                for n in _global_names(v.__code__):  # a helper in the same module reads these too
                    if n not in names:
                        names.add(n)
                        todo.append(n)
        self._chains(self.chains, self.globals, GlobalSource)
        for i, (var, cell) in enumerate(zip(self.freevars, self.closure)):
            state.container("cell", cell, CellSource(i, var))  # `nonlocal n; n += 1` is replayed
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            self.read(v, ClosureSource(i, var), (cell, "cell_contents"))
        if own is not None:
            state.container("dict", self.globals, own)  # `global n; n = ...` is replayed
        return self.modules

    def read(self, v, src, holder=None) -> None:
        """A global or closure value the traced code may read, as guarded inputs. `holder`: (the
        globals dict or closure cell, the name) where it sits."""
        tracer, state = self.tracer, self.state
        if is_user_cache(v):  # asked without running its body while the trace runs (tracing/cached.py)
            tracer.value_inputs.append(_ident(src, v))
            if holder is not None:
                self._swap(holder, v, CachedStandIn(v, src, tracer))
            return
        if isinstance(v, torch.Tensor):
            tracer.lift_sources.setdefault(id(v), src)
            tracer._keep.append(v)
        elif isinstance(v, torch.nn.Module):
            tracer.value_inputs.append(_ident(src, v))  # the same module object, then its state
            tracer.register_module(v, src)
            self.modules += [(_sub(src, n), m) for n, m in v.named_modules()]
        elif isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
            tracer.value_inputs.append(_ident(src, v))  # a rebound helper function or class recompiles
            router = state.router_for(v)
            if router is not None:  # `from torch import manual_seed`: the patch on torch never sees this
                if holder is not None:  # name, so the trace calls what `torch.manual_seed` calls meanwhile
                    self._swap(holder, v, router)
                return
            if isinstance(v, types.FunctionType) and not _library(v):  # and one whose code was replaced
                tracer.value_inputs.append(_ident(AttrSource(src, "__code__"), v.__code__))  # (autoreload)
            if isinstance(v, types.FunctionType) and not _library(v):
                state.function(v, src)  # its cells: read (guarded) and written (replayed) by the trace
            elif isinstance(v, type):  # a class of the user's: its attributes (`Counted.scale += 0.5`) too
                state._class_attrs(v, src)
        elif isinstance(v, types.ModuleType):
            if not _library(v):  # its attributes are guarded where they are read (`settings.SCALE`); a
                self._namespace(_dict_of(v))  # store to one (`settings.SCALE = 3`) is replayed
                self.watch(v)
        elif isinstance(v, functools.partial):  # the same partial, and what it holds now (its keywords
            tracer.value_inputs.append(_ident(src, v))  # dict can be changed in place)
            self.read(v.func, AttrSource(src, "func"))
            state.root(v.args, AttrSource(src, "args"))
            state.root(v.keywords, AttrSource(src, "keywords"))
        elif callable(v) and not is_object(v):
            tracer.value_inputs.append(_ident(src, v))
        else:  # constants, containers, config objects: walked, guarded, changes replayed (an iterator
            state.root(v, src, holder)  # swapped where it sits for a copy the trace draws from)

    def _chains(self, chains, g: dict, source) -> None:
        for root, attrs in chains:  # settings.Cfg.scale, Cfg.scale: the attribute read, not the class
            if (id(g), root, attrs) in self._chained:  # (a module's own attributes are WatchedModule's too;
                continue  # a class's are read without its module seeing them)
            self._chained.add((id(g), root, attrs))
            v = g.get(root, _MISSING)
            src = source(root)
            if _library(v):
                continue
            for a in attrs:
                if not isinstance(v, (types.ModuleType, type)):
                    break
                src, parent = AttrSource(src, a), v
                v = getattr(v, a, _MISSING)
                if v is _MISSING:
                    break
                if not isinstance(v, (types.ModuleType, type)):
                    self.read(v, src, (_dict_of(parent), a) if isinstance(parent, types.ModuleType) else None)

    def _namespace(self, g: dict):
        """The source of globals dict `g` and the names walked there, making it a container of the
        state at its first meeting (None, None: a library's)."""
        space = self._space(g)
        if space is None:
            return None, None
        names = self._names.get(id(g))
        if names is None:
            names = self._names[id(g)] = set()
            self.state.container("dict", g, space)  # snapshotted now, before its code runs
        return space, names

    def _space(self, g: dict):
        """The source of globals dict `g` (None: a library's, or not a module's)."""
        if id(g) in self._spaces:
            return self._spaces[id(g)]
        name = g.get("__name__")
        if _library_globals(g):
            space = None
        elif g is self.globals:
            space = NamespaceSource("G", name if isinstance(name, str) else "the function's module")
        else:
            key = f"_GM{sum(s is not None and s.key != 'G' for s in self._spaces.values()) + 1}"
            self.state.env[key] = g  # the guards and readers name it so
            self.tracer.graph.namespace[key] = g  # and the graph, which reads its tensors
            space = NamespaceSource(key, name if isinstance(name, str) else "a namespace")
        self._spaces[id(g)] = space
        self._seen.append(g)  # (its id stays its own while the trace runs)
        return space

    # ------------------------------------------------------------ while the trace runs
    @contextlib.contextmanager
    def watching(self):
        """A trace function for the trace's duration: `met` for each code object at its first call."""
        prev = sys.gettrace()
        codes, met = self._codes, self.met

        def hook(frame, event, arg):
            if frame.f_code is _APPLY_CODE and not function_apply_as_is.active():
                # `my_op = MyFn.apply` bound before the patch: the trace ran the Function's forward as
                # plain calls (grad off, its backward lost); the trace ends, then breaks (check())
                self.late_break = self.late_break or GraphBreak(
                    f"torch.autograd.Function {getattr(frame.f_locals.get('cls'), '__name__', '')}.apply "
                    "(its custom backward is not traced)", user_location(2),
                    "The call runs eagerly, with the Function's own backward.")
            if frame.f_code not in codes:
                codes.add(frame.f_code)
                if not is_ours(frame.f_code.co_filename):  # (our evaluations' namespaces are not the user's)
                    met(frame.f_globals, frame.f_code)
            return prev(frame, event, arg) if prev is not None else None
        outer_before = getattr(watchers, "outer", None)
        watchers.outer = self
        for m in list(sys.modules.values()) + self._later:
            if type(m) is types.ModuleType and _user_module(m):
                self.watch(m)
        for holder, v, ours in self._pending:
            self._swap(holder, v, ours)
        self._pending.clear()
        sys.settrace(hook)
        try:
            yield
        finally:
            sys.settrace(prev)
            watchers.outer = outer_before
            for m in self._watched:
                if type(m) is WatchedModule:
                    m.__class__ = types.ModuleType
            self._watched.clear()
            for g, name in self._injected:
                if g.get(name) is _INJECT[name]:
                    del g[name]
            self._injected.clear()
            self._unswap()

    def check(self) -> None:
        """After the trace: what it met that the compiled code must not assume (a bound Function.apply)."""
        if self.late_break is not None:
            raise self.late_break

    def _swap(self, holder, v, ours) -> None:
        """`v` replaced by `ours` where it sits while the trace runs (from its start, or now when it
        runs; put back after it, and never a store the trace made: its holder ignores the name)."""
        if getattr(watchers, "outer", None) is not self:
            self._pending.append((holder, v, ours))
            return
        c, name = holder
        if (c.get(name) if isinstance(c, dict) else c.cell_contents) is not v:
            return
        if isinstance(c, dict):
            c[name] = ours
        else:  # a closure cell
            c.cell_contents = ours
        self.state.ignored.add((id(c), name))
        self._swapped.append((c, name, v, ours))
        self.instead[id(v)] = ours

    def _unswap(self) -> None:
        for c, name, v, ours in reversed(self._swapped):
            if isinstance(c, dict):
                if c.get(name) is ours:
                    c[name] = v
            elif c.cell_contents is ours:
                c.cell_contents = v
        self._swapped.clear()
        self.instead.clear()

    def watch(self, m) -> None:
        """A user module whose attribute reads are walked while the trace runs (see `WatchedModule`)."""
        if type(m) is not types.ModuleType or _library(m):
            return
        if getattr(watchers, "outer", None) is not self:
            self._later.append(m)
            return
        m.__class__ = WatchedModule
        self._watched.append(m)

    def attribute(self, m, name: str, v) -> None:
        """`m.name` read by the trace through the module object (v: _MISSING when absent)."""
        d = _dict_of(m)
        space, names = self._namespace(d)
        if space is None or name in names:
            return
        names.add(name)
        if v is not _MISSING and name not in d:  # made by the module's __getattr__ (PEP 562) at each read
            raise GraphBreak(f"{space.module}.{name}, an attribute its module's __getattr__ makes", None,
                             "What to do: read it outside the compiled function and pass it as an argument.")
        src = GlobalSource(name) if d is self.globals else ModuleGlobalSource(space, name)
        if v is _MISSING:
            self.state.absent(space, name, src)
            return
        before = len(self.modules)
        self.read(v, src, (d, name))
        for s, mod in self.modules[before:]:
            self.state.module(mod, s)
        if self.on_walked is not None:
            self.on_walked.catch_up()

    def stores(self, name: str) -> None:
        """A name the user's code stores by `setattr`/`delattr` (not in its bytecode's store names)."""
        self.state.stored.add(name)

    def whole(self, m) -> None:
        """`vars(m)` / `m.__dict__` read by the user's code: what is read through the dict bypasses the
        reads walked by name, so every name there is walked."""
        for name, v in list(_dict_of(m).items()):
            if not name.startswith("__"):
                self.attribute(m, name, v)

    def met(self, g: dict, code) -> None:
        """Code about to run for the first time in this trace: the globals it reads in its module."""
        if code.co_name == "<module>" and g.get("__file__") == code.co_filename and not _library_globals(g):
            raise GraphBreak(f"the function imports {g.get('__name__')} for the first time: its body runs once, "
                             "eagerly", None, "(The next call is traced.)", once=True)
        space, names = self._namespace(g)
        if space is None:
            return
        clock = clock_read(code, g)  # `datetime.now()`, `from time import time`: no patch replaces them
        if clock is not None:
            raise clock
        self.state.stored.update(_stored_names(code))
        read = _global_names(code)
        new = [n for n in read if n not in names]
        names.update(new)
        for name, value in _INJECT.items():  # builtins answered as at run time, or refused (pyenv)
            if name in read and name not in g:
                g[name] = value
                self.state.ignored.add((id(g), name))
                self._injected.append((g, name))
        before = len(self.modules)
        source = GlobalSource if g is self.globals else functools.partial(ModuleGlobalSource, space)
        for n in new:
            v = g.get(n, _MISSING)
            if v is not _MISSING and v is not _INJECT.get(n):  # (ours, for the trace: not the user's global)
                self.read(v, source(n), (g, n))
        self._chains(_attr_chains(code), g, source)
        for src, m in self.modules[before:]:  # met while tracing: its state walked now
            self.state.module(m, src)
        if self.on_walked is not None:
            self.on_walked.catch_up()


def _dict_of(m) -> dict:
    return types.ModuleType.__getattribute__(m, "__dict__")


def _library_globals(g: dict) -> bool:
    """Globals of a library's module: torch's and the like by name, and any module installed in the
    standard library or site-packages (pytest's, hypothesis's gc callbacks, sympy's mpmath: code a
    trace may run that is not the user's). A namedtuple's `__new__` is made by exec in a namespace
    of its own. Modules without a file (exec'd code, `python -c`) are the user's."""
    name = g.get("__name__")
    if isinstance(name, str) and (name.split(".", 1)[0] in _LIBRARIES or name.startswith("namedtuple_")):
        return True
    f = g.get("__file__")
    return isinstance(f, str) and is_library_file(f)


_APPLY_CODE = _FUNCTION_APPLY.__func__.__code__
_INJECT = {"type": user_type, "globals": user_globals, "setattr": user_setattr, "delattr": user_delattr, "id": user_id}
_USER: dict = {}  # id(module) -> (module, whether it is the user's)


def _user_module(m) -> bool:
    hit = _USER.get(id(m))
    if hit is None or hit[0] is not m:
        hit = _USER[id(m)] = (m, isinstance(m, types.ModuleType) and not _library_globals(_dict_of(m)))
    return hit[1]


def _stored_names(code) -> frozenset:
    """Names the code (and code nested in it) stores or deletes as a global or an attribute."""
    return _names(code, ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_ATTR", "DELETE_ATTR"))


@functools.lru_cache(maxsize=8192)
def _names(code, opnames: tuple) -> frozenset:
    names, todo = set(), [code]
    while todo:
        c = todo.pop()
        names.update(ins.argval for ins in dis.get_instructions(c) if ins.opname in opnames)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return frozenset(names)


def _sub(src, dotted: str):
    return AttrSource(src, dotted) if dotted else src


def _ident(src, v):
    return ValueInput(src, v, "id")


def is_object(v) -> bool:
    """A plain Python object whose attributes the trace may read (a config, a cache, a dataclass)."""
    if isinstance(v, (torch.Tensor, torch.nn.Module, type, types.ModuleType, types.FunctionType,
                      types.BuiltinFunctionType, types.MethodType, functools.partial)):
        return False
    if isinstance(v, (bool, int, float, str, bytes, type(None), tuple, torch.dtype, torch.device)):
        return False
    return hasattr(v, "__dict__")


def _library(v) -> bool:
    """A module or class of torch, the standard library and the like: its attributes are not guarded."""
    name = v.__name__ if isinstance(v, types.ModuleType) else getattr(v, "__module__", None)
    return isinstance(name, str) and name.split(".", 1)[0] in _LIBRARIES
