"""Errors of the tracing layer."""
from __future__ import annotations

from ..symbolic.errors import DynashapeError
from ..symbolic.userloc import Location


class GraphBreak(DynashapeError):
    """The trace cannot continue (data-dependent control flow, an op that needs data).

    Raised with `fullgraph=True` as GraphBreakError; otherwise the call runs eagerly.
    """

    def __init__(self, reason: str, location: Location | None = None, advice: str = "", once: bool = False):
        self.reason = reason
        self.location = location
        self.advice = advice
        self.once = once  # this call only runs eagerly (a first import): no entry is kept, the next traces
        at = f" at {location}" if location else ""
        super().__init__(f"{reason}{at}" + (f"\n{advice}" if advice else ""))


class GraphBreakError(GraphBreak):
    """A graph break under `fullgraph=True`."""
