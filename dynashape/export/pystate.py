"""The user's Python objects an export trace may change: saved before the trace, put back after.

`ds.export` runs the user's code once on stand-ins (FakeTensors, SymInts). What that run
stores in the user's objects (`self.last = x.sum()`, `self.cache.append(y)`, a buffer rebound
by `self.count += 1`, `SEEN.append(x.shape[0])` on a module's global list) would leave a
trace-time object behind, and eager use of the module afterwards would fail or be wrong.

Before the trace we walk what the code can reach (the module tree, the functions and classes
it runs, the globals of the user's modules they live in, their closure cells and mutable
defaults) and keep a shallow copy of every list, dict, set, deque, object `__dict__`, class
dict and closure cell met; after the trace, whether it succeeded or not, each is put back as
it was. The exported program does not replay such Python side effects (torch.export does not
either): it returns the outputs and updates its own buffers in place. `changed()` names what
the trace changed besides buffers, for a warning.

    >>> snap = Snapshot(); snap.add(model, "model"); snap.add(model.forward, "model.forward")
    >>> try: trace() finally: snap.restore()
"""
from __future__ import annotations

import collections
import functools
import itertools
import sys
import types
import warnings

import torch

_LIBRARIES = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "sympy", "dynashape", "transformers",
                                                    "typing_extensions", "_pytest", "pytest", "pluggy"}
_MAX_DEPTH = 8
_MAX_CONTAINERS = 20000  # a bound on the walk (a notebook's globals): what lies past it is not restored
_MAX_ITEMS = 2000  # items of one container walked into (a data set in a global list is not walked through)
_MISSING = object()


def _library(obj) -> bool:
    """Whether `obj` (a module, function or class) belongs to the standard library or a package we
    take as constant (torch, numpy...): its state is not the user's and is not walked."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return not isinstance(name, str) or name.split(".")[0] in _LIBRARIES


class Snapshot:
    """A shallow copy of every container the walk met, by identity; `restore` puts each back."""

    def __init__(self):
        self._saved: list = []  # (kind, obj, contents before, where)
        self._seen: set[int] = set()
        self._keep: list = []  # keeps walked objects alive while their ids are keys

    # ------------------------------------------------------------ walking
    def add(self, v, where: str) -> None:
        """Walk a root (the module, the function) and what it reaches."""
        self._walk(v, where, 0)

    def _save(self, kind: str, obj, where: str) -> None:
        self._saved.append((kind, obj, _contents(kind, obj), where))

    def _walk(self, v, where: str, depth: int) -> None:
        if depth > _MAX_DEPTH or id(v) in self._seen or len(self._seen) >= _MAX_CONTAINERS:
            return
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.Tensor, torch.dtype,
                                       torch.device)):
            return  # atoms (a tensor's own state is not a trace's to change: it sees a stand-in)
        self._seen.add(id(v))
        self._keep.append(v)
        step = depth + 1
        if isinstance(v, (list, collections.deque)):
            self._save("list", v, where)
            for i, x in enumerate(itertools.islice(v, _MAX_ITEMS)):
                self._walk(x, f"{where}[{i}]", step)
        elif isinstance(v, dict):
            self._save("dict", v, where)
            for k, x in list(itertools.islice(v.items(), _MAX_ITEMS)):
                self._walk(x, _item(where, k, v), step)
        elif isinstance(v, (set, tuple, frozenset)):
            if isinstance(v, set):
                self._save("set", v, where)
            for i, x in enumerate(itertools.islice(v, _MAX_ITEMS)):
                self._walk(x, f"{where}[{i}]", step)
        elif isinstance(v, types.MethodType):  # the object first: its attributes are spelled from it
            self._walk(v.__self__, where, depth)
            self._walk(v.__func__, where, depth)
        elif isinstance(v, types.FunctionType):
            self._function(v, where, step)
        elif isinstance(v, functools.partial):
            for i, x in enumerate((v.func, v.args, v.keywords)):
                self._walk(x, f"{where}.{('func', 'args', 'keywords')[i]}", step)
        elif isinstance(v, types.ModuleType):
            if not _library(v):  # `import helpers`: helpers.CALLS is the user's state
                self._walk(vars(v), v.__name__, step)
        elif isinstance(v, type):
            if not _library(v):  # `Counter.calls += 1`: a class attribute
                self._save("class", v, v.__qualname__)
                for k, x in list(vars(v).items()):
                    self._walk(x, f"{v.__qualname__}.{k}", step)
        else:
            self._object(v, where, step)

    def _function(self, fn: types.FunctionType, where: str, depth: int) -> None:
        """A function of the user's: its module's globals, its closure cells, its mutable defaults."""
        if _library(fn):
            return
        self._walk(fn.__globals__, fn.__globals__.get("__name__") or f"the globals of {fn.__qualname__}", depth)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            if id(cell) not in self._seen:
                self._seen.add(id(cell))
                self._keep.append(cell)
                self._save("cell", cell, f"{fn.__qualname__}'s {name}")
                self._walk(_contents("cell", cell), f"{fn.__qualname__}'s {name}", depth)
        self._walk(fn.__defaults__, f"the defaults of {fn.__qualname__}", depth)
        self._walk(fn.__kwdefaults__, f"the defaults of {fn.__qualname__}", depth)

    def _object(self, v, where: str, depth: int) -> None:
        """A module or an object of a user class: its `__dict__`, and its class."""
        if not isinstance(v, torch.nn.Module) and _library(type(v)):
            return
        d = getattr(v, "__dict__", None)
        if isinstance(d, dict):
            self._seen.add(id(d))
            self._save("attrs", v, where)
            for k, x in list(d.items()):
                self._walk(x, f"{where}.{k}", depth)
        self._walk(type(v), where, depth)

    # ------------------------------------------------------------ after the trace
    def changed(self) -> list[str]:
        """Where the trace changed the user's objects (not a module's buffers, which the program
        updates in place, nor its parameters), as the user spells them: `Model.cache`, `app.SEEN`."""
        out = []
        for kind, obj, before, where in self._saved:
            now = _contents(kind, obj)
            if not _differs(kind, before, now) or where.endswith(("._buffers", "._parameters")):
                continue
            if kind in ("dict", "attrs", "class"):
                old, new = (before[0], now[0]) if kind == "attrs" else (before, now)
                keys = [k for k in {**old, **new} if old.get(k, _MISSING) is not new.get(k, _MISSING)]
                out += [_item(where, k, obj if kind == "dict" else None) for k in keys]
            else:
                out.append(where)
        return out

    def restore(self) -> None:
        """Put every container back as it was before the trace (nothing of the trace stays behind).
        One that cannot be put back (a class whose metaclass refuses) does not stop the others."""
        failed = []
        for kind, obj, before, where in self._saved:
            try:
                if kind == "attrs" and vars(obj) is not before[1]:  # `obj.__dict__ = {...}` in the trace
                    object.__setattr__(obj, "__dict__", before[1])
                if _differs(kind, before, _contents(kind, obj)):
                    _put_back(kind, obj, before)
            except Exception as e:  # noqa: BLE001  (reported below; the trace's own error goes on)
                failed.append(f"{where} ({type(e).__name__}: {e})")
        self._keep.clear()
        if failed:
            warnings.warn(f"export could not undo what the trace changed in {', '.join(failed[:4])}: these may "
                          f"hold values of the trace now", stacklevel=4)


def _item(where: str, k, d) -> str:
    """`app.SEEN` for a module's global, `where.k` for an attribute (d None), else `where['k']`."""
    if d is None or (isinstance(d, dict) and isinstance(d.get("__name__"), str) and "__builtins__" in d):
        return f"{where}.{k}"
    return f"{where}[{k!r}]"


