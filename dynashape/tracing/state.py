"""Whether a trace is running on this thread (annotations refuse to run inside one).

Per thread: another thread's calls of a compiled function, or of print, are never
part of this thread's trace.
"""
from __future__ import annotations

import threading

_local = threading.local()
running = [0]  # traces running in any thread: a compiled call asks is_tracing() only when this is not 0
_count_lock = threading.Lock()


def _stack() -> list:
    try:
        return _local.tracers
    except AttributeError:
        _local.tracers = []
        return _local.tracers


def is_tracing() -> bool:
    return bool(_stack())


def current_tracer():
    """The innermost tracer running on this thread, or None."""
    stack = _stack()
    return stack[-1] if stack else None


class tracing_scope:
    def __init__(self, tracer=None):
        self.tracer = tracer

    def __enter__(self):
        with _count_lock:
            running[0] += 1
        _stack().append(self.tracer)

    def __exit__(self, *exc):
        _stack().pop()
        with _count_lock:
            running[0] -= 1
        return False
