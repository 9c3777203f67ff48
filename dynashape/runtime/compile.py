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
import linecache
import logging
import os
import re
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field

import torch

from ..guards import native as _native
from ..guards.build import GuardSet, build_guards
from ..ir.graph import Graph
from ..symbolic.errors import DataDependentError, DynashapeError
from ..symbolic import tracehook as _th
from ..symbolic.shape_env import ShapeEnv
from ..symbolic.userloc import Location, user_frames
from ..symbolic.sources import LocalSource
from ..tracing.errors import GraphBreak, GraphBreakError
from ..tracing import state as _tracing_state
from ..tracing.state import running as _TRACING
from ..tracing.inputs import ValueInput
from ..tracing.tracer import Tracer
from ..tracing.meta_cache import modes_now
from .config import config
from .config import COLLECTIVES_ON as _COLLECTIVES_ON
from .registry import FLEET as _fleet
from . import stance as _stance
from .errors import RecompileError
from .annotations import _ATTR as _MARKS
from .module_scalars import symbolic_attributes
from .pystate import PyState, Runner
from .pystate_swaps import ARGUMENT
from .raise_order import RaiseOrder
from .dispatch import widen_for
from ..tracing.nondeterministic import RngStates
from ..tracing.pyenv import trace_environment
from .policy import make_policy, static_for
from .code_info import _attr_chains, _global_names, _shared_cache
from .outer import Outer, is_object
from .registry import ENTRY_WRAPPERS, get_backend
from .speculation import SideExit, Tree
from ..tracing.speculate import RealValues

log = logging.getLogger("dynashape.recompiles")
glog = logging.getLogger("dynashape.graph")
guard_log = logging.getLogger("dynashape.guards")

_ALL: "weakref.WeakSet[CompiledFunction]" = weakref.WeakSet()  # for reset()
_UNDER_MODE = ("the call is made under a TorchFunctionMode (it sees, and may change, every torch call the "
               "function makes, which compiled code would not make as eager does)", None,
               "The call runs eagerly; calls made outside the mode run compiled.")
_EXPLAINED = 8  # entries a recompile explains (newest first)
_KEPT_REASONS = 500  # recompile reasons kept in stats (the newest)


@dataclass
class Stats:
    compiles: int = 0  # graphs compiled so far
    recompile_reasons: list = field(default_factory=list)  # one line per failed entry per recompile
    graph_breaks: list = field(default_factory=list)  # why a call ran eagerly
    fallbacks: list = field(default_factory=list)  # ops without a symbolic rule that specialized
    recompile_reasons_dropped: int = 0  # the oldest reasons beyond _KEPT_REASONS, counted only
    side_exits: int = 0  # calls whose data took a branch their entry's compiled paths had not taken
    paths: int = 0  # paths traced through data-dependent branches (each a compile), over all entries
    widened: int = 0  # entries traced for sizes >= 2 that took a size 1 without a compile (symbolic/widen.py)

    def add_reasons(self, reasons) -> None:
        r = self.recompile_reasons
        r.extend(reasons)
        if len(r) > 2 * _KEPT_REASONS:  # trimmed in batches: amortized O(1) per reason
            self.recompile_reasons_dropped += len(r) - _KEPT_REASONS
            del r[:-_KEPT_REASONS]


@dataclass
class Entry:
    guard_set: GuardSet
    graph: Graph | None  # None for an eager (graph-break) entry
    fn: object  # fn(L), or None for eager
    env: ShapeEnv
    dynamic_sources: dict = field(default_factory=dict)  # source name -> why it is dynamic
    call_shape: tuple = ()  # (number of positional arguments, keyword names): how the user called it
    tree: object = None  # speculation.Tree when the graph branches on data
    run: object = None  # what a call runs: fn, or the function inside fn's runner (one call fewer)
    unwidenable: dict = field(default_factory=dict)  # symbol -> why its trace cannot take size 1
    refused: str | None = None  # why this entry did not take the last call's size 1 (dispatch.widen_for)

    def __post_init__(self):
        self.set_fn(self.fn)

    def set_fn(self, fn) -> None:
        self.fn = fn
        self.run = fn.run if isinstance(fn, Runner) else fn

    @property
    def guards(self) -> list[str]:
        return self.guard_set.guards

    @property
    def code(self) -> str:
        return getattr(self.fn, "source", "")

    def __repr__(self) -> str:
        kind = "eager (graph break)" if self.graph is None else "graph"
        return f"<Entry {kind}: {len(self.guards)} guards>"


