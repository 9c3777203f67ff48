"""Whether a trace is running on this thread (annotations refuse to run inside one).

Per thread: another thread's calls of a compiled function, or of print, are never
part of this thread's trace.
"""
from __future__ import annotations

import threading

_local = threading.local()


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
        _stack().append(self.tracer)

    def __exit__(self, *exc):
        _stack().pop()
        return False
