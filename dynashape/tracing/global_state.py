"""Calls that change torch's global state while tracing.

They are not torch functions the TracingMode sees, so without this they would
run once, at trace time, and never again. Reads of torch's random state (`torch.initial_seed()`,
`torch.get_rng_state()`, `torch.seed()`, their `torch.cuda` kin) by the user's code are graph breaks
(the value would be baked into the graph). `torch.manual_seed`, `print`, and the user's log records
and warnings (py_output.py) are recorded in the graph (the compiled code reseeds and prints, with the real
values, exactly where eager does); the others
would change how later calls behave in ways a graph cannot replay, so they are
graph breaks. Reads of global settings (`torch.are_deterministic_algorithms_enabled()`,
matmul precision, ...) are recorded so the guards check the same value at each call.

The patches are process-wide, so they are installed once while any thread traces
(a count under a lock) and removed when the last trace ends; each patched function
sends a call to the handlers of the trace running on the calling thread, and
any other thread's call to the original.
"""
from __future__ import annotations

import builtins
import contextlib
import logging
import math
import threading
import warnings

import torch

from ..symbolic.errors import DataDependentError
from ..symbolic.functions import MATH_CALLS
from ..symbolic.symtypes import SymBase, SymBool, SymInt, sym_max, sym_min, wrap_node
from ..symbolic.userloc import is_library_file, user_location
from . import py_output, torch_flags
from .errors import GraphBreak
from .pyenv import user_call_in_trace
from .state import current_tracer

# global settings a program may read and branch on: each one read is guarded by value
FLAG_GETTERS = ("are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
                "get_deterministic_debug_mode", "is_anomaly_enabled", "is_anomaly_check_nan_enabled",
                "get_float32_matmul_precision", "get_default_device", "is_inference_mode_enabled",
                "get_num_threads", "is_warn_always_enabled")
_BREAKS = ("set_default_dtype", "set_default_device", "set_rng_state", "use_deterministic_algorithms",
           "set_num_threads")
# torch's random state read or reseeded: breaks in the user's code, plain calls in torch's (fork_rng)
_RNG_CALLS = ("initial_seed", "get_rng_state", "seed")
_CUDA_RNG_CALLS = ("initial_seed", "get_rng_state", "get_rng_state_all", "seed", "seed_all", "manual_seed",
                   "manual_seed_all", "set_rng_state", "set_rng_state_all")


# (owner, attribute) -> handler key; the handlers of one trace are a dict over these keys
_POINTS = [(torch, "manual_seed", "manual_seed"), (torch.random, "manual_seed", "manual_seed"),
           (builtins, "print", "print"), (builtins, "max", "max"), (builtins, "min", "min")]
_POINTS += [(torch, n, n) for n in FLAG_GETTERS + _BREAKS if hasattr(torch, n)]
_POINTS += [(owner, n, f"rng.{n}") for owner in (torch, torch.random) for n in _RNG_CALLS if hasattr(owner, n)]
_POINTS += [(torch.cuda, n, f"rng.cuda.{n}") for n in _CUDA_RNG_CALLS if hasattr(torch.cuda, n)]
_POINTS += [(math, n, f"math.{n}") for n in MATH_CALLS]
_POINTS += [(logging.Logger, n, f"log.{n}") for n in py_output.LOG_LEVELS]
_POINTS += [(logging.Logger, "isEnabledFor", "log.isEnabledFor"), (warnings, "warn", "warnings.warn")]
_POINTS += [(logging.Logger, n, f"log.{n}") for n in py_output.LOGGER_CHANGES]
_POINTS += [(torch._C._autograd, "_push_saved_tensors_default_hooks", "saved_hooks"),
            (torch.autograd.forward_ad, "enter_dual_level", "dual_level")]
_ORIGINAL = {key: getattr(owner, name) for owner, name, key in _POINTS}
_lock = threading.Lock()
_users = 0  # traces running, on any thread
_local = threading.local()  # .handlers: stack of the handler dicts of this thread's traces


def _router(key):
    def route(*args, **kwargs):
        stack = getattr(_local, "handlers", None)
        if stack:
            return stack[-1][key](*args, **kwargs)
        return _ORIGINAL[key](*args, **kwargs)
    route.__name__ = getattr(_ORIGINAL[key], "__name__", key)
    route.__doc__ = getattr(_ORIGINAL[key], "__doc__", None)
    return route


_ROUTERS = {key: _router(key) for _, _, key in _POINTS}


def _tracer():
    """The tracer of this thread's innermost trace (its handlers are the ones being called)."""
    return _local.handlers[-1][_TRACER]


def _manual_seed(seed):
    """Recorded, not run: a call that breaks later runs eagerly from the generator's state before it."""
    tracer = _tracer()
    tracer.graph.call(torch.manual_seed, (tracer.to_ir(seed),), {}, None, user_location(),
                      torch.is_grad_enabled(), name_hint="manual_seed")
    return torch.default_generator  # (what torch.manual_seed returns)


