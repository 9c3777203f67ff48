"""Errors raised by the engine; every message names the user's line and says what to do."""
from __future__ import annotations

import contextlib
import threading

_local = threading.local()


class DynashapeError(Exception):
    """Base class of dynashape's own errors.

    While a trace runs, each one made is noted (`recording`): the user's code can catch what the
    trace raises into it (`except Exception:` around a line that breaks the graph), which eager
    never raises, and go on down a path eager would not take (`swallowed`)."""

    def __init__(self, *args):
        super().__init__(*args)
        noted = getattr(_local, "noted", None)
        if noted is not None:
            noted.append(self)


@contextlib.contextmanager
def recording():
    """The dynashape errors made on this thread inside the block, in a list."""
    prev = getattr(_local, "noted", None)
    _local.noted = noted = []
    try:
        yield noted
    finally:
        _local.noted = prev


def swallowed(noted: list, ours):
    """The first of the errors `noted` last caught by code that is not dynashape's (`ours(filename)`
    says which is), with that frame; (None, None) when dynashape caught them all."""
    for e in noted:
        tb = e.__traceback__
        if tb is not None and not ours(tb.tb_frame.f_code.co_filename):
            return e, tb.tb_frame
    return None, None


class DataDependentError(DynashapeError):
    """A decision depends on a value known only at run time (an unbacked symbol)."""

    def __init__(self, message: str, expr=None, location=None):
        super().__init__(message)
        self.expr = expr
        self.location = location


class ConstraintViolationError(DynashapeError):
    """A dim the user declared dynamic (or ranged) was specialized or narrowed by the trace."""

    def __init__(self, message: str, violations=()):
        super().__init__(message)
        self.violations = list(violations)


class InvalidHintError(DynashapeError, ValueError):
    """An example value lies outside the range the user gave for it."""
