"""Log records and warnings the user's code makes while traced: replayed when the compiled code runs.

Run at trace time, `log.info("batch %s", x.shape[0])` printed `batch Sym(s0)` once per compile (a
symbolic value reaching the user) and nothing on the calls after; `warnings.warn(...)` likewise
warned once per compile. Called from the user's code (not torch's, a library's or ours), they are
recorded in the graph instead, like `print` (global_state.py), and replayed with the call's real
values where eager makes them: a record is made only if the logger is enabled for its level when
the call runs, and carries the user's file, line and function; a warning goes through the same
filters and once-per-location registry as eager's, attributed to the same line.

`log.isEnabledFor(level)` read by the user's code is guarded by its answer (the logger itself by
identity, runtime/pystate.py), so a level changed between calls recompiles the branch on it.

    >>> log = logging.getLogger("model")
    >>> def f(x):
    ...     log.info("rows %d", x.shape[0])    # the graph: log(<Logger model>, 20, 'rows %d', (s0,), ...)
    ...     return x * 2
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import warnings

import torch

from ..symbolic.userloc import is_library_file
from . import torch_flags
from .errors import GraphBreak
from .state import current_tracer

_LOGGING_FILE = logging.__file__.removesuffix("c")  # (a .pyc's frames name the .py)
_KNOWN = {"exc_info", "stack_info", "stacklevel", "extra"}


class LogRecordAt:
    """A log record of the user's line, made when the compiled code runs: what `Logger._log` does
    after finding its caller, with the caller found at trace time. Printed in the graph as
    `log('model', INFO, model.py:12)`."""

    def __init__(self, logger, level: int, frame):
        self.logger, self.level = logger, level
        self.where = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        self.__qualname__ = f"log({logger.name!r}, {logging.getLevelName(level)}, {_short(frame)})"
        self.__module__ = "py_output"

    def __call__(self, msg, args: tuple, extra) -> None:
        logger = self.logger
        if logger.isEnabledFor(self.level):
            filename, lineno, func = self.where
            logger.handle(logger.makeRecord(logger.name, self.level, filename, lineno, msg, args, None, func, extra,
                                            None))


class WarningAt:
    """A warning of the user's line, made when the compiled code runs: what `warnings.warn` does after
    finding its caller's frame (the same filters and once-per-location registry), with that frame's
    line from trace time. Printed in the graph as `warn(UserWarning, model.py:12)`."""

    def __init__(self, category, frame):
        self.category, self.globals = category, frame.f_globals
        self.where = (frame.f_code.co_filename, frame.f_lineno)
        self.__qualname__ = f"warn({category.__name__}, {_short(frame)})"
        self.__module__ = "py_output"

    def __call__(self, message) -> None:
        g = self.globals
        warnings.warn_explicit(message, self.category, *self.where, g.get("__name__", "<unknown>"),
                               g.setdefault("__warningregistry__", {}), g)


def _short(frame) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _caller(skip_logging: bool, stacklevel: int):
    """The frame a record or warning names (the router's and this module's frames skipped), or None
    when the call was not made by the user's code."""
    f = sys._getframe(3)  # (this function, the handler, the router)
    while skip_logging and f is not None and f.f_code.co_filename == _LOGGING_FILE:
        f = f.f_back  # logging.info() -> root.info(): the caller of logging's own functions
    if f is None or is_library_file(f.f_code.co_filename):
        return None
    for _ in range(max(stacklevel, 1) - 1):
        f = f.f_back
        while skip_logging and f is not None and f.f_code.co_filename == _LOGGING_FILE:
            f = f.f_back
        if f is None or is_library_file(f.f_code.co_filename):  # outside the compiled function
            raise GraphBreak(f"a {'log record' if skip_logging else 'warning'} with stacklevel={stacklevel} names a "
                             "frame outside the compiled function", None,
                             "The call runs eagerly, where that frame exists.")
    return f


