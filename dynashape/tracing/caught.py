"""Errors the trace raised into the user's code, and the user's code caught.

The trace runs the user's Python over stand-ins (FakeTensors, symbolic ints), and our code answers
for them: what it raises is not always what eager raises. A graph break (`globals()`), a decision
on data (`len(x.nonzero())`), an op the stand-ins do not support (`FakeTensor * SymFloat`), an
error of another type than eager's (RuntimeError for eager's IndexError), an internal error: code
that catches it (`except Exception:`) goes on down a path eager does not take, silently. Eager
decides instead: a trace during which such an error was caught outside dynashape's own code is a
graph break naming the user's line.

Which errors are the trace's: every DynashapeError made while it runs (noted when made,
symbolic/errors.py), and every error that reaches a frame of the user's code (a trace function
sees it there) after passing through dynashape's code, or that names one of our stand-in types
(`unsupported operand type(s) for *: 'FakeTensor' and 'SymFloat'`, raised by the interpreter in
the user's own frame). Errors of the user's code and of libraries' own Python (a ValueError a
torch function raises on an argument check its guards decided) are theirs to catch.

The other way round: an op recorded inside the user's `try:` (one whose `except` catches) may raise
when the compiled code runs (argmax of a tensor whose size depends on data, a check on such a
size, an index read from data): the error would leave the compiled code, not reach the handler.
Such a trace is a graph break too (`in_user_try`, asked by the tracer for each op and check it
records; answered at once when no code of the trace has a handler).
"""
from __future__ import annotations

import contextlib
import dis
import functools
import sys
import threading

from ..symbolic.errors import recording, swallowed
from ..symbolic.userloc import is_library_file, is_ours, location_at
from .errors import GraphBreak

_local = threading.local()  # .handlers: whether code with an `except` ran in this thread's trace
_STAND_INS = ("'FakeTensor'", "'SymInt'", "'SymFloat'", "'SymBool'", "FakeTensor", "SymInt(", "SymFloat(")


@contextlib.contextmanager
def watching_errors():
    """Notes the trace's errors while the block runs; on leaving it normally, raises a GraphBreak if
    code not dynashape's caught one."""
    prev = sys.gettrace()
    with recording() as noted:
        seen: set = set()

        def note(exc, tb) -> None:
            if id(exc) in seen:
                return
            seen.add(id(exc))
            if _ours(exc, tb):
                noted.append(exc)

        class Local:  # a frame's trace function: ours, then the one a debugger or coverage gave it
            __slots__ = ("prev",)

            def __init__(self, prev_local):
                self.prev = prev_local

            def __call__(self, frame, event, arg):
                if event == "exception":
                    note(arg[1], arg[2])
                if self.prev is not None:
                    self.prev = self.prev(frame, event, arg)
                return self

        def hook(frame, event, arg):
            out = prev(frame, event, arg) if prev is not None else None
            if is_library_file(frame.f_code.co_filename):
                return out
            if _catching(frame.f_code):
                _local.handlers = True
            if out is None:
                frame.f_trace_lines = False  # 'exception' and 'return' events only
            return Local(out)

        handlers, _local.handlers = getattr(_local, "handlers", False), False
        edge, _local.edge = getattr(_local, "edge", None), sys._getframe(2)  # the frame that runs the function
        sys.settrace(hook)
        try:
            yield
        finally:
            sys.settrace(prev)
            _local.handlers, _local.edge = handlers, edge
    refuse_swallowed(noted)


def in_user_try(what):
    """(what, frame) when the op or check being recorded (`what`: its name, or a function that says
    it) is inside the user's `try:` with an `except`, else None."""
    frame = _inside_user_try()
    if frame is None:
        return None
    return (what() if callable(what) else what, frame, frame.f_lineno)


def refuse_in_try(in_try) -> None:
    if in_try is None:
        return
    what, frame, lineno = in_try
    raise GraphBreak(f"{what} inside a `try:` whose `except` would catch what it raises: an error it raises when "
                     "the compiled code runs would leave the compiled code instead", location_at(frame, lineno),
                     "What to do: move the try/except out of the compiled function, or compile the code inside "
                     "the `try:` on its own.")


def _inside_user_try():
    """The user's frame whose `try:` (with an `except`) the trace is in now, or None."""
    if not getattr(_local, "handlers", False):
        return None
    f, edge = sys._getframe(1), _local.edge
    while f is not None and f is not edge:  # (a `try:` around the compiled function's call catches its errors)
        code = f.f_code
        if _catching(code) and not is_library_file(code.co_filename) and _caught_at(code, f.f_lasti):
            return f
        f = f.f_back
    return None


@functools.lru_cache(maxsize=4096)
def _catching(code) -> tuple:
    """The code's exception table as (start, end, target) entries, () when none of its handlers
    catches (only `with` and `finally` blocks)."""
    table = getattr(dis, "_parse_exception_table", None)
    if table is None or not code.co_exceptiontable:
        return ()
    entries = tuple((e.start, e.end, e.target) for e in table(code))
    ops = _ops(code)
    return entries if any(_catches(ops, t) for _, _, t in entries) else ()


@functools.lru_cache(maxsize=4096)
def _ops(code) -> tuple:
    """({offset: index}, [opname, ...]) of the code's instructions (inline caches left out)."""
    names = [(i.offset, i.opname) for i in dis.get_instructions(code)]
    return {o: k for k, (o, _) in enumerate(names)}, [n for _, n in names]


def _catches(ops: tuple, target: int) -> bool:
    """The handler at `target` is an `except` clause (not a with block's exit, a finally, a cleanup)."""
    index, names = ops
    k = index.get(target)
    if k is None or names[k] != "PUSH_EXC_INFO":
        return False
    nxt = names[k + 1:k + 8]
    return nxt[:1] == ["POP_TOP"] or any(op in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH") for op in nxt)


@functools.lru_cache(maxsize=65536)
def _caught_at(code, offset: int) -> bool:
    """An error at `offset` reaches an `except` of this code (through with blocks' and finally
    blocks' handlers, which re-raise)."""
    entries = _catching(code)
    ops = _ops(code)
    for _ in range(16):
        hit = next((t for a, b, t in entries if a <= offset < b), None)
        if hit is None:
            return False
        if _catches(ops, hit):
            return True
        offset = hit
    return False


def _ours(exc, tb) -> bool:
    """Raised by, or through, dynashape's code, or about one of our stand-ins."""
    t = tb.tb_next if tb is not None else None
    while t is not None:
        if is_ours(t.tb_frame.f_code.co_filename):
            return True
        t = t.tb_next
    if isinstance(exc, (TypeError, AttributeError)):
        text = str(exc)
        return any(s in text for s in _STAND_INS)
    return False


def refuse_swallowed(noted: list) -> None:
    """The trace raised an error into the user's code and that code caught it and went on: the path
    the trace took is not eager's, which the call then runs instead."""
    e, frame = swallowed(noted, is_ours)
    if e is None:
        return
    tb = e.__traceback__
    reason = getattr(e, "reason", None) or str(e).split("\n", 1)[0]
    raise GraphBreak(f"the function caught an error the trace raised into it ({type(e).__name__}: {reason}); "
                     "whether eager raises it there is eager's to say", location_at(frame, tb.tb_lineno),
                     "What to do: catch only the exceptions this code expects (not `Exception`), or move the "
                     "line out of the compiled function. " + (getattr(e, "advice", "") or ""))
