"""The containers of the Python state (runtime/pystate.py), read and written by kind: a list or a
deque (`list`), a dict, an object's `__dict__` (`attrs`), a closure cell (`cell`), a class's own
attributes (`class`), an object's `__slots__` (`slots`); and where an iterator stands."""
from __future__ import annotations

import types
import warnings


def _set_items(obj, items) -> None:
    if type(obj) is list:
        obj[:] = items
    else:  # a deque, a WeakSet
        obj.clear()
        (obj.extend if hasattr(obj, "extend") else obj.update)(items)


def _position(it):
    """Where an iterator stands (equal while it is not advanced), or None when that cannot be told: a
    generator (its frame is back at the same `yield` after a loop's turn, so its instruction offset
    says nothing), and one whose state holds another iterator (`map`, `zip`, `enumerate`, `cycle`: a
    copy shares that one, and a draw from the copy advances it without changing the copy's own state)."""
    if isinstance(it, types.GeneratorType):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # itertools' pickling support is deprecated
            state = it.__reduce__()
    except Exception:  # noqa: BLE001
        return None
    if any(_shares(x) for part in state[1:] for x in (part if isinstance(part, tuple) else (part,))):
        return None
    return state


def _shares(x) -> bool:
    return hasattr(type(x), "__next__") or isinstance(x, tuple) and any(_shares(y) for y in x)


def _slot(c, key):
    """What container `c` (a dict, list, deque or _CellDict) holds at `key`, or None."""
    try:
        return c[key]
    except (KeyError, IndexError, ValueError):
        return None


def _contents(kind, obj):
    if kind == "list":
        return list(obj)
    if kind in ("attrs", "class"):
        return dict(vars(obj))
    if kind == "cell":
        try:
            return {"cell_contents": obj.cell_contents}
        except ValueError:  # empty
            return {}
    if kind == "slots":
        out = {}
        for name in slot_names(type(obj)):
            try:
                out[name] = object.__getattribute__(obj, name)
            except AttributeError:  # an empty slot
                pass
        return out
    return dict(obj)


def _target(kind, obj):
    """What a container's changes are written through, like a dict."""
    if kind == "cell":
        return _CellDict(obj)
    if kind in ("class", "slots"):
        return _AttrDict(obj)
    return vars(obj) if kind == "attrs" else obj


def slot_names(cls) -> tuple:
    """The `__slots__` names of a class and its bases (not `__dict__` or `__weakref__`)."""
    out = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in out:
                out.append(name)
    return tuple(out)


class _AttrDict:
    """A class's attributes (its `__dict__` is read-only) or an object's slots, written like a dict."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __getitem__(self, k):
        return getattr(self.obj, k)

    def __setitem__(self, k, v):
        setattr(self.obj, k, v) if isinstance(self.obj, type) else object.__setattr__(self.obj, k, v)

    def __delitem__(self, k):
        delattr(self.obj, k) if isinstance(self.obj, type) else object.__delattr__(self.obj, k)

    def pop(self, k, default=None):
        try:
            del self[k]
        except AttributeError:
            pass


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
