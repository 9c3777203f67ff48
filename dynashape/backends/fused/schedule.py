"""Scheduling: which graph calls run together in one kernel.

Walking the graph in order, a call the loop model understands joins the region of its
producers (merging several producer regions when they agree) if

  * the loop domains agree: one domain `D` and one set of inner (reduced) dims per region;
    pointwise values are full-size (`D`), row-size (`D` with the reduced dims 1 or dropped)
    or smaller broadcast operands used only inside;
  * no write (tracing/writes.py: an in-place op, `out=`, `inplace=True`...) lies between its
    members: a region reads its inputs where it runs, at its last member;
  * no call outside the region reads a member before the region's last member (so emitting
    the region there keeps every other call in its original order: RNG draws stay put).

Cost model: a region is kept only if it saves memory traffic (two or more computing calls:
at least one intermediate never reaches memory) and has a row dimension to parallelise;
a lone softmax or layer_norm stays the library call. A sum or mean over every dim but the
last (`(g * x).sum(0)`, a bias's gradient) joins a region as a column output: each thread
accumulates its rows into its own columns (in double), the wrapper adds the threads' columns;
one over everything (a loss's `.mean()`) likewise into one sum per thread. Other reductions
over leading dims stay torch calls. `F.cross_entropy` is a region of
its own (one pass over the logits instead of log_softmax's write and re-read).
"""
from __future__ import annotations

import sympy

from ...ir.graph import Graph, Node, _nodes_in
from ...ir.tree import is_data_guard
from ...tracing.writes import writes
from . import ops
from .lower import Region


def _is_barrier(n: Node) -> bool:
    """A call that writes a tensor (tracing/writes.py: in-place ops, `out=`, `inplace=True`, running
    statistics...), or a data guard: a region never spans a branch of a trace tree, so the
    statements the paths share fuse the same way on every path."""
    if n.kind != "call":
        return False
    return is_data_guard(n) or writes(n.target, n.args, n.kwargs)


def _autocast(n: Node) -> bool:
    return n.modes is not None and any(on for on, _ in n.modes[1])


def _one(s) -> bool:
    return isinstance(s, int) and s == 1


def analyze(members: list) -> tuple | None:
    """(domain, n_inner) of a candidate region, or None when its members disagree."""
    D, n_inner = None, None
    inside = set(members)
    cols = [m for m in members if ops.col_reduce(m)]
    if any(u in inside for m in cols for u in m.users):
        return None  # a column sum is known only after the last row: nothing in the region reads it
    for m in members:
        fam = ops.family(m)
        if m in cols:
            continue
        if fam in ("reduce", "composite"):
            got = ops.reduce_dims(m)
            if got is None:
                return None
            x, dims, _ = got
            rank = len(x.meta.shape)
            if tuple(dims) != tuple(range(rank - len(dims), rank)) or len(dims) == rank:
                return None  # not trailing dims, or no rows left to parallelise
            shape = tuple(x.meta.shape)
            if D is not None and (shape != D or n_inner != len(dims)):
                return None
            D, n_inner = shape, len(dims)
    if D is None:  # pointwise only: the largest shape, its last dim inner
        shapes = [tuple(m.meta.shape) for m in members if ops.family(m) == "pointwise"]
        if not shapes:
            return None
        D = max(shapes, key=len)
        for s in shapes:
            if not _broadcasts(s, D):
                return None
        if any(tuple(m.args[0].meta.shape) != D for m in cols):
            return None
        return (D, 1) if D else ((1,), 1)
    if any(tuple(m.args[0].meta.shape) != D or (ops.col_reduce(m) == "col" and n_inner != 1) for m in cols):
        return None  # a column sum adds up the rows of the last pass: one inner dim, the domain's shape
    k = len(D) - n_inner
    rows = (D[:k] + (1,) * n_inner, D[:k])
    for m in members:
        if ops.family(m) == "pointwise":
            s = tuple(m.meta.shape)
            if s != D and s not in rows and not _broadcasts(s, D):
                return None
    return D, n_inner


def _broadcasts(s: tuple, D: tuple) -> bool:
    if len(s) > len(D):
        return False
    tail = D[len(D) - len(s):] if s else ()
    return all(_one(a) or a == b for a, b in zip(s, tail))


def _is_alias(m: Node) -> bool:
    fam = ops.family(m)
    return fam == "view" or (fam == "identity" and ops.op_name(m.target) != "clone")


