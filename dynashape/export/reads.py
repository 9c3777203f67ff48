"""What an export trace reads of the caller's world besides its inputs' shapes and dtypes.

An exported program runs under whatever grad mode the caller has, with whatever tensors the
caller passes. A trace that read the grad mode (`if torch.is_grad_enabled():`, a
`with torch.no_grad():` block, whose entry reads it, or torch's own modules choosing a fast path
by it) or an input's `requires_grad` baked the answer into the graph, so the program must check
that the caller's is the same. These two recorders find out whether the trace read them:

- `GradModeReads` puts a recording `torch.is_grad_enabled` in place for the trace: a call made
  (directly, or through torch's Python code) by the user's code is a read; dynashape's own calls,
  and the grad-mode context managers dynashape enters itself, are not.
- `AutogradReads` is a TorchFunctionMode entered inside the traced function, above the tracer's:
  it sees `t.requires_grad` (`is_leaf`, `grad_fn`) before the tracer answers it.
"""
from __future__ import annotations

import os
import sys
import threading

import torch
from torch.overrides import TorchFunctionMode

_TORCH = os.path.dirname(torch.__file__) + os.sep
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# the files of the grad-mode context managers (`with torch.no_grad():` reads the mode to restore it)
_SWITCHES = tuple(os.path.join(_TORCH, *p) for p in (("autograd", "grad_mode.py"), ("utils", "_contextlib.py")))
_AUTOGRAD = frozenset(getattr(torch._C.TensorBase, n).__get__ for n in ("requires_grad", "is_leaf", "grad_fn"))


def _users_read(frame) -> bool:
    """Whether a read at `frame` is the user's: the first frame outside torch is not dynashape's, or
    torch code other than a grad-mode context manager stands between (a decomposed F.* function)."""
    through_torch = False
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH):
            return not name.startswith(_OURS) or through_torch
        through_torch = through_torch or not name.startswith(_SWITCHES)
        frame = frame.f_back
    return True


class GradModeReads:
    """`with GradModeReads() as r:` ... `r.where`: the user's line of the first grad-mode read, or None.
    The recording `torch.is_grad_enabled` is installed once for all threads' exports (a count, under a
    lock) and records into the innermost recorder of the thread that calls it."""

    def __init__(self):
        self.read = False
        self.where: str | None = None

    def __enter__(self):
        with _lock:
            if not _installed[0]:
                _installed[1] = torch.is_grad_enabled
                torch.is_grad_enabled = _recording_is_grad_enabled
            _installed[0] += 1
        _local.__dict__.setdefault("stack", []).append(self)
        return self

    def __exit__(self, *exc) -> None:
        _local.stack.remove(self)
        with _lock:
            _installed[0] -= 1
            if not _installed[0]:
                torch.is_grad_enabled = _installed[1]


_lock = threading.Lock()
_installed: list = [0, None]  # exports inside a recorder now (all threads), the function it replaced
_local = threading.local()  # .stack: this thread's recorders, innermost last
_is_grad_enabled = torch._C.is_grad_enabled


def _recording_is_grad_enabled() -> bool:
    stack = getattr(_local, "stack", None)
    if stack and not stack[-1].read and _users_read(sys._getframe(1)):
        stack[-1].read = True
        stack[-1].where = _user_line(sys._getframe(1))
    return _is_grad_enabled()


_recording_is_grad_enabled.__doc__ = _is_grad_enabled.__doc__


class AutogradReads(TorchFunctionMode):
    """Records whether the trace read a tensor's autograd state (`requires_grad`, `is_leaf`,
    `grad_fn`): an input's is the caller's, an intermediate's follows from the inputs' and the grad
    mode. `where`: the user's line of the first read, or None."""

    def __init__(self):
        super().__init__()
        self.where: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.where is None and func in _AUTOGRAD and args and isinstance(args[0], torch.Tensor):
            self.where = _user_line(sys._getframe(1)) or "the traced function"
        return func(*args, **(kwargs or {}))


def _user_line(frame) -> str | None:
    """`model.py:12` of the nearest frame outside torch and dynashape."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_TORCH, _OURS)):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


__all__ = ["AutogradReads", "GradModeReads"]