class _Compiling:
    """The lock of traces (re-entrant: a trace may compile another function). A compiled call on another
    thread while one runs waits for it: the trace's stand-ins (a module's symbolic float, a cache's) sit in
    the objects both read. (Plain eager code of other threads can still see them meanwhile.)"""

    def __init__(self):
        self._lock = threading.RLock()
        self._owner = None
        self._depth = 0

    def __enter__(self):
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def __exit__(self, *exc):
        self._depth -= 1
        if not self._depth:
            self._owner = None
        self._lock.release()

    def locked_by_me(self) -> bool:
        return self._owner == threading.get_ident()


_COMPILING = _Compiling()
_NO_CODE = types.SimpleNamespace(__code__=None)  # (a callable without Python code: never replaced)
_EAGER_KEYS = 4096


def _eager_key(args) -> tuple:
    """The sizes and types of a call's arguments (a module's own state is not looked at)."""
    return tuple(a.shape if isinstance(a, torch.Tensor) else type(a) for a in args)


class CompiledFunction:
    """A function compiled by dynashape; call it like the original."""

    def __init__(self, fn, *, dynamic=None, fullgraph=False, backend=None, bound_module=None):
        backend = config.backend if backend is None else backend  # None: the configured default
        self._opts = dict(dynamic=dynamic, fullgraph=fullgraph, backend=backend)
        self._orig = fn
        self._fn = fn
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.backend = get_backend(backend)
        self._module = bound_module  # for compiled nn.Modules and bound methods: passed as `self`
        self._bound_cache: dict = {}  # id(instance) -> bound callable, for @ds.compile on a method
        code_fn = inspect.unwrap(fn)
        # a wrapper (a decorator) may behave differently for x=... and x: then how the user called
        # is part of the guards; for a plain function it is not
        self._shape_matters = code_fn is not fn
        self._sig = inspect.signature(code_fn)
        self._sig_fn = code_fn
        while isinstance(code_fn, functools.partial):  # its globals and closure are the wrapped function's
            code_fn = inspect.unwrap(code_fn.func)
        params = list(self._sig.parameters.values())
        self._names = tuple(p.name for p in params)
        self._simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        # positional arguments, all given: L built by one dict display (half of dict(zip(...)))
        self._arity = len(self._names) if self._simple else -1
        self._to_L = eval("lambda a: {" + ", ".join(f"{n!r}: a[{i}]" for i, n in enumerate(self._names)) + "}")
        # `f.__code__ = new` (IPython's autoreload, a patch) runs the new code in eager: checked each call
        self._code_of = code_fn if isinstance(getattr(code_fn, "__code__", None), types.CodeType) else _NO_CODE
        self._code = self._code_of.__code__
        self._globals = getattr(code_fn, "__globals__", {})
        self._closure = getattr(code_fn, "__closure__", None) or ()
        self._freevars = getattr(getattr(code_fn, "__code__", None), "co_freevars", ())
        self._co_names = _global_names(getattr(code_fn, "__code__", None))
        self._chains = _attr_chains(getattr(code_fn, "__code__", None))
        shared = _shared_cache(code_fn, self._closure, bound_module, dynamic, fullgraph, backend)
        self._shared = shared  # one cache per code object: ds.compile(f) twice shares entries and the limit
        self._cache = shared.cache
        self.stats = Stats()
        self.frame_state = shared.frame_state
        _native.start()  # the guards' dict watcher loads (or builds) meanwhile: the first compile does not wait
        self._warned_limit = False
        self._fell_back = False  # the recompile limit was hit: misses run eagerly, unexplained
        self._eager_keys: set = set()  # past it: the argument sizes that missed every entry
        # not agreed across ranks by compiler collectives: a fused region's generated backward, run by
        # autograd while DDP all-reduces (its sizes follow the forward's, which the ranks agreed on)
        self.rank_local = False
        self.internal = False  # dynashape's own generated function (that backward): stances are the user's
        self._ran_eagerly = False  # eager_then_compile: the first call has run
        self._not_traceable = _not_traceable(code_fn)  # (reason, location, advice): every call runs eagerly
        self._said_why: set = set()  # the reasons of eager runs already in stats.graph_breaks
        self._current = None  # a compiled module's forward: () -> the compiled function `m(...)` runs now
        functools.update_wrapper(self, fn)
        _ALL.add(self)

    def __copy__(self):
        return self  # as a function copies

    def __deepcopy__(self, memo):
        """As a function copies (itself); one compiled from a bound method (ds.compile(model.forward))
        compiles again for a copy of its object."""
        if self._module is None:
            return self
        return CompiledFunction(self._orig, bound_module=copy.deepcopy(self._module, memo), **self._opts)

    def __reduce__(self):
        if self._module is not None:  # `m.forward = ds.compile(m.forward)`: the function and its object travel
            return _rebuild_bound, (self._orig, self._module, self._opts)
        return self.__qualname__  # pickled by name, as functions are: `@ds.compile def f` at module level

    def __get__(self, obj, objtype=None):
        """`@ds.compile` on a method: `obj.method` is bound like a function; `self` is an argument
        (its state guarded like any argument's), the cache is the method's, shared by all instances."""
        if obj is None:
            return self
        return types.MethodType(self, obj)

    # ------------------------------------------------------------------ calling
    def _bind(self, args, kwargs) -> dict:
        if self._simple and not kwargs and len(args) == len(self._names):
            return dict(zip(self._names, args))
        ba = self._sig.bind(*args, **kwargs)
        given = set(ba.arguments)
        ba.apply_defaults()
        out = dict(ba.arguments)
        if len(out) != len(given) and isinstance(self._sig_fn, types.FunctionType):  # (`f.__defaults__ = ...`
            out.update((k, v) for k, v in _live_defaults(self._sig_fn).items() if k in out and k not in given)
        return out  # since ds.compile read the signature: the defaults eager's call gets)

    def __call__(self, *args, **kwargs):
        if self._code_of.__code__ is not self._code:
            self._recode()
        if self._module is not None:
            args = (self._module, *args)
        stance = _stance._current[0] if not self.internal else "default"
        if _TRACING[0]:
            if _tracing_state.is_tracing():  # inside a trace: inline it
                return self._fn(*args, **kwargs)
            if not _COMPILING.locked_by_me():  # another thread traces: the objects it reads hold its
                with _COMPILING:  # stand-ins until it ends
                    return self(*(args[1:] if self._module is not None else args), **kwargs)
        if stance == "force_eager":
            return self._fn(*args, **kwargs)
        if self._fell_back and not kwargs:  # past the limit: sizes seen to miss every entry run eagerly at once
            key = _eager_key(args)
            if key in self._eager_keys:
                return self._eager(args, kwargs)
        L = self._to_L(args) if len(args) == self._arity and not kwargs else self._bind(args, kwargs)
        shape = ((len(args), tuple(kwargs)) if kwargs else len(args)) if self._shape_matters else 0
        entries = self._cache.entries
        e = entries[0] if entries else None  # the newest first, without a call into the cache
        if e is None or e.call_shape != shape or not e.guard_set.fn(L):
            e = self._cache.lookup(L, shape, tried=e) if e is not None else None
        if _COLLECTIVES_ON[0] and not self.rank_local and _fleet.agree(self, e is None) and e is not None:
            return self._miss(L, args, kwargs, stance, other_rank=True)  # another rank recompiles: so do we
        if e is None and stance == "eager_on_recompile":  # entries that accept the call still run
            return self._fn(*args, **kwargs)
        if e is not None:
            if e.fn is None:
                return self._fn(*args, **kwargs)
            try:
                return e.run(L)
            except SideExit as x:  # this call's data takes a branch the entry has not compiled
                return self._side_exit(e, x, L, args, kwargs, stance)
        if self._fell_back and len(self.entries) >= config.recompile_limit:  # past the limit: eager, cheaply
            if not kwargs and len(self._eager_keys) < _EAGER_KEYS:
                # the next call with these sizes skips binding and the lookup. Sound whatever else the
                # guards check: running eagerly is always right, a call an entry would have taken included
                self._eager_keys.add(_eager_key(args))
            return self._eager(args, kwargs)
        if stance == "eager_then_compile" and not self._ran_eagerly and not self.entries:
            self._ran_eagerly = True
            self.frame_state.update(L)  # the compile on the next call sees what already varied
            return self._fn(*args, **kwargs)
        return self._miss(L, args, kwargs, stance)

    def _eager(self, args, kwargs):
        """The call run eagerly past the recompile limit: what `m(...)` calls now, for a module's forward
        (its class's forward may have been patched since this function was compiled)."""
        if self._current is not None:
            now = self._current()
            if now is not self:
                return now(*args[1:], **kwargs)
        return self._fn(*args, **kwargs)

    def _recode(self) -> None:
        """The function's code was replaced: compile the new code, in the cache of its own code object."""
        stats, current = self.stats, self._current
        self.__init__(self._orig, bound_module=self._module, **self._opts)
        self.stats, self._current = stats, current
        stats.add_reasons([f"the code of {getattr(self._orig, '__qualname__', 'the function')} was replaced "
                           "(its __code__ was set)"])

    def _miss(self, L, args, kwargs, stance="default", other_rank=False):
        if self._current is not None:  # a module's forward: is it still what `m(...)` calls?
            now = self._current()
            if now is not self:
                return now(*args[1:], **kwargs)
        if self._not_traceable is not None:
            return self._run_untraceable(args, kwargs)
        if torch._C._is_torch_function_mode_enabled():
            return self._run_untraceable(args, kwargs, _UNDER_MODE)
        if other_rank:  # this rank's guards passed: it compiles because another rank's failed
            reasons = ["another rank recompiles this call (compiler collectives keep the ranks' graphs alike)"]
            self.stats.add_reasons(reasons)
            if stance == "fail_on_recompile":
                raise RecompileError(f"{self.__name__} ({self._where()}) would recompile under stance "
                                     f"'fail_on_recompile':\n  - {reasons[0]}", reasons)
            if len(self.entries) >= config.recompile_limit:
                return self._limit_hit(args, kwargs, reasons)
            return self._compile_and_run(L, args, kwargs)
        if self.entries and config.reuse_graph_for_size_one and config.cudagraphs == "off" \
                and (self.rank_local or not _COLLECTIVES_ON[0]):
            for e in self.entries[:_EXPLAINED]:  # a size 1 the newest entries' traces never told apart from 2
                if e.call_shape == self._call_shape(args, kwargs) and widen_for(e, L):
                    self.stats.widened += 1
                    if log.isEnabledFor(logging.INFO):
                        log.info("%s (%s): a graph traced for sizes >= 2 takes size 1 too (nothing in its trace "
                                 "depended on the difference)", self.__name__, self._where())
                    return e.run(L)
        if self.entries:
            reasons = []
            shape = self._call_shape(args[1:] if self._module is not None else args, kwargs)
            for e in self.entries[:_EXPLAINED]:  # the newest entries say why; a count for the rest
                if e.call_shape != self._call_shape(args, kwargs):
                    reasons.append(f"called with {_describe_call(shape)}; the entry was traced for a call with "
                                   f"{_describe_call(_strip_self(e.call_shape, self._module))}")
                    continue
                why = e.guard_set.explain(L) or ["guards failed"]
                if e.refused and len(why) == 1 and " >= 2 failed " in why[0]:  # the size-1 miss itself
                    why = [f"{why[0]}; the graph cannot take 1: {e.refused}"]
                reasons += why
            if len(self.entries) > _EXPLAINED:
                reasons.append(f"... and {len(self.entries) - _EXPLAINED} older entries")
            reasons = list(dict.fromkeys(self.frame_state.advise(reasons, L, self)))  # entries failing alike
            if stance == "fail_on_recompile":
                raise RecompileError(f"{self.__name__} ({self._where()}) would recompile under stance "
                                     f"'fail_on_recompile':\n" + "\n".join(f"  - {r}" for r in reasons), reasons)
            self.stats.add_reasons(reasons)
            if _th.on: _th.emit("recompile", self, reasons)  # noqa: E701
            if log.isEnabledFor(logging.INFO):
                log.info("Recompiling function %s in %s\n    triggered by:\n%s", self.__name__, self._where(),
                         "\n".join(f"    - {r}" for r in reasons))
            if len(self.entries) >= config.recompile_limit:
                return self._limit_hit(args, kwargs, reasons)
        elif stance == "fail_on_recompile":  # as torch.compile's stance: its first compile too
            raise RecompileError(f"{self.__name__} ({self._where()}) would compile for the first time under stance "
                                 "'fail_on_recompile'; call it once before setting the stance",
                                 ["first compile"])
        return self._compile_and_run(L, args, kwargs)

    def _call_shape(self, args, kwargs):
        if not self._shape_matters:
            return 0
        return (len(args), tuple(kwargs)) if kwargs else len(args)

    def _limit_hit(self, args, kwargs, reasons):
        msg = (f"dynashape: {self.__name__} ({self._where()}) hit recompile_limit "
               f"({config.recompile_limit}); running it eagerly from now on. Last reason: {reasons[0]}. "
               f"To keep one graph, {_limit_advice(reasons[0])}, or raise config.recompile_limit.")
        if _th.on: _th.emit("limit_hit", self, msg)  # noqa: E701
        if config.fail_on_recompile_limit_hit:
            raise RecompileError(msg, reasons)
        if not self._warned_limit:
            warnings.warn(msg, stacklevel=3)
            self._warned_limit = True
        self._fell_back = True
        return self._fn(*args, **kwargs)

    def _where(self) -> str:
        code = getattr(inspect.unwrap(self._orig), "__code__", None)
        return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else "?"

    # ------------------------------------------------------------------ compiling
    def _side_exit(self, e, x, L, args, kwargs, stance="default"):
        """Nothing before the data guard was visible outside: run the call again from its start,
        tracing the path its data takes (added to the entry's tree), or eagerly past the limit."""
        self.stats.side_exits += 1
        tree = e.tree
        if tree is None or tree.closed or stance == "eager_on_recompile":
            return self._fn(*args, **kwargs)
        reason = f"side exit: {x.reason()}"
        if len(tree.paths) >= config.speculation_paths:
            tree.closed = tree.why_closed(config.speculation_paths)
            self.stats.graph_breaks.append(tree.closed)
            logging.getLogger("dynashape.graph_breaks").info("graph break in %s: %s", self.__name__, tree.closed)
            return self._fn(*args, **kwargs)
        if stance == "fail_on_recompile":
            raise RecompileError(f"{self.__name__} ({self._where()}) would trace a new path under stance "
                                 f"'fail_on_recompile':\n  - {reason}", [reason])
        self.stats.add_reasons([reason])
        if _th.on: _th.emit("recompile", self, [reason])  # noqa: E701
        if log.isEnabledFor(logging.INFO):
            log.info("Tracing a new path of %s in %s\n    triggered by:\n    - %s", self.__name__, self._where(),
                     reason)
        return self._compile_and_run(L, args, kwargs, merge_into=e)

    def _compile_and_run(self, L, args, kwargs, merge_into=None):
        with _COMPILING:  # one trace at a time: a trace puts its stand-ins in the user's objects
            return self._compile_and_run_locked(L, args, kwargs, merge_into)

    def _compile_and_run_locked(self, L, args, kwargs, merge_into=None):
        if _th.on: _th.emit("compile_start", self, L)  # noqa: E701
        _fleet.seed(self, L)  # what varied in earlier runs (the PGO profile) is dynamic from the start
        if not self.rank_local:
            _fleet.sync(self, L)  # with compiler collectives: every rank makes the same sources dynamic
        env = ShapeEnv(specialize_zero_one=config.specialize_zero_one, duck_shape=config.use_duck_shape,
                       backed_size_oblivious=config.backed_size_oblivious)
        graph = Graph()
        graph.namespace.update(G=self._globals, C=self._closure)
        why_dynamic: dict = {}
        policy = static_for(make_policy(self.dynamic, self.frame_state, L, why_dynamic), self._omitted(args, kwargs))
        tracer = Tracer(env, graph, policy, capture_scalar_outputs=config.capture_scalar_outputs,
                        capture_dynamic_output_shape_ops=config.capture_dynamic_output_shape_ops)
        if config.speculate_data_branches and (not self.fullgraph or config.speculate_under_fullgraph):
            tracer.real = RealValues(graph, L)
            env.speculate = tracer.speculate_expr
        state = PyState(tracer, self._globals, self._closure)
        if self.dynamic is None and config.automatic_dynamic_shapes:
            state.frame_state = self.frame_state
        tracer.object_input = lambda v, src: state.root(v, src, ARGUMENT)  # (an iterator: a copy or stand-in)
        outer = Outer(self._globals, self._closure, self._freevars, self._co_names, self._chains, tracer, state)
        modules = outer.prepare(L)
        grad = torch.is_grad_enabled()
        graph.entry_grad, graph.entry_modes = grad, modes_now()  # guarded: the code starts from them
        unspec: set = set()
        try:
            fake = {}
            for name, v in L.items():
                src = LocalSource(name)
                if isinstance(v, torch.nn.Module):  # registered by _prepare; its state walked below
                    if v is not self._module:
                        tracer.value_inputs.append(ValueInput(src, v, "id"))
                    fake[name] = v
                elif type(v) in (list, dict):  # rebuilt with symbolic values; its changes are replayed
                    fake[name] = tracer.wrap_input(v, src)
                    state.copied(fake[name], src)
                elif isinstance(v, (list, dict)) or is_object(v):  # the real object: changes are replayed
                    state.root(v, src)
                    fake[name] = v
                else:
                    fake[name] = tracer.wrap_input(v, src)
                    if isinstance(v, torch.Tensor):
                        state.marks(v, src, _MARKS, [d for d, s in enumerate(getattr(fake[name], "ds_sizes", ()))
                                                     if not isinstance(s, int)])
                    if isinstance(v, tuple):
                        state.copied(fake[name], src)
            call_args, call_kwargs = self._call_args(fake, args, kwargs)
            with contextlib.ExitStack() as stack:
                if modules:  # float attributes follow the float policy; ints only when allowed
                    unspec = stack.enter_context(symbolic_attributes(
                        tracer, modules, self.frame_state, self.dynamic is None and config.automatic_dynamic_shapes,
                        config.allow_unspec_int_on_nn_module))
                state.skip_attrs = unspec
                for src, m in modules:
                    why = _fleet.opaque_reason(m) if m is not self._module else None
                    if why:  # DDP's reducer, FSDP's gathers: work a trace would run once, never again
                        raise GraphBreak(f"{why} ({src.pretty()})", None, _fleet.advice)
                    state.module(m, src)
                state.snapshot()
                order = state.order = RaiseOrder(state, graph, env)  # changes before calls that may raise
                rngs = outer.on_walked = RngStates(state.ns, state.containers, tracer.value_inputs)
                try:
                    state.check_swaps()  # an iterator with nothing to put in its place: before the trace draws
                    with trace_environment() as environ_reads, outer.watching():
                        tracer.run(self._fn, call_args, call_kwargs, finish=state.finish)
                        order.check(tracer)
                        rngs.check()  # one it drew from breaks: its draws would be baked into the graph
                        outer.check()
                    state.environ(environ_reads)
                    state.ran_methods(outer._codes)
                finally:
                    order.stop()
                    state.restore()  # nothing of the trace stays in the user's objects
                    rngs.restore()
                    tracer.real = env.speculate = None  # (an entry keeps its env: not this call's arguments)
                    torch._C._set_grad_enabled(grad)  # the compiled code starts from the entry's mode
        except (GraphBreak, DataDependentError) as e:
            torch._C._set_grad_enabled(grad)
            return self._graph_break(e, tracer, env, modules, grad, args, kwargs, state)
        except DynashapeError as e:  # ours and meant for the user (a range that excludes the example...)
            torch._C._set_grad_enabled(grad)
            if _th.on: _th.emit("compile_failed", self, e)  # noqa: E701
            raise e.with_traceback(user_frames(e.__traceback__)) from None
        except Exception as e:  # the program failed, or we did: eager decides which
            torch._C._set_grad_enabled(grad)
            if _th.on: _th.emit("compile_failed", self, e)  # noqa: E701
            return self._trace_failed(e, tracer, env, modules, grad, args, kwargs, state)
        if _th.on: _th.emit("phase", "trace")  # noqa: E701
        env.raise_constraint_violations()
        guard_set = build_guards(tracer, env, globals_=self._globals, closure=self._closure,
                                 modules=modules, grad_enabled=grad, symbolic_attributes=unspec,
                                 state_guard=state.guard())
        if _th.on: _th.emit("phase", "guards")  # noqa: E701
        tracer.real = None  # the real values of this call's intermediates are not kept
        if tracer.data_guards:
            return self._add_path(merge_into, guard_set, graph, state, env, why_dynamic, tracer, L, args, kwargs)
        fn = self.backend(graph)
        for wrap in ENTRY_WRAPPERS if not self.internal else ():  # CUDA graphs (backends/cudagraphs.py):
            fn = wrap(fn, graph, guard_set, env)  # not for a fused region's backward, run inside autograd's
        fn = state.runner(fn)
        entry = Entry(guard_set, graph, fn, env, why_dynamic, self._call_shape(args, kwargs))
        if _th.on: _th.emit("compile_end", self, entry, tracer)  # noqa: E701
        self._cache.add(entry)
        self.stats.compiles += 1
        self.stats.fallbacks.extend(tracer.fallbacks)
        _fleet.record(self, L)
        if glog.isEnabledFor(logging.INFO):
            glog.info("graph of %s (%s):\n%s", self.__name__, self._where(), graph)
        if guard_log.isEnabledFor(logging.INFO):
            guard_log.info("guards of %s:\n%s", self.__name__, "\n".join(f"  {g}" for g in entry.guards))
        return fn(L)

    def _add_path(self, merge_into, guard_set, graph, state, env, why_dynamic, tracer, L, args, kwargs):
        """A trace that decided branches on data: a path of a trace tree (the exiting entry's, when
        it was traced under the same guards and shares its statements up to the branch)."""
        finish = state.finisher()
        entry = None
        if merge_into is not None and merge_into.tree is not None and merge_into.guards == guard_set.guards \
                and merge_into.tree.add(graph, finish):
            entry = merge_into
            entry.set_fn(entry.tree.fn)
            entry.graph = entry.tree.graph
        if entry is None:
            tree = Tree(self.backend)
            if not tree.add(graph, finish):  # one path always merges with itself
                raise AssertionError("a single path did not form a tree")
            entry = Entry(guard_set, tree.graph, tree.fn, env, why_dynamic, self._call_shape(args, kwargs), tree)
            self._cache.add(entry)
        if _th.on: _th.emit("compile_end", self, entry, tracer)  # noqa: E701
        self.stats.compiles += 1
        self.stats.paths += 1
        self.stats.fallbacks.extend(tracer.fallbacks)
        _fleet.record(self, L)
        if glog.isEnabledFor(logging.INFO):
            glog.info("graph of %s (%s), %d paths:\n%s", self.__name__, self._where(), len(entry.tree.paths),
                      entry.graph)
        try:
            return entry.fn(L)
        except SideExit as x:  # the path just traced must be the one this call takes
            entry.tree.closed = f"a traced path did not reproduce its own branch ({x.reason()})"
            self.stats.graph_breaks.append(entry.tree.closed)
            return self._fn(*args, **kwargs)

    def _omitted(self, args, kwargs) -> frozenset:
        """The parameters the caller left to their defaults."""
        n, out = len(args), []
        for i, p in enumerate(self._sig.parameters.values()):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name not in kwargs and (i >= n or p.kind is p.KEYWORD_ONLY):
                out.append(p.name)
        return frozenset(out)

    def _call_args(self, fake, args, kwargs):
        """The traced values passed the way the user passed them: positionals stay positional,
        keywords stay keywords, and defaults the user left out stay out (a decorator that adds
        a keyword argument sees what eager sees). A mutable default (`acc=[]`, a dict) is passed:
        the trace changes the copy of it, whose changes are replayed on the function's own."""
        n = len(args)
        pos: list = []
        kw: dict = {}
        skipped: list = []  # positional defaults left out, before a positional-only one that is passed
        for p in self._sig.parameters.values():
            if p.name not in fake:
                continue
            v = fake[p.name]
            if p.kind is p.VAR_POSITIONAL:
                pos.extend(v)
            elif p.kind is p.VAR_KEYWORD:
                kw.update(v)
            elif p.name in kwargs:
                kw[p.name] = v
            elif p.kind is not p.KEYWORD_ONLY and len(pos) < n:
                pos.append(v)
            elif type(p.default) in (list, dict) and p.kind is not p.POSITIONAL_ONLY:
                kw[p.name] = v  # left out: the function's default object
            elif type(p.default) in (list, dict):
                pos += skipped + [v]
                skipped = []
            elif p.kind is p.POSITIONAL_ONLY:
                skipped.append(v)
        return pos, kw

    def _trace_failed(self, e, tracer, env, modules, grad, args, kwargs, state):
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
        return self._graph_break(why, tracer, env, modules, grad, args, kwargs, state, ran=(out,))

    def _graph_break(self, e, tracer, env, modules, grad, args, kwargs, state=None, ran=None):
        """`ran`: (result,) when the call already ran eagerly."""
        if _th.on: _th.emit("graph_break", self, e)  # noqa: E701
        if isinstance(e, DataDependentError):
            if self.fullgraph:
                raise DataDependentError(str(e), e.expr, e.location) from None
            e = GraphBreak(str(e).split("\n")[0], getattr(e, "location", None), str(e))
        if getattr(e, "once", False):  # (also under fullgraph: what breaks is this call, not the graph)
            self.stats.graph_breaks.append(f"{e.reason}; this call runs eagerly")
            return ran[0] if ran is not None else self._fn(*args, **kwargs)
        if self.fullgraph:
            advice = e.advice or ""
            if "control flow" in e.reason and config.speculate_data_branches and not config.speculate_under_fullgraph:
                advice += ("\nUnder fullgraph=True a branch on data raises, as in torch.compile. To compile it as "
                           "data-guarded paths of one graph instead, set ds.config.speculate_under_fullgraph = True "
                           "(or drop fullgraph=True).")
            err = GraphBreakError(e.reason, e.location, advice)
            raise err from None
        reason = f"{e.reason}" + (f" at {e.location}" if e.location else "")
        self.stats.graph_breaks.append(reason)
        logging.getLogger("dynashape.graph_breaks").info("graph break in %s: %s", self.__name__, reason)
        try:
            guard_set = build_guards(tracer, env, globals_=self._globals, closure=self._closure,
                                     modules=modules, grad_enabled=grad,
                                     state_guard=state.guard() if state is not None else None)
        except Exception:  # a trace that failed half-way may not describe its inputs: keep no entry
            if ran is None:
                raise
            return ran[0]
        self._cache.add(Entry(guard_set, None, None, env, {}, self._call_shape(args, kwargs)))
        if _th.on: _th.emit("compile_end", self, self.entries[0], tracer)  # noqa: E701
        return ran[0] if ran is not None else self._fn(*args, **kwargs)

    def _run_untraceable(self, args, kwargs, why=None):
        """A generator or coroutine function (its body runs after the call returns, untraced), or a call
        `why` says cannot be traced: it runs eagerly."""
        reason, location, advice = why or self._not_traceable
        if self.fullgraph:
            raise GraphBreakError(reason, location, advice)
        if reason not in self._said_why:
            self._said_why.add(reason)
            self.stats.graph_breaks.append(f"{reason} at {location}" if location else reason)
            logging.getLogger("dynashape.graph_breaks").info("graph break in %s: %s", self.__name__, reason)
        return self._fn(*args, **kwargs)

    @property
    def entries(self) -> list:
        """The cache entries, newest first (shared by every compile of the same code)."""
        return self._cache.entries

    def reset(self):
        self._cache.clear()
        self.stats = Stats()
        self.frame_state.__init__()
        self._warned_limit = self._fell_back = False
        self._said_why = set()
        self._eager_keys = set()