def schedule(g: Graph, used_elsewhere: frozenset = frozenset()) -> list[Region]:
    """The regions of `g`. `used_elsewhere`: names of values that other paths of a trace tree
    read, so a region must return them even when this path does not."""
    pos = {n: i for i, n in enumerate(g.nodes)}
    unread = _unread(g, used_elsewhere)
    epoch, ep = 0, {}
    region_of: dict = {}  # node -> region id
    members: dict = {}  # region id -> [nodes]
    next_id = 0
    for n in g.nodes:
        if _is_barrier(n):
            epoch += 1
        ep[n] = epoch
        fam = ops.family(n) if n.kind == "call" else None
        if fam is None or n in unread:
            continue
        if fam == "xent":  # a region of its own; its scalar result feeds nothing fused
            members[next_id] = [n]
            next_id += 1
            continue
        cands = []
        for u in ops.tensor_args(n):
            r = region_of.get(u)
            if r is not None and r not in cands:
                cands.append(r)
        options = ([cands] if len(cands) > 1 else []) + [[c] for c in cands]
        for opt in options:
            nodes = sorted([m for c in opt for m in members[c]] + [n], key=pos.__getitem__)
            if _ok(nodes, n, pos, ep):
                rid = opt[0]
                for c in opt[1:]:
                    del members[c]
                members[rid] = nodes
                for m in nodes:
                    region_of[m] = rid
                break
        else:
            members[next_id] = [n]
            region_of[n] = next_id
            next_id += 1
    bound = {n.target for n in g.nodes if n.kind == "symbol"}
    out = []
    for rid, nodes in members.items():
        r = finalize(nodes, bound, used_elsewhere)
        if r is not None:
            out.append(r)
    return out


def _unread(g: Graph, used_elsewhere: frozenset) -> set:
    """Calls whose results nothing reads (`v3 = v2 * v2` never used). They stay torch calls, as in
    eager: under autograd their backward never runs, so what eager saves for it (v2, version-checked)
    is checked by nobody; as a region member it became the region's to keep, and an in-place change
    of v2 later failed the region's backward where eager's succeeds (train fuzz seed 25112909)."""
    outputs = set(_nodes_in(g.output_node.args)) if g.output_node is not None else set()
    unread: set = set()
    for n in reversed(g.nodes):
        if n.kind == "call" and n not in outputs and n.name not in used_elsewhere and not _is_barrier(n) \
                and all(u in unread for u in n.users):
            unread.add(n)
    return unread


def _ok(nodes: list, last: Node, pos: dict, ep: dict) -> bool:
    if len({ep[m] for m in nodes}) != 1 or len({m.grad_enabled for m in nodes}) != 1 \
            or len({m.modes for m in nodes}) != 1 or any(_autocast(m) for m in nodes):
        return False  # one grad mode and inference mode; autocast's casts are not lowered
    if analyze(nodes) is None:
        return False
    inside = set(nodes)
    for m in nodes:
        for u in m.users:
            if u not in inside and pos[u] < pos[last]:
                return False
    return True


def finalize(nodes: list, bound: set, used_elsewhere: frozenset = frozenset()) -> Region | None:
    """The region of these members, or None when the cost model or the loop model says no."""
    if len(nodes) == 1 and ops.family(nodes[0]) == "xent":
        x, t = nodes[0].args[0], ops.arg(nodes[0], 1, "target")
        if not (sympy.sympify(x.meta.shape[0]).free_symbols | sympy.sympify(x.meta.shape[1]).free_symbols) <= bound:
            return None
        return Region(nodes, tuple(x.meta.shape), 1, [x, t], [nodes[0]])
    computing = [m for m in nodes if ops.family(m) in ("pointwise", "reduce", "composite")]
    if len(computing) < 2:  # the cost model first: a lone activation between products is the usual case
        return None
    got = analyze(nodes)
    if got is None:
        return None
    D, n_inner = got
    inside = set(nodes)
    used_outside = [m for m in nodes if m.name in used_elsewhere or any(u not in inside for u in m.users)]
    if not used_outside:
        return None
    # a view/identity used outside is re-run as a torch call on what it views (the region's output
    # or an input): eager returns an alias there, so must we
    aliases = [m for m in used_outside if _is_alias(m)]
    outputs = [m for m in used_outside if not _is_alias(m)]
    todo = list(aliases)
    while todo:
        for u in ops.tensor_args(todo.pop()):
            if u in inside and _is_alias(u) and u not in aliases:
                aliases.append(u)
                todo.append(u)
            elif u in inside and not _is_alias(u) and u not in outputs:
                outputs.append(u)
    order = {m: i for i, m in enumerate(nodes)}
    outputs.sort(key=order.__getitem__)
    aliases.sort(key=order.__getitem__)
    if not outputs:
        return None
    k = len(D) - n_inner
    reduced = any(ops.family(m) in ("reduce", "composite") for m in nodes)
    for m in outputs:
        s = tuple(m.meta.shape)
        if ops.col_reduce(m):
            continue
        if not (s == D or (not s and D == (1,)) or (reduced and s in (D[:k] + (1,) * n_inner, D[:k]))):
            return None
    inputs = []
    for m in nodes:
        for u in ops.tensor_args(m):
            if u not in inside and u not in inputs:
                inputs.append(u)
    syms = set()
    for t in inputs + outputs + [*nodes]:
        for s in t.meta.shape:
            syms |= sympy.sympify(s).free_symbols
    if not syms <= bound:
        return None
    return Region(nodes, D, n_inner, inputs, outputs, aliases)
