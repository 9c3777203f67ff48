"""What the trace sees in the place of some of the user's objects (runtime/pystate.py's PyState
swaps them through these methods, and puts the user's objects back after the trace).

- An iterator the trace can reach (`c = itertools.count()` in a closure, a generator held in an
  attribute or passed as an argument): a draw the trace makes cannot be undone, and a graph would
  bake the value drawn. The trace draws from a copy of it (`copy.copy` of an itertools iterator, a
  list or range iterator), and a trace that advanced the copy breaks, whose eager run then draws
  from the original as eager does; one that cannot be copied (a generator) is replaced by a stand-in
  that breaks at its first draw, before drawing. Where nothing can be put in its place (an item of
  a tuple), the call breaks before the trace runs: a generator's position cannot even be told (its
  frame is back at the same `yield` after a loop's turn).
- A weak container (WeakValueDictionary...): a stand-in that breaks at any use.
- A function the trace intercepts on its owner module (tracing/global_state.py: `torch.manual_seed`,
  `warnings.warn`, `math.sqrt`, torch's flag getters) but held under another name (`from torch import
  manual_seed`, `self.seed = torch.manual_seed`): the router the patch installs, so the trace records
  or guards the call as it does `torch.manual_seed(...)`, instead of running it once, at trace time.

Where the object sits is its holder: (container, key) of a dict, list, object `__dict__` or closure
cell; ARGUMENT for a value the trace is passed as an argument (the trace's own copy of the
arguments then holds the stand-in: the caller's objects are never touched).
"""
from __future__ import annotations

import copy
import types
import warnings

from ..symbolic.sources import GlobalSource, ModuleGlobalSource, Source
from ..tracing.errors import GraphBreak
from ..tracing.global_state import _ORIGINAL, _POINTS, _ROUTERS
from ..tracing.pyenv import IteratorStandIn
from .pystate_containers import _CellDict, _position, _slot

ARGUMENT = ("argument",)  # the holder of a value passed to the trace: root() returns what it sees instead


class SwapState:
    """PyState's methods for what the trace sees in the place of the user's objects (needs its env,
    ignored, readers, _reader, _keep, _snap, _iterators, _swaps, _twins, _refused)."""

    def _holder(self, holder, v, src: Source):
        """(container, key) written like a dict (a closure cell as a _CellDict), ARGUMENT, or None."""
        if holder is None:
            return self._global_holder(v, src)
        if holder is not ARGUMENT and isinstance(holder[0], types.CellType):
            return _CellDict(holder[0]), holder[1]
        return holder

    def _iterator(self, it, src: Source, holder=None) -> None:
        """An iterator the trace can reach (see the module's docstring)."""
        holder = self._holder(holder, it, src)
        if holder is None:
            self._refuse(GraphBreak(
                f"the function can reach {src.pretty()}, a {type(it).__name__} iterator held where nothing can be "
                "put in its place (in a tuple): a draw the trace made could not be undone", None,
                "What to do: hold it in a list, a dict or an attribute, or draw from it outside the compiled "
                "function and pass the value."))
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # itertools' pickling support is deprecated
                twin = copy.copy(it)
        except Exception:  # noqa: BLE001 - not copyable: a stand-in that breaks
            twin = None
        pos = _position(twin) if twin is not None and twin is not it else None
        if pos is not None and pos == _position(it):
            self._iterators.append((twin, src, pos))
        else:
            twin = IteratorStandIn(it, src.pretty())
        self._twins[id(it)] = twin
        self._keep += [it, twin]
        self.readers[id(twin)] = self.readers.get(id(it)) or self._reader(src)  # a replay reads the caller's
        self._place(holder, twin, it)

    def _met_again(self, v, src: Source, holder) -> None:
        """An iterator met before on another path: its copy or stand-in goes in this place too."""
        holder = self._holder(holder, v, src)
        if holder is None:
            self._iterator(v, src)  # (refused)
        else:
            self._place(holder, self._twins[id(v)], v)

    def _place(self, holder, ours, v) -> None:
        if holder is ARGUMENT:
            return  # root() returns `ours` in its place
        c, key = holder
        if isinstance(c, dict):
            self.ignored.add((id(c), key))
        self._swap_in(c, key, ours, v)

    def _refuse(self, why: GraphBreak) -> None:
        """A break found while walking: raised before the trace runs (check_swaps), or now while it runs."""
        if hasattr(self, "_snap"):
            raise why
        self._refused = self._refused or why

    def check_swaps(self) -> None:
        """Before the trace runs: what the walk found that it cannot run with (an iterator in a tuple)."""
        if self._refused is not None:
            raise self._refused

    def given(self, v, holder):
        """What the trace sees in the place of an argument `v`."""
        return self._twins.get(id(v), v) if holder is ARGUMENT else v

    def _route(self, v, holder) -> None:
        """A function the trace intercepts, held under a name of the user's: the router in its place."""
        if holder is None or holder is ARGUMENT:
            return
        router = self.router_for(v)
        if router is not None:
            self._place(holder, router, v)

    def router_for(self, v):
        """The router of global_state that stands for `v` while the trace runs, or None."""
        routed = getattr(self, "_routed", None)
        if routed is None:
            routed = self._routed = {}
            for owner, name, key in _POINTS:  # the function the patch replaced, and the one there now
                for f in (_ORIGINAL[key], getattr(owner, name, None)):
                    if f is not None and f is not _ROUTERS[key]:
                        routed[id(f)] = _ROUTERS[key]
        return routed.get(id(v))

    def _swap_in(self, c, key, twin, it) -> None:
        """`twin` in the place of `it` in container `c` while the trace runs (from the snapshot on)."""
        self._swaps.append((c, key, twin, it))
        if hasattr(self, "_snap"):  # met while tracing: the snapshot is taken
            c[key] = twin

    def _global_holder(self, v, src: Source):
        """(globals dict, name) where a global `v` sits, or None."""
        if not isinstance(src, (ModuleGlobalSource, GlobalSource)):
            return None
        d = self.env.get(src.base.key) if isinstance(src, ModuleGlobalSource) else self.env["G"]
        return (d, src.global_name) if d is not None and d.get(src.global_name) is v else None

    def _unswap(self) -> None:
        """The user's objects back in their places."""
        for c, key, twin, it in self._swaps:  # (whether or not its dict is a container)
            if _slot(c, key) is twin:
                c[key] = it
        self._swaps.clear()

    def _refuse_advanced(self) -> None:
        """At the end of the trace: a copy it drew from is a graph break (the eager run draws from the original)."""
        for it, src, pos in self._iterators:
            if _position(it) != pos:
                raise GraphBreak(f"the function advanced {src.pretty()}, a {type(it).__name__} iterator whose "
                                 "position a compiled call cannot replay", None,
                                 "What to do: draw from it outside the compiled function and pass the value.")
