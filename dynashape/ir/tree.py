"""A trace tree: the paths one entry has seen through data-dependent branches, as one program.

Each path is a graph traced on some call; its data guards (`ds_data_guard`) record
the conditions it decided on that call's data. Paths of one entry share their
statements up to the first condition that came out differently, so they merge
into one function whose code literally branches:

    def forward(L):
        x = L['x']
        sum_1 = x.sum()
        gt = sum_1 > 0
        if bool(gt):  # model.py:3 'if x.sum() > 0:'
            mul = x.mul(2)  # model.py:4 'return x * 2'
            return 0, (mul,)
        else:
            neg = x.neg()  # model.py:5 'return -x'
            return 1, (neg,)

A condition seen one way only raises `SideExit` the other way. The function
returns the path taken with its flat outputs; `str(TreeGraph)` prints the same
tree over IR lines.
"""
from __future__ import annotations

from dataclasses import dataclass

from .codegen import ModeSwitches, _Emitter, exec_source, node_statement
from .graph import Graph, Node, SymExpr, _nodes_in
from .printing import format_arg, format_node


class CannotMerge(Exception):
    """Two paths differ before any condition that tells them apart (a new entry is needed)."""


@dataclass
class _Stmt:
    text: str  # the line; for a data guard, the condition
    name: str | None  # the value it defines
    uses: tuple  # names of values it reads
    guard: tuple | None = None  # (expected, reason text, location) for a data guard
    ret: bool = False
    pre: str = ""  # a line before it (a grad-mode switch)


def is_data_guard(n: Node) -> bool:
    return n.kind == "call" and getattr(n.target, "_codegen_name", None) == "ds_data_guard"


def _code_statements(g: Graph, k: int, em: _Emitter, used_symbols, switches: ModeSwitches) -> list[_Stmt]:
    out: list[_Stmt] = []
    for n in g.nodes:
        uses = tuple(u.name for u in _nodes_in((n.args, n.kwargs)))
        if n.kind in ("input", "const", "symbol"):
            t = node_statement(em, n, used_symbols)
            if t is not None:  # a symbol is an int read through expressions: never freed
                out.append(_Stmt(t, None if n.kind == "symbol" else n.name, uses))
        elif n.kind == "call":
            pre = "; ".join(switches.before(n))
            if is_data_guard(n):
                cond, expected, text = n.args
                code = f"bool({cond.name})" if isinstance(cond, Node) else em.arg(cond)
                out.append(_Stmt(code, None, uses, (expected, text, n.location), pre=pre))
            else:
                out.append(_Stmt(node_statement(em, n, used_symbols), n.name, uses, pre=pre))
        elif n.kind == "output":
            out.append(_Stmt(f"return {k}, {em.arg(n.args[0])}", None, uses, ret=True,
                             pre="; ".join(switches.at_return())))
    return out


def _ir_statements(g: Graph, k: int) -> list[_Stmt]:
    bounds = getattr(g, "symbol_bounds", None)
    out: list[_Stmt] = []
    for n in g.nodes:
        if is_data_guard(n):
            cond, expected, text = n.args
            out.append(_Stmt(format_arg(cond), None, (), (expected, text, n.location)))
        elif n.kind == "output":
            out.append(_Stmt(f"return {format_arg(n.args[0])}  [path {k}]", None, (), ret=True))
        else:
            out.append(_Stmt(format_node(n, bounds), n.name, ()))
    return out


