"""`dynashape.compile`: the cache of compiled entries per function, dispatch, recompiles.

Each call binds the arguments to a dict `L` (name -> value), tries the cache
entries newest first (one generated guard predicate each), and runs the first
whose guards hold. On a miss it traces again, with the policy deciding which
sizes are symbolic, and records in plain words why the old entries failed.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import os
import types
import warnings
import weakref
from dataclasses import dataclass, field

import torch

from ..guards.build import GuardSet, build_guards
from ..ir.graph import Graph
from ..symbolic.errors import DataDependentError, DynashapeError
from ..symbolic import tracehook as _th
from ..symbolic.shape_env import ShapeEnv
from ..symbolic.userloc import user_frames
from ..symbolic.sources import AttrSource, ClosureSource, GlobalSource, ItemSource, LocalSource
from ..tracing.errors import GraphBreak, GraphBreakError
from ..tracing import state as _tracing_state
from ..tracing.inputs import ValueInput
from ..tracing.tracer import Tracer
from .config import config
from . import collectives as _collectives
from . import pgo as _pgo
from . import stance as _stance
from .errors import RecompileError
from .module_ints import symbolic_int_attributes
from .policy import FrameState, make_policy
from .registry import get_backend

log = logging.getLogger("dynashape.recompiles")
glog = logging.getLogger("dynashape.graph")
guard_log = logging.getLogger("dynashape.guards")

_ALL: "weakref.WeakSet[CompiledFunction]" = weakref.WeakSet()  # for reset()


@dataclass
class Stats:
    compiles: int = 0  # graphs compiled so far
    recompile_reasons: list = field(default_factory=list)  # one line per failed entry per recompile
    graph_breaks: list = field(default_factory=list)  # why a call ran eagerly
    fallbacks: list = field(default_factory=list)  # ops without a symbolic rule that specialized


@dataclass
class Entry:
    guard_set: GuardSet
    graph: Graph | None  # None for an eager (graph-break) entry
    fn: object  # fn(L), or None for eager
    env: ShapeEnv
    dynamic_sources: dict = field(default_factory=dict)  # source name -> why it is dynamic

    @property
    def guards(self) -> list[str]:
        return self.guard_set.guards

    @property
    def code(self) -> str:
        return getattr(self.fn, "source", "")

    def __repr__(self) -> str:
        kind = "eager (graph break)" if self.graph is None else "graph"
        return f"<Entry {kind}: {len(self.guards)} guards>"


class CompiledFunction:
    """A function compiled by dynashape; call it like the original."""

    def __init__(self, fn, *, dynamic=None, fullgraph=False, backend="eager", bound_module=None):
        self._orig = fn
        self._fn = fn
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.backend = get_backend(backend)
        self._module = bound_module  # for compiled nn.Modules: passed as `self`
        code_fn = inspect.unwrap(fn)
        self._sig = inspect.signature(code_fn)
        params = list(self._sig.parameters.values())
        self._names = tuple(p.name for p in params)
        self._simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self._globals = getattr(code_fn, "__globals__", {})
        self._closure = getattr(code_fn, "__closure__", None) or ()
        self._freevars = getattr(getattr(code_fn, "__code__", None), "co_freevars", ())
        self._co_names = _global_names(getattr(code_fn, "__code__", None))
        self.entries: list[Entry] = []
        self.stats = Stats()
        self.frame_state = FrameState()
        self._warned_limit = False
        self._ran_eagerly = False  # eager_then_compile: the first call has run
        functools.update_wrapper(self, fn)
        _ALL.add(self)

    # ------------------------------------------------------------------ calling
    def _bind(self, args, kwargs) -> dict:
        if self._simple and not kwargs and len(args) == len(self._names):
            return dict(zip(self._names, args))
        ba = self._sig.bind(*args, **kwargs)
        ba.apply_defaults()
        return dict(ba.arguments)

    def __call__(self, *args, **kwargs):
        if self._module is not None:
            args = (self._module,) + args
        stance = _stance._current[0]
        if stance == "force_eager" or _tracing_state._tracers:  # inside another trace: inline it
            return self._fn(*args, **kwargs)
        L = self._bind(args, kwargs)
        for e in self.entries:
            if e.guard_set.fn(L):
                if e.fn is None:
                    return self._fn(*args, **kwargs)
                return e.fn(L)
        if stance == "eager_then_compile" and not self._ran_eagerly and not self.entries:
            self._ran_eagerly = True
            self.frame_state.update(L)  # the compile on the next call sees what already varied
            return self._fn(*args, **kwargs)
        return self._miss(L, args, kwargs, stance)

    def _miss(self, L, args, kwargs, stance="default"):
        if self.entries:
            reasons = []
            for e in self.entries:
                reasons += e.guard_set.explain(L) or ["guards failed"]
            reasons = self.frame_state.advise(reasons, L, self)
            if stance == "fail_on_recompile":
                raise RecompileError(f"{self.__name__} ({self._where()}) would recompile under stance "
                                     f"'fail_on_recompile':\n" + "\n".join(f"  - {r}" for r in reasons), reasons)
            self.stats.recompile_reasons.extend(reasons)
            if _th.on: _th.emit("recompile", self, reasons)  # noqa: E701
            if log.isEnabledFor(logging.INFO):
                log.info("Recompiling function %s in %s\n    triggered by:\n%s", self.__name__, self._where(),
                         "\n".join(f"    - {r}" for r in reasons))
            if len(self.entries) >= config.recompile_limit:
                return self._limit_hit(args, kwargs, reasons)
        return self._compile_and_run(L, args, kwargs)

    def _limit_hit(self, args, kwargs, reasons):
        msg = (f"dynashape: {self.__name__} ({self._where()}) hit recompile_limit "
               f"({config.recompile_limit}); running it eagerly from now on. Last reason: {reasons[0]}. "
               f"To keep one graph, make the varying dims dynamic (ds.mark_dynamic or "
               f"DYNASHAPE_DYNAMIC_SOURCES), or raise config.recompile_limit.")
        if _th.on: _th.emit("limit_hit", self, msg)  # noqa: E701
        if config.fail_on_recompile_limit_hit:
            raise RecompileError(msg, reasons)
        if not self._warned_limit:
            warnings.warn(msg, stacklevel=3)
            self._warned_limit = True
        return self._fn(*args, **kwargs)

    def _where(self) -> str:
        code = getattr(inspect.unwrap(self._orig), "__code__", None)
        return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else "?"

    # ------------------------------------------------------------------ compiling
    def _compile_and_run(self, L, args, kwargs):
        if _th.on: _th.emit("compile_start", self, L)  # noqa: E701
        _pgo.seed(self, L)  # what varied in earlier runs (the PGO profile) is dynamic from the start
        _collectives.sync(self, L)  # with compiler collectives: every rank makes the same sources dynamic
        env = ShapeEnv(specialize_zero_one=config.specialize_zero_one, duck_shape=config.use_duck_shape,
                       backed_size_oblivious=config.backed_size_oblivious)
        graph = Graph()
        graph.namespace.update(G=self._globals, C=self._closure)
        why_dynamic: dict = {}
        policy = make_policy(self.dynamic, self.frame_state, L, why_dynamic)
        tracer = Tracer(env, graph, policy, capture_scalar_outputs=config.capture_scalar_outputs,
                        capture_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops)
        modules = self._prepare(tracer, L)
        grad = torch.is_grad_enabled()
        unspec: set = set()
        try:
            fake = {}
            for name, v in L.items():
                if name == "self" and v is self._module and v is not None:
                    fake[name] = v
                else:
                    fake[name] = tracer.wrap_input(v, LocalSource(name))
            ba = inspect.BoundArguments(self._sig, fake)
            with contextlib.ExitStack() as stack:
                if config.allow_unspec_int_on_nn_module and modules:
                    unspec = stack.enter_context(symbolic_int_attributes(
                        tracer, modules, self.frame_state, self.dynamic is None and config.automatic_dynamic_shapes))
                tracer.run(self._fn, ba.args, ba.kwargs)
        except (GraphBreak, DataDependentError) as e:
            torch._C._set_grad_enabled(grad)
            return self._graph_break(e, tracer, env, modules, grad, args, kwargs)
        except DynashapeError as e:  # ours and meant for the user (a range that excludes the example...)
            torch._C._set_grad_enabled(grad)
            if _th.on: _th.emit("compile_failed", self, e)  # noqa: E701
            raise e.with_traceback(user_frames(e.__traceback__)) from None
        except Exception as e:  # the program failed, or we did: eager decides which
            torch._C._set_grad_enabled(grad)
            if _th.on: _th.emit("compile_failed", self, e)  # noqa: E701
            return self._trace_failed(e, tracer, env, modules, grad, args, kwargs)
        if _th.on: _th.emit("phase", "trace")  # noqa: E701
        env.raise_constraint_violations()
        guard_set = build_guards(tracer, env, globals_=self._globals, closure=self._closure,
                                 modules=modules, grad_enabled=grad, symbolic_attributes=unspec)
        if _th.on: _th.emit("phase", "guards")  # noqa: E701
        fn = self.backend(graph)
        entry = Entry(guard_set, graph, fn, env, why_dynamic)
        if _th.on: _th.emit("compile_end", self, entry, tracer)  # noqa: E701
        self.entries.insert(0, entry)
        self.stats.compiles += 1
        self.stats.fallbacks.extend(tracer.fallbacks)
        _pgo.record(self, L)
        if glog.isEnabledFor(logging.INFO):
            glog.info("graph of %s (%s):\n%s", self.__name__, self._where(), graph)
        if guard_log.isEnabledFor(logging.INFO):
            guard_log.info("guards of %s:\n%s", self.__name__, "\n".join(f"  {g}" for g in entry.guards))
        return fn(L)

    def _prepare(self, tracer, L):
        """Sources for what the function reads besides its arguments: modules, globals, closures."""
        modules = []
        for name, v in L.items():
            if isinstance(v, torch.nn.Module):
                tracer.register_module(v, LocalSource(name))
                modules += [(_sub(LocalSource(name), n), m) for n, m in v.named_modules()]
        names, seen = list(self._co_names), set(self._co_names)
        while names:
            name = names.pop(0)
            v = self._globals.get(name, _MISSING)
            if v is _MISSING:
                continue
            _read_outer(tracer, v, GlobalSource(name), modules)
            if isinstance(v, types.FunctionType) and v.__globals__ is self._globals:
                for n in _global_names(v.__code__):  # a helper in the same module reads these too
                    if n not in seen:
                        seen.add(n)
                        names.append(n)
        for i, (var, cell) in enumerate(zip(self._freevars, self._closure)):
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            _read_outer(tracer, v, ClosureSource(i, var), modules)
        return modules

    def _trace_failed(self, e, tracer, env, modules, grad, args, kwargs):
        """The trace raised. Eager decides: its error is the program's own (raised as eager raises
        it, type and message); if eager works, the failure was ours, and the call is a graph break
        that says so, never a crash."""
        try:
            out = self._fn(*args, **kwargs)
        except Exception as eager:
            raise eager.with_traceback(user_frames(eager.__traceback__)) from None
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        why = GraphBreak(f"dynashape could not trace this call ({type(e).__name__}: {detail})",
                         getattr(tracer, "last_location", None),
                         "It ran eagerly and gave eager's result. Please report it with the program.")
        return self._graph_break(why, tracer, env, modules, grad, args, kwargs, ran=(out,))

    def _graph_break(self, e, tracer, env, modules, grad, args, kwargs, ran=None):
        """`ran`: (result,) when the call already ran eagerly."""
        if _th.on: _th.emit("graph_break", self, e)  # noqa: E701
        if isinstance(e, DataDependentError):
            if self.fullgraph:
                raise DataDependentError(str(e), e.expr, e.location) from None
            e = GraphBreak(str(e).split("\n")[0], getattr(e, "location", None), str(e))
        if self.fullgraph:
            err = GraphBreakError(e.reason, e.location, e.advice or "")
            raise err from None
        reason = f"{e.reason}" + (f" at {e.location}" if e.location else "")
        self.stats.graph_breaks.append(reason)
        logging.getLogger("dynashape.graph_breaks").info("graph break in %s: %s", self.__name__, reason)
        try:
            guard_set = build_guards(tracer, env, globals_=self._globals, closure=self._closure,
                                     modules=modules, grad_enabled=grad)
        except Exception:  # a trace that failed half-way may not describe its inputs: keep no entry
            if ran is None:
                raise
            return ran[0]
        self.entries.insert(0, Entry(guard_set, None, None, env))
        if _th.on: _th.emit("compile_end", self, self.entries[0], tracer)  # noqa: E701
        return ran[0] if ran is not None else self._fn(*args, **kwargs)

    def reset(self):
        self.entries.clear()
        self.stats = Stats()
        self.frame_state = FrameState()


_MISSING = object()


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


def _sub(src, dotted: str):
    return AttrSource(src, dotted) if dotted else src


_PRIMITIVE = (bool, int, float, str, type(None))


def _plain(v) -> bool:
    """Only primitives, possibly nested in lists, tuples, dicts and sets."""
    if isinstance(v, _PRIMITIVE):
        return True
    if isinstance(v, (list, tuple, set, frozenset)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, _PRIMITIVE) and _plain(x) for k, x in v.items())
    return False


def _read_outer(tracer, v, src, modules, depth=0):
    """What the traced code may read from a global or closure value, as guarded inputs."""
    if isinstance(v, torch.Tensor):
        tracer.lift_sources.setdefault(id(v), src)
        tracer._keep.append(v)
    elif isinstance(v, torch.nn.Module):
        tracer.value_inputs.append(_ident(src, v))  # the same module object, then its state
        tracer.register_module(v, src)
        modules += [(_sub(src, n), m) for n, m in v.named_modules()]
    elif _plain(v):  # a changed constant (or a mutated list of them) recompiles
        tracer.value_inputs.append(_const(src, copy.deepcopy(v) if not isinstance(v, _PRIMITIVE) else v))
    elif depth >= 2:
        return
    elif isinstance(v, (list, tuple)):  # e.g. a list of tensors: each element by its own source
        tracer.value_inputs.append(ValueInput(src, type(v), "type", {"len": len(v)}))
        for i, x in enumerate(v):
            _read_outer(tracer, x, ItemSource(src, i), modules, depth + 1)
    elif isinstance(v, dict):
        tracer.value_inputs.append(ValueInput(src, type(v), "type", {"keys": tuple(v)}))
        for k, x in v.items():
            _read_outer(tracer, x, ItemSource(src, k), modules, depth + 1)
    elif isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)):
        if not isinstance(v, types.ModuleType):
            tracer.value_inputs.append(_ident(src, v))  # a rebound helper function or class recompiles
    elif hasattr(v, "__dict__") and not callable(v):  # a config object: identity and plain attributes
        tracer.value_inputs.append(_ident(src, v))
        for k, x in list(vars(v).items()):
            if not k.startswith("_"):
                _read_outer(tracer, x, AttrSource(src, k), modules, depth + 1)


def _ident(src, v):
    return ValueInput(src, v, "id")


def _const(src, v):
    return ValueInput(src, v, "const")


class CompiledModule(torch.nn.Module):
    """An nn.Module whose forward is compiled; parameters are read from the original each call."""

    def __init__(self, mod: torch.nn.Module, **opts):
        super().__init__()
        self._orig_mod = mod
        forward = type(mod).forward
        object.__setattr__(self, "_compiled", CompiledFunction(forward, bound_module=mod, **opts))

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    __call__ = forward  # skip nn.Module's hook machinery on the hot path

    @property
    def stats(self):
        return self._compiled.stats

    @property
    def entries(self):
        return self._compiled.entries

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)


def compile(fn=None, *, dynamic=None, fullgraph=False, backend="eager"):
    """Compile a function or nn.Module; also a decorator with or without arguments.

    >>> import torch, dynashape as ds
    >>> @ds.compile(dynamic=True)
    ... def f(x):
    ...     return x * x.size(0)
    >>> f(torch.ones(3)).tolist(), f(torch.ones(5)).tolist()[0], f.stats.compiles
    ([3.0, 3.0, 3.0], 5.0, 1)
    """
    if dynamic not in (None, True, False):
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    opts = dict(dynamic=dynamic, fullgraph=fullgraph, backend=backend)
    if fn is None:
        return lambda f: compile(f, **opts)
    if isinstance(fn, torch.nn.Module):
        return CompiledModule(fn, **opts)
    if not callable(fn):
        raise TypeError(f"dynashape.compile takes a function or an nn.Module, got {type(fn).__name__}")
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin such as torch.nonzero: call it through a Python function
        target = fn

        def fn(*args, **kwargs):
            return target(*args, **kwargs)

        functools.update_wrapper(fn, target)
        del fn.__wrapped__
    return CompiledFunction(fn, **opts)


def reset() -> None:
    """Forget all compiled code (PGO profiles are kept)."""
    for cf in _ALL:
        cf.reset()
