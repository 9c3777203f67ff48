"""`ds.set_stance(name)`: how compiled functions behave, as a call, context manager or decorator.

As `torch.compiler.set_stance`:

- default: compile and reuse as usual
- force_eager: never compile; run the original function
- eager_on_recompile: calls that compiled entries accept run them; any other call runs
  eagerly instead of compiling (a function's first call too)
- eager_then_compile: the first call runs eagerly and records sizes; the first compile
  then makes dynamic what already varied
- fail_on_recompile: a compile raises RecompileError carrying the reasons (a function's
  first compile too: warm it up before setting the stance)
"""
from __future__ import annotations

import contextlib

from ..symbolic.userloc import user_location
from ..tracing.errors import GraphBreak
from ..tracing.state import is_tracing

STANCES = ("default", "force_eager", "eager_on_recompile", "eager_then_compile", "fail_on_recompile")
_current = ["default"]


def current() -> str:
    return _current[0]


class set_stance(contextlib.ContextDecorator):
    def __init__(self, stance: str = "default"):
        _refuse_inside_a_trace()
        if stance not in STANCES:
            raise ValueError(f"unknown stance {stance!r}; valid: {', '.join(STANCES)}")
        self._prev = _current[0]
        self.stance = stance
        _current[0] = stance  # a plain call takes effect at once

    def __enter__(self):
        _refuse_inside_a_trace()
        self._saved = self._prev if _current[0] == self.stance else _current[0]
        _current[0] = self.stance
        return self

    def __exit__(self, *exc):
        _current[0] = self._saved
        return False

    def __call__(self, fn):  # as a decorator: the stance holds during each call only
        _current[0] = self._prev
        return super().__call__(fn)


def _refuse_inside_a_trace() -> None:
    """The stance is the caller's setting: a trace would change it once, when tracing, and never when the
    compiled code runs (torch.compile refuses set_stance inside a compiled region too)."""
    if is_tracing():
        raise GraphBreak("ds.set_stance inside a compiled function", user_location(),
                         "What to do: set the stance around the call, outside the compiled function.")
