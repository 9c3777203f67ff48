"""The loop-level IR of one fused region: a hash-consed DAG of scalar expressions.

A region iterates over a domain `D` (a symbolic shape). Its dims split into *outer* dims
(the rows; parallel) and *inner* dims (reduced, or the last dim of a pointwise region).
Every expression is evaluated at one element of the domain; the loop variables `i0..i{n-1}`
are sympy symbols, so loads index with ordinary sympy arithmetic (views are index maps):

    load(0, (i0, i1))              x[i0, i1] through x's runtime strides
    op('mul', [load, const 2.0])   a pointwise op computed in the C type of its dtype
    reduce('sum', arg)             one value per row: arg summed over the inner dims
    gather(0, (i0, 0), 1, C, t)    x[i0, t] for a value t (cross-entropy's target), NaN out of range

Nodes are interned (`IR.make`), so one expression used twice is one node: sibling
reductions over the same argument (the mean inside `var`, the user's own `mean`) are one
accumulator, computed in one pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy


@dataclass(frozen=True, eq=False)
class Node:
    kind: str  # 'load' | 'const' | 'sym' | 'op' | 'reduce'
    key: tuple  # what identifies it (used for interning)
    dtype: object  # torch.dtype of the value
    args: tuple = ()  # IR operands
    id: int = 0
    inner: bool = False  # depends on an inner loop variable (varies within a row)

    def __repr__(self) -> str:
        return f"t{self.id}:{self.kind}{self.key[:2]}"


class IR:
    """The interning table of one region, plus its loop variables."""

    def __init__(self, rank: int, n_inner: int):
        self.rank = rank
        self.n_inner = n_inner  # the last n_inner dims of the domain are inner
        self.vars = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(rank))
        self.inner_vars = frozenset(self.vars[rank - n_inner:])
        self.nodes: dict = {}
        self.order: list[Node] = []  # creation order = a topological order

    def make(self, kind: str, key: tuple, dtype, args=()) -> Node:
        k = (kind, key, dtype, tuple(a.id for a in args))
        n = self.nodes.get(k)
        if n is None:
            if kind in ("load", "gather"):
                inner = any(bool(e.free_symbols & self.inner_vars) for e in key[1]) or any(a.inner for a in args)
            elif kind == "reduce":
                inner = False  # one value per row
            else:
                inner = any(a.inner for a in args)
            n = Node(kind, key, dtype, tuple(args), len(self.order), inner)
            self.nodes[k] = n
            self.order.append(n)
        return n

    def load(self, buf: int, index: tuple, dtype) -> Node:
        return self.make("load", (buf, tuple(sympy.sympify(i) for i in index)), dtype)

    def const(self, value, dtype) -> Node:
        # -0.0 == 0.0 (and hashes alike): interned by value alone, x / -0.0 read the 0.0 of a `y > 0`
        # in the same region and gave +inf for -inf (train fuzz seed 25112701)
        key = (value, math.copysign(1.0, value)) if isinstance(value, float) and value == 0.0 else (value,)
        return self.make("const", key, dtype)

    def sym(self, expr, dtype) -> Node:
        return self.make("sym", (sympy.sympify(expr),), dtype)

    def op(self, name: str, args, dtype, *extra) -> Node:
        return self.make("op", (name,) + extra, dtype, args)

    def gather(self, buf: int, index: tuple, dim: int, size, at: Node, dtype) -> Node:
        """buf[index] with component `dim` replaced by the value `at` (NaN when out of [0, size))."""
        return self.make("gather", (buf, tuple(sympy.sympify(i) for i in index), dim, sympy.sympify(size)), dtype, (at,))

    def reduce(self, kind: str, arg: Node, dtype) -> Node:
        assert kind in ("sum", "max", "min", "shift"), kind  # shift: a max whose NaNs need not show
        return self.make("reduce", (kind,), dtype, (arg,))


def reduces_in(n: Node, seen=None) -> list[Node]:
    """The reduce nodes an expression reads (not looking inside them)."""
    out, seen, todo = [], set() if seen is None else seen, [n]
    while todo:
        m = todo.pop()
        if m.id in seen:
            continue
        seen.add(m.id)
        if m.kind == "reduce":
            out.append(m)
        else:
            todo.extend(m.args)
    return out


def level(n: Node, memo: dict) -> int:
    """0 for expressions without reductions; a reduce is one pass after what its argument reads."""
    if n.id in memo:
        return memo[n.id]
    if n.kind == "reduce":
        v = 1 + max([level(r, memo) for r in reduces_in(n.args[0])] or [0])
    else:
        v = max([level(r, memo) for r in reduces_in(n)] or [0])
    memo[n.id] = v
    return v