def _live_defaults(fn) -> dict:
    """{parameter: its default} as the function holds them now (its __defaults__ and __kwdefaults__
    may be replaced after ds.compile read its signature)."""
    code = fn.__code__
    positional = code.co_varnames[:code.co_argcount]
    d = fn.__defaults__ or ()
    out = dict(zip(positional[len(positional) - len(d):], d))
    out.update(fn.__kwdefaults__ or {})
    return out


def _not_traceable(fn):
    """(reason, location, advice) for a function whose call returns before its body runs: a
    generator function (as torch.compile, whose frame hook never sees the body run inside the
    call, it runs eagerly), an async generator or coroutine function; None for any other."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        what = "a generator function: its body runs as the caller draws from the generator it returns"
    elif inspect.iscoroutinefunction(fn):
        what = "a coroutine function: its body runs when the coroutine it returns is awaited"
    else:
        return None
    code = getattr(inspect.unwrap(fn), "__code__", None)
    location = None
    if code is not None:
        line = code.co_firstlineno
        location = Location(code.co_filename, line, code.co_name, linecache.getline(code.co_filename, line).strip())
    return (f"{what}, after the compiled call has returned, so there is nothing to trace: every call runs "
            "eagerly", location,
            "What to do: compile the work of one step as its own function and call it from the generator "
            "(`step = ds.compile(step_fn)`, then `yield step(x)`), or return a list of the values instead.")


def _describe_call(shape) -> str:
    if shape == 0:
        return "any arguments"
    n, kw = (shape, ()) if isinstance(shape, int) else shape
    return f"{n} positional argument{'s' if n != 1 else ''}" + (f" and keywords {', '.join(kw)}" if kw else "")


def _strip_self(shape, bound):
    if bound is None or shape == 0:
        return shape
    return shape - 1 if isinstance(shape, int) else (shape[0] - 1, shape[1])


def _rebuild_bound(fn, obj, opts):
    """A compiled bound method, unpickled: compiled again for the unpickled object."""
    return CompiledFunction(fn, bound_module=obj, **opts)


def _limit_advice(reason: str) -> str:
    """What keeps one graph, for the guard that failed last."""
    if re.match(r"L\['self'\](\.\w+)+ == -?\d+ failed", reason):  # an int attribute of a module: specialized
        return ("make that module int attribute dynamic (ds.config.allow_unspec_int_on_nn_module = True, as "
                "torch.compile's allow_unspec_int_on_nn_module), or keep the counter outside the module")
    return "make the varying dims dynamic (ds.mark_dynamic or DYNASHAPE_DYNAMIC_SOURCES)"


def reset() -> None:
    """Forget all compiled code (PGO profiles are kept)."""
    for cf in _ALL:
        cf.reset()