def log_method(originals: dict, key: str, level: int | None):
    """A handler for `Logger.<method>` (level None: `Logger.log(level, msg, ...)`); `originals[key]`
    is the method it stands in for."""
    def handler(logger, *args, **kwargs):
        original = originals[key]
        lvl, rest = (args[0], args[1:]) if level is None else (level, args)
        if not rest or not isinstance(lvl, int) or set(kwargs) - _KNOWN:  # eager's own errors, from eager's code
            return original(logger, *args, **kwargs)
        frame = _caller(True, kwargs.get("stacklevel", 1))
        if frame is None:  # torch's, a library's or ours: as it is, at trace time
            return original(logger, *args, **dict(kwargs, stacklevel=kwargs.get("stacklevel", 1) + 2))
        if kwargs.get("exc_info") or kwargs.get("stack_info"):
            raise GraphBreak("a log record with exc_info or stack_info inside the compiled function (the exception "
                             "and stack are those of the call)", None, "The call runs eagerly.")
        tracer = current_tracer()
        tracer.graph.call(LogRecordAt(logger, lvl, frame), tracer.to_ir((rest[0], tuple(rest[1:]), kwargs.get("extra"))),
                          {}, None, None, torch.is_grad_enabled(), name_hint="log")
    return handler


LOGGER_CHANGES = ("setLevel", "addHandler", "removeHandler", "addFilter", "removeFilter")


def changes_logger(originals: dict, key: str):
    """`Logger.setLevel(...)` and the like called by the user's code: a logger is not state the compiled code
    replays (it is compared by identity), so the call runs eagerly, changing it on every call as eager does."""
    def handler(logger, *args, **kwargs):
        if _caller(False, 1) is not None:
            raise GraphBreak(f"Logger.{key.removeprefix('log.')}(...) inside the compiled function (the compiled "
                             "code would not change the logger again on later calls)", None,
                             "What to do: configure the logger before calling the compiled function.")
        return originals[key](logger, *args, **kwargs)
    return handler


def is_enabled_for(originals: dict, key: str):
    """`Logger.isEnabledFor` read by the user's code: its answer is guarded."""
    def handler(logger, level):
        original = originals[key]
        value = original(logger, level)
        if _caller(False, 1) is not None and isinstance(level, int):
            current_tracer().flag_reads.setdefault(f"logging.getLogger({logger.name!r}).isEnabledFor({level})",
                                                   (functools.partial(original, logger, level), value))
        return value
    return handler


def warn(originals: dict, key: str):
    """A handler for `warnings.warn`."""
    def handler(message, category=None, stacklevel=1, source=None, **kwargs):
        original = originals[key]
        frame = None if kwargs else _caller(False, stacklevel)
        if frame is None:
            return original(message, category, stacklevel + 2, source, **kwargs)
        if isinstance(message, Warning):
            category = message.__class__
        elif category is None:
            category = UserWarning
        if not (isinstance(category, type) and issubclass(category, Warning)):
            return original(message, category, stacklevel + 2, source)  # eager's TypeError
        tracer = current_tracer()
        if torch_flags.warnings_state() != tracer.warnings_at_start:
            raise GraphBreak("warnings.warn(...) under warning filters or a destination the function set "
                             "(warnings.catch_warnings, simplefilter, redirect_stderr inside it): the compiled "
                             "code would replay it under the caller's", None, "The call runs eagerly.")
        tracer.graph.call(WarningAt(category, frame), (tracer.to_ir(message),), {}, None, None,
                          torch.is_grad_enabled(), name_hint="warn")
    return handler


def same_streams(tracer, what: str) -> None:
    """A print replayed by the compiled code writes to the sys.stdout of the call: one made where the function
    redirected it (`contextlib.redirect_stdout(buf)` inside) breaks."""
    start = tracer.warnings_at_start
    if sys.stdout is not start[-2] or sys.stderr is not start[-1]:
        raise GraphBreak(f"{what} while the function has redirected sys.stdout or sys.stderr (the compiled code "
                         "would write to the caller's)", None, "The call runs eagerly.")


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
              "critical": logging.CRITICAL, "log": None}