def _rng_call(key):
    def fn(*args, **kwargs):
        if user_call_in_trace(2):  # (called by its router)
            name = key.split(".", 1)[1]
            raise GraphBreak(f"torch.{name}() inside the compiled function reads or reseeds the random generator "
                             "(its value would be baked into the graph)", user_location(),
                             "What to do: call it outside the compiled function and pass the value in.")
        return _ORIGINAL[key](*args, **kwargs)
    return fn


def _refuse(name):
    def fn(*args, **kwargs):
        raise GraphBreak(f"torch.{name}() inside the compiled function changes global state",
                         user_location(), "What to do: call it before the compiled function.")
    return fn


def _saved_hooks(pack, unpack):
    """`torch.autograd.graph.saved_tensors_hooks(pack, unpack)` entered while tracing: the hooks would
    run on the trace's stand-ins only (the compiled code saves tensors its own way). torch's own
    (checkpoint's) go on: they only recompute what the compiled code keeps."""
    if not is_library_file(getattr(getattr(pack, "__code__", None), "co_filename", "") or ""):
        raise GraphBreak("saved_tensors_hooks(...) of your own inside the compiled function (they would run on "
                         "the trace's stand-ins, never on the tensors the compiled code saves)", user_location(),
                         "What to do: enter it around the call of the compiled function.")
    return _ORIGINAL["saved_hooks"](pack, unpack)


def _dual_level(*args, **kwargs):
    raise GraphBreak("forward-mode AD (fwAD.dual_level()) inside the compiled function", user_location(),
                     "What to do: enter the dual level around the call of the compiled function.")


def _print(*args, **kwargs):  # replayed with the real values when the compiled code runs
    if kwargs.get("file") is not None:
        raise GraphBreak("print(..., file=...) inside the compiled function", user_location())
    tracer = _tracer()
    py_output.same_streams(tracer, "print(...)")
    tracer.graph.call(_ORIGINAL["print"], tracer.to_ir(args), tracer.to_ir(kwargs), None, user_location(),
                      torch.is_grad_enabled(), name_hint="print")


def _flag_reader(name):
    def fn(*args, **kwargs):  # the value is guarded: a call under another setting recompiles
        getter = _ORIGINAL[name]  # (looked up when called: the user may have wrapped it since)
        value = getter(*args, **kwargs)
        if not args and not kwargs:
            _tracer().flag_reads.setdefault(f"torch.{name}()", (getter, value))
        return value
    return fn


PARAMETRIZE_CACHE = "torch.nn.utils.parametrize._cache_enabled"


def _parametrize_cache_enabled() -> int:
    from torch.nn.utils import parametrize
    return parametrize._cache_enabled


def parametrized(tracer, module) -> None:
    """A module with parametrizations (`register_parametrization`, weight_norm, orthogonal): inside
    `parametrize.cached()` eager computes each parametrized weight once and keeps it in a global of torch's,
    which the trace's getter would fill with its stand-in, and the compiled code would compute it again on
    every call. Whether a block is open is guarded; a call inside one runs eagerly."""
    from torch.nn.utils import parametrize
    if PARAMETRIZE_CACHE in tracer.flag_reads or not any(parametrize.is_parametrized(m) for m in module.modules()):
        return
    if parametrize._cache_enabled:  # (raised when the trace starts: intercept_global_state)
        tracer.pending_break = GraphBreak("a parametrized module inside torch.nn.utils.parametrize.cached() (its "
                                          "weights are computed once for the block, in torch's cache)", None,
                                          "The call runs eagerly.")
    tracer.flag_reads[PARAMETRIZE_CACHE] = (_parametrize_cache_enabled, 0)


_TRACER = object()  # the key of a handler dict that holds its trace's tracer


def _handlers(tracer) -> dict:
    if not _SHARED:  # made once: each reads the tracer of the trace it is called in (_tracer())
        _SHARED.update({"max": _min_max("max", sym_max), "min": _min_max("min", sym_min)})
        _SHARED.update({f"math.{n}": _math_call(n) for n in MATH_CALLS})
        _SHARED.update(manual_seed=_manual_seed, print=_print)
        _SHARED.update({f"log.{n}": py_output.log_method(_ORIGINAL, f"log.{n}", level)
                        for n, level in py_output.LOG_LEVELS.items()})
        _SHARED["log.isEnabledFor"] = py_output.is_enabled_for(_ORIGINAL, "log.isEnabledFor")
        _SHARED["warnings.warn"] = py_output.warn(_ORIGINAL, "warnings.warn")
        _SHARED.update({f"log.{n}": py_output.changes_logger(_ORIGINAL, f"log.{n}") for n in py_output.LOGGER_CHANGES})
        _SHARED.update({n: _flag_reader(n) for n in FLAG_GETTERS if n in _ORIGINAL})
        _SHARED.update({n: _refuse(n) for n in _BREAKS if n in _ORIGINAL})
        _SHARED.update(saved_hooks=_saved_hooks, dual_level=_dual_level)
        _SHARED.update({key: _rng_call(key) for key in _ORIGINAL if key.startswith("rng.")})
    out = dict(_SHARED)
    out[_TRACER] = tracer
    return out


