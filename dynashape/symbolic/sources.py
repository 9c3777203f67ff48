"""Names of where a value comes from, printed in PyTorch's guard notation.

A source is both a *name* (`L['x'].size()[0]`, valid Python over the dict of
the function's arguments `L`) and a *pretty* spelling for messages
(`x.size(0)`).

>>> SizeSource(LocalSource("x"), 0).name()
"L['x'].size()[0]"
>>> SizeSource(AttrSource(LocalSource("self"), "l1.weight"), 1).pretty()
'self.l1.weight.size(1)'
"""
from __future__ import annotations

from dataclasses import dataclass


class cached_property:  # noqa: N801 - functools' without its lock (Python 3.11 takes one per first read)
    """A value computed on first read and stored in the instance's `__dict__` (frozen dataclasses
    included: the descriptor has no `__set__`, so the stored value shadows it from then on)."""

    def __init__(self, fn):
        self.fn, self.attr = fn, fn.__name__

    def __set_name__(self, owner, name):
        self.attr = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        v = obj.__dict__[self.attr] = self.fn(obj)
        return v


class Source:
    """Base class: subclasses define `_name` and `_pretty`."""

    def name(self) -> str:
        return self._name

    def code(self) -> str:
        """How generated code reads it (defaults to the name; may take faster paths)."""
        return self._name

    def pretty(self) -> str:
        return self._pretty

    def root(self) -> "Source":
        base = getattr(self, "base", None)
        return self if base is None else base.root()

    def __str__(self) -> str:
        return self._name


@dataclass(frozen=True, eq=True)
class LocalSource(Source):
    local: str  # argument or local variable name

    @cached_property
    def _name(self) -> str:
        return f"L[{self.local!r}]"

    @cached_property
    def _pretty(self) -> str:
        return self.local


@dataclass(frozen=True, eq=True)
class GlobalSource(Source):
    global_name: str  # a name in the function's globals

    @cached_property
    def _name(self) -> str:
        return f"G[{self.global_name!r}]"

    @cached_property
    def _pretty(self) -> str:
        return self.global_name


@dataclass(frozen=True, eq=True)
class NamespaceSource(Source):
    """A module's globals dict, as the generated code names it: `G` (the compiled function's), or
    a name the Python-state checks bind to another module's (`_GM1`, read by a helper there)."""
    key: str
    module: str  # the module's name, for messages

    @cached_property
    def _name(self) -> str:
        return self.key

    @cached_property
    def _pretty(self) -> str:
        return f"the globals of {self.module}"


@dataclass(frozen=True, eq=True)
class ModuleGlobalSource(Source):
    """A global of another module than the compiled function's, read by code the trace ran there."""
    base: NamespaceSource
    global_name: str

    @cached_property
    def _name(self) -> str:
        return f"{self.base.key}[{self.global_name!r}]"

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.module}.{self.global_name}"


@dataclass(frozen=True, eq=True)
class CellSource(Source):
    """A closure cell of the compiled function (the cell itself: `C[0]`; its value is ClosureSource)."""
    index: int
    var: str

    @cached_property
    def _name(self) -> str:
        return f"C[{self.index}]"

    @cached_property
    def _pretty(self) -> str:
        return f"the cell of {self.var}"


@dataclass(frozen=True, eq=True)
class ClosureSource(Source):
    index: int  # position in the function's __closure__
    var: str  # the free variable's name

    @cached_property
    def _name(self) -> str:
        return f"C[{self.index}].cell_contents"

    @cached_property
    def _pretty(self) -> str:
        return self.var


@dataclass(frozen=True, eq=True)
class AttrSource(Source):
    base: Source
    attr: str  # may be dotted: "l1.weight"; numeric parts are submodules: "layers.0.weight"

    @cached_property
    def _name(self) -> str:
        parts = [f".{p}" if p.isidentifier() else f"._modules[{p!r}]" for p in self.attr.split(".")]
        return self.base.name() + "".join(parts)

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.{self.attr}"


@dataclass(frozen=True, eq=True)
class ModuleMemberSource(Source):
    """A parameter or buffer of a module: named like an attribute (`L['self'].l1.weight`), read in
    generated code through the module's own dicts, skipping `nn.Module.__getattr__` (hot path)."""

    base: Source
    attr: str  # dotted path: "l1.weight"
    kind: str  # "param" or "buffer"

    @cached_property
    def _name(self) -> str:
        return AttrSource(self.base, self.attr).name()

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.{self.attr}"

    @cached_property
    def _code(self) -> str:
        *mods, last = self.attr.split(".")
        table = "_parameters" if self.kind == "param" else "_buffers"
        return self.base.code() + "".join(f"._modules[{m!r}]" for m in mods) + f".{table}[{last!r}]"

    def code(self) -> str:
        return self._code


@dataclass(frozen=True, eq=True)
class ItemSource(Source):
    base: Source
    index: object  # int position or str key

    @cached_property
    def _name(self) -> str:
        return f"{self.base.name()}[{self.index!r}]"

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}[{self.index!r}]"


@dataclass(frozen=True, eq=True)
class SizeSource(Source):
    base: Source
    dim: int

    @cached_property
    def _name(self) -> str:
        return f"{self.base.name()}.size()[{self.dim}]"

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.size({self.dim})"


@dataclass(frozen=True, eq=True)
class StrideSource(Source):
    base: Source
    dim: int

    @cached_property
    def _name(self) -> str:
        return f"{self.base.name()}.stride()[{self.dim}]"

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.stride({self.dim})"


@dataclass(frozen=True, eq=True)
class NumelSource(Source):
    base: Source

    @cached_property
    def _name(self) -> str:
        return f"{self.base.name()}.numel()"

    @cached_property
    def _pretty(self) -> str:
        return f"{self.base.pretty()}.numel()"
