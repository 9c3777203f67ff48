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
records; answered at once when no code of the trace has a handler). A `with` block counts as such a
`try:` when its context manager's exit may swallow the error (`contextlib.suppress`, an `__exit__`
that may return true, a `@contextmanager` generator whose `yield` is inside a `try:`): which
manager each of the user's `with` blocks entered is noted when its `__enter__` runs.
"""
from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import sys
import threading

from ..symbolic.errors import recording, swallowed
from ..symbolic.userloc import is_library_file, is_ours, location_at
from .errors import GraphBreak

_local = threading.local()  # .handlers: whether code with an `except` or a `with` ran in this thread's trace
# .entered: {(frame, handler offset): the context manager} of the `with` blocks entered in the trace
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
            if frame.f_code.co_argcount:  # any Python function a `with` calls as `__enter__` (a lambda too)
                _note_enter(frame)
            if is_library_file(frame.f_code.co_filename):
                return out
            if _catching(frame.f_code):
                _local.handlers = True
            if out is None:
                frame.f_trace_lines = False  # 'exception' and 'return' events only
            return Local(out)

        handlers, _local.handlers = getattr(_local, "handlers", False), False
        entered, _local.entered = getattr(_local, "entered", None), {}
        edge, _local.edge = getattr(_local, "edge", None), sys._getframe(2)  # the frame that runs the function
        sys.settrace(hook)
        try:
            yield
        finally:
            sys.settrace(prev)
            _local.handlers, _local.edge, _local.entered = handlers, edge, entered
    refuse_swallowed(noted)


def in_user_try(what):
    """(what, frame, line, block) when the op or check being recorded (`what`: its name, or a
    function that says it) is inside the user's `try:` with an `except`, or a `with` block whose
    exit may swallow errors, else None."""
    found = _inside_user_try()
    if found is None:
        return None
    frame, block = found
    return (what() if callable(what) else what, frame, frame.f_lineno, block)


def refuse_in_try(in_try) -> None:
    if in_try is None:
        return
    what, frame, lineno, block = in_try
    raise GraphBreak(f"{what} inside {block} what it raises: an error it raises when "
                     "the compiled code runs would leave the compiled code instead", location_at(frame, lineno),
                     "What to do: move the try/except (or the `with` block) out of the compiled function, or "
                     "compile the code inside it on its own.")


def _inside_user_try():
    """(the user's frame, what its block is) when the trace is inside a `try:` with an `except`
    (or a swallowing `with`) of the user's code now, else None."""
    if not getattr(_local, "handlers", False):
        return None
    f, edge = sys._getframe(1), _local.edge
    while f is not None and f is not edge:  # (a `try:` around the compiled function's call catches its errors)
        code = f.f_code
        if _catching(code) and not is_library_file(code.co_filename):
            block = _frame_catches(f, f.f_lasti)
            if block:
                return f, block
        f = f.f_back
    return None


def _frame_catches(frame, offset: int, depth: int = 0):
    """What catches an error raised at `offset` of the frame (a `try:` with an `except`, a `with`
    block whose manager may swallow it, said in words), or None."""
    for kind, target in _handlers_at(frame.f_code, offset):
        if kind == "except":
            return "a `try:` whose `except` would catch"
        cm = _local.entered.get((frame, target), _ABSENT)
        if _may_swallow(cm, depth):
            if cm is _ABSENT:
                return "a `with` block of a manager entered in C, whose exit may swallow"
            gen = getattr(cm, "gen", None)
            name = f"{gen.__qualname__}()" if inspect.isgenerator(gen) else f"{type(cm).__qualname__}(...)"
            return f"`with {name}`, whose exit may swallow"
    return None


_ABSENT = object()


def _note_enter(frame) -> None:
    """A context manager's `__enter__` is called: note the manager for the `with` block that called it."""
    back = frame.f_back
    code = frame.f_code
    if back is None or code.co_argcount < 1 or not _catching(back.f_code):
        return
    index, names = _ops(back.f_code)
    k = index.get(back.f_lasti)
    if k is None or names[k] != "BEFORE_WITH" or k + 1 >= len(names):
        return
    after = _offsets(back.f_code)[k + 1]
    target = next((t for a, b, t in _catching(back.f_code) if a <= after < b), None)
    if target is not None:
        _local.entered[(back, target)] = frame.f_locals.get(code.co_varnames[0])


def _may_swallow(cm, depth: int) -> bool:
    """Whether the manager's exit may return true for an error (conservative: yes unless shown no).
    A manager whose `__enter__` is not Python was not seen: a lock's or a file's exit does not swallow,
    but a subclass of one may have a Python `__exit__` that does, so it may."""
    if cm is _ABSENT:
        return True
    gen = getattr(cm, "gen", None)
    if inspect.isgenerator(gen) and getattr(type(cm).__exit__, "__module__", None) == "contextlib":
        # a @contextmanager: the error is thrown in at its `yield`, which swallows it if caught there
        frame = gen.gi_frame
        return frame is not None and (depth > 8 or _frame_catches(frame, frame.f_lasti, depth + 1) is not None)
    exit_ = getattr(type(cm), "__exit__", None)
    code = getattr(exit_, "__code__", None)
    return code is not None and not _returns_false(code)


@functools.lru_cache(maxsize=1024)
def _returns_false(code) -> bool:
    """Every `return` of the code gives None or False (a constant)."""
    ins = list(dis.get_instructions(code))
    for k, i in enumerate(ins):
        if i.opname == "RETURN_CONST" and i.argval not in (None, False):
            return False
        if i.opname == "RETURN_VALUE" and not (k and ins[k - 1].opname == "LOAD_CONST"
                                               and ins[k - 1].argval in (None, False)):
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _catching(code) -> tuple:
    """The code's exception table as (start, end, target) entries, () when none of its handlers
    catches or exits a `with` block (only `finally` blocks)."""
    table = getattr(dis, "_parse_exception_table", None)
    if table is None or not code.co_exceptiontable:
        return ()
    entries = tuple((e.start, e.end, e.target) for e in table(code))
    ops = _ops(code)
    return entries if any(_kind(ops, t) in ("except", "with") for _, _, t in entries) else ()


@functools.lru_cache(maxsize=4096)
def _ops(code) -> tuple:
    """({offset: index}, [opname, ...]) of the code's instructions (inline caches left out)."""
    names = [(i.offset, i.opname) for i in dis.get_instructions(code)]
    return {o: k for k, (o, _) in enumerate(names)}, [n for _, n in names]


@functools.lru_cache(maxsize=4096)
def _offsets(code) -> list:
    return [i.offset for i in dis.get_instructions(code)]


def _kind(ops: tuple, target: int) -> str:
    """What the handler at `target` is: "except" (a clause that may catch), "with" (a with block's
    exit), or "other" (a finally, a cleanup: they re-raise)."""
    index, names = ops
    k = index.get(target)
    if k is None or names[k] != "PUSH_EXC_INFO":
        return "other"
    nxt = names[k + 1:k + 8]
    if nxt[:1] == ["WITH_EXCEPT_START"]:
        return "with"
    return "except" if nxt[:1] == ["POP_TOP"] or any(op in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH") for op in nxt) \
        else "other"


@functools.lru_cache(maxsize=65536)
def _handlers_at(code, offset: int) -> tuple:
    """The (kind, target) handlers an error at `offset` of this code passes through, up to the
    first `except` (finally blocks left out: they re-raise)."""
    entries = _catching(code)
    ops = _ops(code)
    out = []
    for _ in range(16):
        hit = next((t for a, b, t in entries if a <= offset < b), None)
        if hit is None:
            break
        kind = _kind(ops, hit)
        if kind != "other":
            out.append((kind, hit))
        if kind == "except":
            break
        offset = hit
    return tuple(out)


def _caught_at(code, offset: int) -> bool:
    """An error at `offset` reaches an `except` of this code (through with blocks' and finally
    blocks' handlers, which re-raise)."""
    return any(kind == "except" for kind, _ in _handlers_at(code, offset))


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
