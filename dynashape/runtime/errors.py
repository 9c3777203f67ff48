"""Errors of the runtime layer."""
from __future__ import annotations

from ..symbolic.errors import DynashapeError


class RecompileError(DynashapeError):
    """A recompile happened where it was not allowed (`fail_on_recompile`, recompile limit)."""

    def __init__(self, message: str, reasons=()):
        super().__init__(message)
        self.reasons = list(reasons)


class MisuseError(DynashapeError, RuntimeError):
    """dynashape's API used where it cannot work (an annotation inside a compiled function)."""