_SHARED: dict = {}


def _math_call(name):
    """`math.sqrt(d)` of a symbolic int or float: a symbolic float, as torch.compile gives, instead
    of a specialization (a plain number goes to `math`)."""
    def fn(*args):
        if len(args) == 1 and isinstance(args[0], SymBase) and not isinstance(args[0], SymBool):
            return wrap_node(args[0].node.unary(name))
        return _ORIGINAL[f"math.{name}"](*args)
    return fn


def _min_max(name, sym_fn):
    """Builtin max/min of ints where one depends on data (`max(x.item(), 1024)`): a symbolic
    Max/Min, as torch.export gives, instead of deciding the comparison."""
    def fn(*args, **kwargs):
        tr = current_tracer()
        env = tr.env if tr is not None else None
        if env is not None:
            env.framework_depth += 1  # a Max/Min, not a branch decided on this call's data
        try:
            return _ORIGINAL[name](*args, **kwargs)
        except DataDependentError:
            items = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
            if kwargs or len(items) < 2 or not all(isinstance(v, (int, SymInt)) and not isinstance(v, bool)
                                                   for v in items):
                raise
            out = items[0]
            for v in items[1:]:
                out = sym_fn(out, v)
            return out
        finally:
            if env is not None:
                env.framework_depth -= 1
    return fn


_FUNCTION_APPLY = torch.autograd.Function.__dict__["apply"]  # a classmethod: kept as one when patched


def _function_apply(cls, *args, **kwargs):
    """`MyFunction.apply(x)` while this thread traces: its forward runs with grad off and its own
    backward would be lost if its ops were recorded as plain calls, so the call runs eagerly."""
    if getattr(_local, "handlers", None) and not getattr(_local, "apply_as_is", False):
        raise GraphBreak(f"torch.autograd.Function {cls.__name__}.apply (its custom backward is not traced)",
                         user_location(), "The call runs eagerly, with the Function's own backward.")
    return _FUNCTION_APPLY.__func__(cls, *args, **kwargs)


class _ApplyAsIs:
    """`with function_apply_as_is():` Function.apply runs as it is: a meta call made for eager's
    autograd history (a custom op's own autograd kernel is a Function), not the user's code."""

    def __call__(self):
        return _as_is()

    @staticmethod
    def active() -> bool:
        return getattr(_local, "apply_as_is", False)


@contextlib.contextmanager
def _as_is():
    saved, _local.apply_as_is = getattr(_local, "apply_as_is", False), True
    try:
        yield
    finally:
        _local.apply_as_is = saved


function_apply_as_is = _ApplyAsIs()


@contextlib.contextmanager
def intercept_global_state(tracer):
    global _users
    stack = getattr(_local, "handlers", None)
    if stack is None:
        stack = _local.handlers = []
    stack.append(_handlers(tracer))
    flags = torch_flags.now()
    tracer.warnings_at_start = flags[torch_flags.WARNINGS]  # a print or warning under others breaks (py_output)
    with _lock:
        if _users == 0:
            for owner, name, key in _POINTS:
                current = getattr(owner, name)
                if current is not _ROUTERS[key]:  # what is there now (the user may have wrapped it)
                    _ORIGINAL[key] = current
                # torch imports torch._dynamo lazily, maybe while we trace: its table of torch functions,
                # built then, must hold the original (F.pad then graph-broke on are_deterministic_...)
                _ROUTERS[key]._torchdynamo_inline = _ORIGINAL[key]
                setattr(owner, name, _ROUTERS[key])
            torch.autograd.Function.apply = classmethod(_function_apply)
        _users += 1
    try:
        if getattr(tracer, "pending_break", None) is not None:
            raise tracer.pending_break
        yield
        changed = torch_flags.changed(flags)
        if changed:
            raise GraphBreak(f"the function changes the global setting {changed[0]} (the compiled code would "
                             "not change it again on later calls)", None,
                             "What to do: change it before calling the compiled function.")
    finally:
        torch_flags.put_back(flags)  # (the eager run of a broken call changes it as eager does)
        stack.pop()
        with _lock:
            _users -= 1
            if _users == 0:
                for owner, name, key in _POINTS:
                    setattr(owner, name, _ORIGINAL[key])
                torch.autograd.Function.apply = _FUNCTION_APPLY