def _merge(paths: list[list[_Stmt]], *, code: bool) -> list[str]:
    """The paths as nested `if`/`else` lines (raises CannotMerge)."""
    last: list[dict] = []
    for stmts in paths:
        lu: dict = {}
        for i, s in enumerate(stmts):
            if s.name is not None:
                lu.setdefault(s.name, i)
            for u in s.uses:
                lu[u] = i
        last.append(lu)

    def dies(group, name) -> int:
        return max(last[k].get(name, -1) for k in group)

    def block(group: list[int], i: int, ind: str, live: set) -> list[str]:
        out: list[str] = []
        if code and live:  # at a branch's start: values the other branch still needed
            gone = sorted(n for n in live if dies(group, n) < i)
            if gone:
                out.append(f"{ind}del {', '.join(gone)}")
                live.difference_update(gone)
        while True:
            heads = [paths[k][i] if i < len(paths[k]) else None for k in group]
            h0 = heads[0]
            if any(h is None for h in heads):
                raise CannotMerge("a path ended early")
            if code and any(h.pre != h0.pre for h in heads):
                raise CannotMerge("grad mode, inference mode or autocast differs")
            if h0.pre and code:
                out.append(ind + h0.pre)
            if h0.guard is not None and all(h.guard is not None and h.text == h0.text for h in heads):
                taken = [k for k, h in zip(group, heads) if h.guard[0]]
                other = [k for k, h in zip(group, heads) if not h.guard[0]]
                loc = h0.guard[2]
                comment = f"  # {loc}" if loc is not None else ""
                if taken and other:
                    out.append(f"{ind}if {h0.text}:{comment}")
                    out += block(taken, i + 1, ind + "    ", set(live))
                    out.append(f"{ind}else:")
                    out += block(other, i + 1, ind + "    ", set(live))
                    return out
                expected, text = h0.guard[0], h0.guard[1]
                reason = text.replace("{actual}", str(not expected)).replace("{expected}", str(expected))
                neg = f"not {h0.text}" if expected else h0.text
                if code:
                    out.append(f"{ind}if {neg}:{comment}")
                    out.append(f"{ind}    raise _SideExit({text!r}, {expected})")
                else:
                    out.append(f"{ind}guard {h0.text} is {expected}{comment}  (else: side exit, {reason})")
            elif all(h.guard is None and h.text == h0.text for h in heads):
                out.append(ind + h0.text)
                if h0.ret:
                    return out
                if h0.name is not None:
                    live.add(h0.name)
            elif all(h.guard is not None for h in heads) and all(h.guard[0] for h in heads):
                # different conditions, each expected true (values decided on data: n.item() == 1,
                # n.item() == 0): the first one's paths, else the others
                first = [k for k, h in zip(group, heads) if h.text == h0.text]
                rest = [k for k, h in zip(group, heads) if h.text != h0.text]
                loc = h0.guard[2]
                out.append(f"{ind}if {h0.text}:" + (f"  # {loc}" if loc is not None else ""))
                out += block(first, i + 1, ind + "    ", set(live))
                out.append(f"{ind}else:")
                out += block(rest, i, ind + "    ", set(live))
                return out
            else:
                raise CannotMerge(f"the paths differ at {h0.text!r}")
            if code:  # values whose last use, on every path through here, is this statement
                dead = sorted(n for n in set(heads[0].uses) | ({h0.name} - {None})
                              if n in live and dies(group, n) == i)
                if dead:
                    out.append(f"{ind}del {', '.join(dead)}")
                    live.difference_update(dead)
            i += 1

    return block(list(range(len(paths))), 0, "    ", set())


class TreeGraph:
    """The paths of one entry. `str()` prints them as one tree; `.nodes` are the first path's."""

    def __init__(self, paths: list[Graph]):
        self.paths = paths
        self.nodes = paths[0].nodes
        self.namespace = paths[0].namespace
        self.symbol_bounds = getattr(paths[0], "symbol_bounds", None)

    @property
    def output_node(self):
        return self.paths[0].output_node

    def find(self, kind: str) -> list:
        return [n for p in self.paths for n in p.find(kind)]

    def inputs(self) -> list:
        return self.paths[0].inputs()

    def __str__(self) -> str:
        return "\n".join(ln[4:] for ln in _merge([_ir_statements(g, k) for k, g in enumerate(self.paths)],
                                                 code=False))

    def data_guards(self) -> int:
        return sum(1 for p in self.paths for n in p.nodes if is_data_guard(n))


def generate_tree(paths: list[Graph], side_exit, name: str = "forward") -> tuple[str, dict]:
    """`def name(L)` returning `(path index, flat outputs)`; raises CannotMerge."""
    em = _Emitter(paths[0])
    em.ns.update(paths[0].namespace)
    em.ns["_SideExit"] = side_exit
    used = set().union(*(g.free_symbols_used() for g in paths))
    switches = [ModeSwitches(g, em) for g in paths]
    stmts = [_code_statements(g, k, em, used, sw) for k, (g, sw) in enumerate(zip(paths, switches))]
    body = _merge(stmts, code=True)
    wrapped = ModeSwitches(paths[0], em)
    wrapped.grad_switched = any(sw.grad_switched for sw in switches)
    wrapped.mode_switched = any(sw.mode_switched for sw in switches)
    wrapped.exit_switched = any(sw.exit_switched for sw in switches)
    body = [b[4:] for b in body]  # _merge indents by one level
    body = wrapped.wrap(body)
    return f"def {name}(L):\n" + "\n".join("    " + b for b in body) + "\n", em.ns


def compile_tree(paths: list[Graph], side_exit, name: str = "forward"):
    src, ns = generate_tree(paths, side_exit, name)
    exec_source(src, "tree", ns)
    fn = ns[name]
    fn.source = src
    return fn


__all__ = ["CannotMerge", "TreeGraph", "compile_tree", "generate_tree", "is_data_guard", "SymExpr"]
