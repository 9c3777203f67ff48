"""The hook point of the structured compile trace (`DYNASHAPE_TRACE=dir`).

Lower layers cannot import `dynashape.logs` (imports go downward only), so they
call into this module, and `dynashape.logs.trace` installs the writer here.
Each call site reads one flag first, so tracing off costs one attribute read:

    if tracehook.on: tracehook.emit("guard_added", env, cond, location)

Events (the writer's `on_<kind>` methods): compile_start, phase, compile_end,
compile_failed, graph_break, recompile, limit_hit (runtime/compile.py);
create_symbol, create_unbacked_symbol, guard_added, specialization (ShapeEnv);
pgo_read, pgo_write (fleet/pgo.py). A backend may emit
`("phase", "kernel_compile", seconds)` and `("kernel_cache", hit, key)`.
"""
from __future__ import annotations

on = False  # True while a trace directory is set and a writer is installed
directory = ""  # where the trace files go ("" = off)
_sink = None  # sink(kind, *args): the writer, installed by dynashape.logs.trace


def emit(kind: str, *args) -> None:
    """Hand one event to the writer; never raises into the compiler."""
    sink = _sink
    if sink is not None:
        try:
            sink(kind, *args)
        except Exception as e:  # a broken trace must not break a compile
            _disable(e)


def set_directory(path: str) -> None:
    global directory, on
    directory = path or ""
    on = bool(directory) and _sink is not None


def install(sink) -> None:
    global _sink, on
    _sink = sink
    on = bool(directory) and sink is not None


def _disable(err: Exception) -> None:
    global on
    on = False
    import warnings
    warnings.warn(f"dynashape: the compile trace is off from now on: writing it failed ({err!r})", stacklevel=3)
