"""The graph IR: a straight-line program of torch calls over symbolic values.

Node kinds (a fixed set):
  input   a value read from the caller (a tensor, an int, a parameter) by its source
  symbol  binds a size symbol from an input: `s0 = x.size(0)`
  const   a tensor or object captured by reference (closure, global, module buffer)
  call    a call of a torch callable; args may hold nodes and symbolic expressions
  output  the returned structure

`str(graph)` prints every value with its symbolic shape and the user's line:

    %x: f32[s0, 4] = input L['x']
    %cat: f32[s0 + s1, 4] = torch.cat([%x, %y])  # model.py:3
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch: our own answers are plain, faster
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy

from ..symbolic.printer import sympy_str
from ..symbolic.sources import Source
from ..symbolic.userloc import Location
from ..tracing.names import target_name

KINDS = ("input", "symbol", "const", "call", "output")


@dataclass(frozen=True)
class SymExpr:
    """A symbolic int/float/bool computed from bound symbols, used as an argument."""

    expr: sympy.Expr
    pytype: type = int

    def __str__(self) -> str:
        return f"Sym({sympy_str(self.expr)})"


@dataclass
class TensorMeta:
    """What the trace knows of a tensor value."""

    shape: tuple  # ints and sympy expressions
    dtype: Any  # torch.dtype (kept opaque here)
    requires_grad: bool = False

    def __str__(self) -> str:
        dt = _DTYPE_ABBR.get(str(self.dtype).replace("torch.", ""), str(self.dtype).replace("torch.", ""))
        return f"{dt}[{', '.join(_dim_str(d) for d in self.shape)}]"


def _dim_str(d) -> str:
    if isinstance(d, int):
        return str(d)
    return sympy_str(d)


_DTYPE_ABBR = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64",
    "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8", "complex64": "c64",
}


_NOW = object()  # Graph.add's `modes` default: the modes in force now (Graph.modes_now)


@dataclass(eq=False)
class Node:
    kind: str
    name: str
    target: Any = None  # callable for call; Source for input; sympy.Symbol for symbol; value for const
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    meta: Any = None  # TensorMeta, SymExpr, or a structure of them; None when unknown
    location: Location | None = None
    users: list["Node"] = field(default_factory=list)
    grad_enabled: bool = True  # the grad mode the call ran under
    modes: Any = None  # (inference mode, autocast state) the call ran under; None: both off (ir/modes.py)

    def __repr__(self) -> str:
        return f"%{self.name}"


class Graph:
    SymExpr = SymExpr  # the value types, for builders in lower layers (the tracer) to use
    TensorMeta = TensorMeta
    Node = Node

    def __init__(self):
        self.nodes: list[Node] = []
        self._names: dict[str, int] = {}
        self._taken: set[str] = set()
        self.namespace: dict = {}  # names the sources of inputs read besides L: G (globals), C (closure)
        self.entry_grad: bool | None = None  # grad mode the code is entered with (guarded); None: assume on
        self.entry_modes = None  # inference mode and autocast it is entered with (guarded); None: both off
        self.exit_grad: bool | None = None  # grad mode the traced function left behind (None: not known)
        self.modes_now = None  # () -> the modes a new call runs under (set while tracing)
        self.devices: set = set()  # the device types of the tensors read from the caller or captured

    def empty_like(self) -> "Graph":
        """A new graph entered and left as this one is (namespace, grad mode and modes at entry, grad
        mode at exit), for passes that rebuild the nodes."""
        g = Graph()
        g.namespace.update(self.namespace)
        g.entry_grad, g.entry_modes, g.exit_grad = self.entry_grad, self.entry_modes, self.exit_grad
        g.devices = set(self.devices)
        return g

    # ----------------------------------------------------------- building
    def _fresh(self, hint: str) -> str:
        base = _BASES.get(hint)
        if base is None:
            base = _base_name(hint)
            if len(_BASES) < 8192:  # hints repeat across graphs (op names, parameter paths)
                _BASES[hint] = base
        n = self._names.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self._taken:  # `split_1` may already name item 1 of node `split`
            n += 1
            name = f"{base}_{n}"
        self._names[base] = n + 1
        self._taken.add(name)
        return name

    def add(self, kind: str, name_hint: str, target=None, args=(), kwargs=None, meta=None,
            location=None, grad_enabled=True, modes=_NOW) -> Node:
        assert kind in KINDS, kind
        if modes is _NOW:
            modes = self.modes_now() if kind == "call" and self.modes_now is not None else None
        node = Node(kind, self._fresh(name_hint), target, tuple(args), dict(kwargs) if kwargs else {}, meta,
                    location, [], grad_enabled, modes)
        for used in node_inputs(node):
            used.users.append(node)
        self.nodes.append(node)
        return node

    def input(self, source: Source, meta, name_hint: str, value=None) -> Node:
        """A value read from the caller; `value` is the object itself when the guards pin it
        (a module parameter), so generated code can use it without reading the source."""
        return self.add("input", name_hint, source, (value,) if value is not None else (), meta=meta)

    def symbol(self, sym: sympy.Symbol, of: Node, how: str, index) -> Node:
        """Bind `sym` at run time from `of` (`how` = 'size', 'stride', 'value' or 'item')."""
        return self.add("symbol", getattr(sym, "name", None) or str(sym), sym, (of, how, index), meta=SymExpr(sym))

    def const(self, value, meta, name_hint: str = "const") -> Node:
        return self.add("const", name_hint, value, meta=meta)

    def call(self, target: Callable, args, kwargs, meta, location=None, grad_enabled=True,
             name_hint: str | None = None, modes=_NOW) -> Node:
        return self.add("call", name_hint or target_name(target).split(".")[-1], target, args, kwargs,
                        meta, location, grad_enabled, modes)

    def output(self, value) -> Node:
        return self.add("output", "output", None, (value,))

    # ----------------------------------------------------------- queries
    def inputs(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "input"]

    def find(self, kind: str) -> list[Node]:
        return [n for n in self.nodes if n.kind == kind]

    @property
    def output_node(self) -> Node | None:
        out = self.find("output")
        return out[0] if out else None

    def free_symbols_used(self) -> set:
        """Symbols that calls and the output read (so they must be bound)."""
        syms: set = set()
        for n in self.nodes:
            if n.kind in ("call", "output"):
                for e in node_sym_exprs(n):
                    syms |= e.expr.free_symbols
        return syms

    def __str__(self) -> str:
        from .printing import format_graph
        return format_graph(self)

    def lint(self) -> None:
        from .lint import lint
        lint(self)


_RESERVED = {"L", "G", "torch", "math", "operator", "None", "True", "False", "def", "return", "del",
             "for", "if", "in", "is", "not", "and", "or", "lambda", "class", "import", "from", "as",
             "global", "with", "while", "pass", "yield", "try", "except", "finally", "raise",
             "assert", "break", "continue", "elif", "else", "nonlocal", "async", "await", "input",
             "sum", "max", "min", "abs", "len", "slice", "int", "float", "bool", "list", "tuple",
             "dict", "type", "range", "print", "Ellipsis"}


_BASES: dict = {}  # name hint -> the identifier it gives


def _base_name(hint: str) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint).strip("_") or "v"
    return "_" + base if base[0].isdigit() or base in _RESERVED else base


def _nodes_in(obj) -> list:
    """The nodes inside nested args (lists, tuples, dicts, slices), in order."""
    return _found(obj, Node, _NOT_NODES)


def node_inputs(n: Node) -> list:
    """`_nodes_in((n.args, n.kwargs))`: the nodes a node reads, in order, a level of nesting fewer."""
    return _found_in(n, Node, _NOT_NODES)


def _sym_exprs_in(obj) -> list:
    """The SymExprs inside nested args (lists, tuples, dicts, slices), in order."""
    return _found(obj, SymExpr, _NOT_SYM_EXPRS)


def node_sym_exprs(n: Node) -> list:
    """`_sym_exprs_in((n.args, n.kwargs))`, a level of nesting fewer."""
    return _found_in(n, SymExpr, _NOT_SYM_EXPRS)


def _found(obj, kind: type, others: frozenset) -> list:
    out: list = []
    _collect(obj, out, kind, others)
    return out


def _found_in(n: Node, kind: type, others: frozenset) -> list:
    out: list = []
    _collect(n.args, out, kind, others)
    if n.kwargs:
        _collect(n.kwargs, out, kind, others)
    return out


def _collect(obj, out: list, kind: type, others: frozenset) -> None:
    """Append every `kind` inside nested args to `out`; `others`: exact types that hold none."""
    if isinstance(obj, kind):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            t = type(o)
            if t is kind:
                out.append(o)
            elif t in others:  # (most arguments: answered without isinstance)
                continue
            elif isinstance(o, kind):
                out.append(o)
            elif isinstance(o, _NESTED):
                _collect(o, out, kind, others)
    elif isinstance(obj, dict):
        if obj:
            _collect(list(obj.values()), out, kind, others)
    elif isinstance(obj, slice):
        _collect((obj.start, obj.stop, obj.step), out, kind, others)


_NESTED = (list, tuple, dict, slice)
_NOT_NODES = frozenset({int, float, bool, str, type(None), SymExpr})
_NOT_SYM_EXPRS = frozenset({int, float, bool, str, type(None), Node})


def map_args(obj, fn):
    """Rebuild a structure of args with `fn` applied to every Node and SymExpr."""
    if isinstance(obj, (Node, SymExpr)):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(map_args(o, fn) for o in obj)
    if isinstance(obj, list):
        return [map_args(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: map_args(v, fn) for k, v in obj.items()}
    if isinstance(obj, slice):
        return slice(map_args(obj.start, fn), map_args(obj.stop, fn), map_args(obj.step, fn))
    return obj


Graph.map_args = staticmethod(map_args)  # for lower layers (the tracer's real-value runs)
