"""Calls that change torch's global state while tracing.

They are not torch functions the TracingMode sees, so without this they would
run once, at trace time, and never again. `torch.manual_seed` and `print` are
recorded in the graph (the compiled code reseeds and prints, with the real
values, exactly where eager does); the others
would change how later calls behave in ways a graph cannot replay, so they are
graph breaks. Reads of global settings (`torch.are_deterministic_algorithms_enabled()`,
matmul precision, ...) are recorded so the guards check the same value at each call.
"""
from __future__ import annotations

import builtins
import contextlib

import torch

from ..symbolic.userloc import user_location
from .errors import GraphBreak

# global settings a program may read and branch on: each one read is guarded by value
FLAG_GETTERS = ("are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled",
                "get_deterministic_debug_mode", "is_anomaly_enabled", "is_anomaly_check_nan_enabled",
                "get_float32_matmul_precision", "get_default_device", "is_inference_mode_enabled",
                "get_num_threads", "is_warn_always_enabled")
_BREAKS = ("set_default_dtype", "set_default_device", "set_rng_state", "use_deterministic_algorithms",
           "set_num_threads")


@contextlib.contextmanager
def intercept_global_state(tracer):
    saved = {}

    def manual_seed(seed):
        out = saved[(torch, "manual_seed")](seed)  # the trace's own RNG use follows eager's
        tracer.graph.call(torch.manual_seed, (tracer.to_ir(seed),), {}, None, user_location(),
                          torch.is_grad_enabled(), name_hint="manual_seed")
        return out

    def refuse(name):
        def fn(*args, **kwargs):
            raise GraphBreak(f"torch.{name}() inside the compiled function changes global state",
                             user_location(), "What to do: call it before the compiled function.")
        return fn

    def print_(*args, **kwargs):  # replayed with the real values when the compiled code runs
        if kwargs.get("file") is not None:
            raise GraphBreak("print(..., file=...) inside the compiled function", user_location())
        tracer.graph.call(saved[(builtins, "print")], tracer.to_ir(args), tracer.to_ir(kwargs), None, user_location(),
                          torch.is_grad_enabled(), name_hint="print")

    def flag_reader(name, getter):
        def fn(*args, **kwargs):  # the value is guarded: a call under another setting recompiles
            value = getter(*args, **kwargs)
            if not args and not kwargs:
                tracer.flag_reads.setdefault(name, (getter, value))
            return value
        return fn

    patches = [(torch, "manual_seed", manual_seed), (torch.random, "manual_seed", manual_seed),
               (builtins, "print", print_)]
    patches += [(torch, n, flag_reader(f"torch.{n}()", getattr(torch, n))) for n in FLAG_GETTERS if hasattr(torch, n)]
    patches += [(torch, n, refuse(n)) for n in _BREAKS if hasattr(torch, n)]
    for owner, name, fn in patches:
        saved[(owner, name)] = getattr(owner, name)
        setattr(owner, name, fn)
    try:
        yield
    finally:
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)
