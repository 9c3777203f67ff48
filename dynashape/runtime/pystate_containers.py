"""The containers of the Python state (runtime/pystate.py), read and written by kind: a list or a
deque (`list`), a dict, an object's `__dict__` (`attrs`), a closure cell (`cell`); and where an
iterator stands."""
from __future__ import annotations

import types
import warnings


def _set_items(obj, items) -> None:
    if type(obj) is list:
        obj[:] = items
    else:  # a deque
        obj.clear()
        obj.extend(items)


def _position(it):
    """Where an iterator stands (equal while it is not advanced), or None when that cannot be told."""
    if isinstance(it, types.GeneratorType):
        return (it.gi_frame.f_lasti if it.gi_frame is not None else -1,)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # itertools' pickling support is deprecated
            return it.__reduce__()
    except Exception:  # noqa: BLE001
        return None


def _slot(c, key):
    """What container `c` (a dict, list, deque or _CellDict) holds at `key`, or None."""
    try:
        return c[key]
    except (KeyError, IndexError, ValueError):
        return None


def _contents(kind, obj):
    if kind == "list":
        return list(obj)
    if kind == "attrs":
        return dict(vars(obj))
    if kind == "cell":
        try:
            return {"cell_contents": obj.cell_contents}
        except ValueError:  # empty
            return {}
    return dict(obj)


class _CellDict:
    """A closure cell written like a dict of its one value (`cell_contents`)."""

    __slots__ = ("cell",)

    def __init__(self, cell):
        self.cell = cell

    def __getitem__(self, k):
        return self.cell.cell_contents

    def __setitem__(self, k, v):
        self.cell.cell_contents = v

    def __delitem__(self, k):
        del self.cell.cell_contents

    def pop(self, k, default=None):
        try:
            del self.cell.cell_contents
        except ValueError:
            pass