def _contents(kind: str, obj):
    if kind == "list":
        return list(obj)
    if kind == "set":
        return set(obj)
    if kind == "dict":
        return dict(obj)
    if kind == "attrs":
        return (dict(vars(obj)), vars(obj))
    if kind == "class":
        return dict(vars(obj))
    try:  # a cell
        return obj.cell_contents
    except ValueError:
        return _MISSING


def _differs(kind: str, before, now) -> bool:
    """Whether a container's contents changed, by identity (an equal but new object is a change)."""
    if kind == "cell":
        return before is not now
    if kind == "attrs":
        before, now = before[0], now[0]
    if kind == "set":
        return before != now
    if kind == "list":
        return len(before) != len(now) or any(a is not b for a, b in zip(before, now))
    return before.keys() != now.keys() or list(before) != list(now) or any(now[k] is not x for k, x in before.items())


def _put_back(kind: str, obj, before) -> None:
    if kind == "list":
        if isinstance(obj, list):
            obj[:] = before
        else:  # a deque
            obj.clear()
            obj.extend(before)
    elif kind == "set":
        obj.clear()
        obj.update(before)
    elif kind in ("dict", "attrs"):
        d = obj if kind == "dict" else vars(obj)
        before = before if kind == "dict" else before[0]
        d.clear()
        d.update(before)
    elif kind == "class":
        for k in [k for k in vars(obj) if k not in before]:
            delattr(obj, k)
        for k, x in before.items():
            if vars(obj).get(k, _MISSING) is not x and k not in ("__dict__", "__weakref__"):
                setattr(obj, k, x)
    elif before is _MISSING:
        del obj.cell_contents
    else:
        obj.cell_contents = before


__all__ = ["Snapshot"]
