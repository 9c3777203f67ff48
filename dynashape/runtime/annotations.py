"""User annotations on input tensors: mark_dynamic, maybe_mark_dynamic, mark_static, mark_unbacked.

Marks live on the tensor object (as in PyTorch) and are read when a compiled
function traces a call that receives it.

>>> import torch, dynashape as ds
>>> x = torch.randn(8, 4)
>>> ds.mark_dynamic(x, 0)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tracing.state import is_tracing

_ATTR = "_dynashape_marks"
# a mark_* call was made in this process: until then no tensor carries marks for the guards to read (one
# unpickled with its marks could: marks steer the policy, never what a guard-accepted call computes)
ANY = [False]


@dataclass(frozen=True)
class Mark:
    kind: str  # "dynamic" (error if specialized), "maybe" (no error), "static", "unbacked"
    min: int | None = None
    max: int | None = None


def marks_of(t: torch.Tensor) -> dict:
    return getattr(t, _ATTR, None) or {}


def _dims(fn: str, t, dim) -> list[int]:
    if is_tracing():
        # as in torch.compile, accepted and without effect: the trace already keeps the sizes of
        # what it computes symbolic where it can (the policy of the inputs was decided at entry)
        return []
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"ds.{fn}(t, dim): t must be a tensor, got {type(t).__name__}")
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"ds.{fn}(t, dim): dim must be an int or a list of ints, got {d!r}")
        if not -t.dim() <= d < max(t.dim(), 1):
            raise IndexError(f"ds.{fn}(t, dim={d}): t has {t.dim()} dims")
        out.append(d % t.dim())
    return out


def _set(t, dims, mark) -> None:
    if not dims:
        return
    marks = dict(marks_of(t))
    for d in dims:
        marks[d] = mark
    ANY[0] = True
    setattr(t, _ATTR, marks)


def mark_dynamic(t: torch.Tensor, dim, min: int | None = None, max: int | None = None) -> None:
    """Dim(s) `dim` of `t` are dynamic from the first compile; the compile fails with
    ConstraintViolationError if the program specializes them (or narrows them below [min, max])."""
    dims = _dims("mark_dynamic", t, dim)
    for name, v in (("min", min), ("max", max)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"ds.mark_dynamic: {name} must be an int, got {v!r}")
    if min is not None and max is not None and min > max:
        raise ValueError(f"ds.mark_dynamic: min={min} is greater than max={max}")
    _set(t, dims, Mark("dynamic", min, max))


def maybe_mark_dynamic(t: torch.Tensor, dim) -> None:
    """Like mark_dynamic, but a specialization is allowed (no error)."""
    _set(t, _dims("maybe_mark_dynamic", t, dim), Mark("maybe"))


def mark_static(t: torch.Tensor, dim=None) -> None:
    """Dim(s) `dim` of `t` (all dims when None) stay static; a new size recompiles."""
    dims = list(range(t.dim())) if dim is None and isinstance(t, torch.Tensor) else dim
    _set(t, _dims("mark_static", t, dims), Mark("static"))


def mark_unbacked(t: torch.Tensor, dim) -> None:
    """Dim(s) `dim` of `t` become unbacked size-like symbols: no 0/1 specialization, no guards on them."""
    _set(t, _dims("mark_unbacked", t, dim), Mark("unbacked"))
