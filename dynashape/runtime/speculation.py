"""The trace tree of an entry: its paths through data-dependent branches, compiled as one function.

A call whose data takes a branch no path has taken raises `SideExit` from the
compiled code (nothing before the branch was visible outside, so the call can
run again from its start); the runtime then traces the call again, on its data,
and adds the new path to the tree (`Tree.add`), up to `config.speculation_paths`.
"""
from __future__ import annotations

from ..ir.tree import CannotMerge, TreeGraph, compile_tree, is_data_guard
from ..tracing.speculate import SideExit


class Tree:
    def __init__(self, backend=None):
        self.backend = backend  # one with a `tree(paths, side_exit)` method compiles the tree itself
        self.paths: list = []  # graphs
        self.finishers: list = []  # finish(flat, L) per path: the output, with its Python effects
        self.fn = None
        self.graph: TreeGraph | None = None
        self.closed: str | None = None  # why new paths are no longer traced

    def add(self, graph, finish) -> bool:
        """Merge a path in (False when it does not share the tree's statements up to a branch)."""
        paths = self.paths + [graph]
        tree_fn = getattr(self.backend, "tree", None)
        try:
            code = tree_fn(paths, SideExit) if tree_fn is not None else compile_tree(paths, SideExit)
        except CannotMerge:
            return False
        self.paths = paths
        self.finishers.append(finish)
        self.fn = _TreeFn(code, self.finishers)
        self.graph = TreeGraph(paths)
        return True

    def why_closed(self, limit: int) -> str:
        """`data-dependent loop at model.py:12: 8 trip counts seen` or the branch count."""
        for g in self.paths:
            seen: dict = {}
            for n in g.nodes:
                if is_data_guard(n) and n.location:
                    key = (n.location.filename, n.location.lineno)
                    if key in seen:
                        return (f"data-dependent loop at {n.location}: {len(self.paths)} trip counts seen "
                                f"(config.speculation_paths = {limit}); calls that take another path run eagerly")
                    seen[key] = n.location
        return (f"data-dependent branches: {len(self.paths)} paths seen (config.speculation_paths = {limit}); "
                f"calls that take another path run eagerly")


class _TreeFn:
    """fn(L) of a tree entry: the path's outputs, finished with its Python effects. Other
    attributes are the compiled code's (`source`; the fused backend's `fused`, `regions`)."""

    def __init__(self, code, finishers):
        self.code, self.finishers = code, finishers

    def __call__(self, L):
        k, flat = self.code(L)
        return self.finishers[k](flat, L)

    def __getattr__(self, name):
        return getattr(self.__dict__["code"], name)

    def __deepcopy__(self, memo):  # like a function: copying a compiled module shares its code
        return self


__all__ = ["SideExit", "Tree"]
