"""Python state changes against the calls of the compiled code that may raise when it runs.

The trace's changes to Python state (`LOG.append(n)`, `self.calls += 1`, `global step`) are written
after the graph has run (runtime/pystate.py's effects). A call in the graph may raise on what no
guard checks: a data-dependent index (`x[i.item()]` out of range), an id past an embedding's table,
an integer division by zero, a warning the caller's filter turns into an error, a runtime check.
Eager has then made the changes that came before that call, and not those after.

So while the trace runs, before each call that may raise, the state is compared with the state the
last such call saw. Where it changed, the graph gets a marker in front of the call,
`reached(k, <values>)`, which records at run time that the graph got that far, with the traced
values the state then held. When the graph raises, the state of the last marker it passed is written
(from the state before the call: nothing else was written yet), then the exception goes on. Before
the first marker, eager had changed nothing: nothing is written.

    LOG.append(x.shape[0])     # a change: the graph gets `reached(0, s0)` before the next call that may raise
    y = x[i.item()]            # may raise: eager leaves LOG == [n]; so does the compiled code

A call may raise unless it is one of the ops below that cannot fail on values (their shapes and dtypes
are guarded), with no data-dependent size in it. A trace that takes data-dependent branches (a trace
tree, runtime/speculation.py) and needs a marker is a graph break instead: its paths have no such
exit.
"""
from __future__ import annotations

import collections
import threading
import types

import torch

from ..guards import native
from ..ir.graph import Graph, TensorMeta, node_inputs, node_sym_exprs
from ..symbolic.symtypes import SymBase
from ..tracing.errors import GraphBreak
from ..tracing.meta.pointwise import ACTIVATIONS, BINARY, DUNDER_BINARY, DUNDER_INPLACE, UNARY
from ..tracing.checks import runtime_check
from ..tracing.names import target_name
from ..tracing.outputs import _ATOMS, Template, _attributes_are_state
from .pystate_containers import _contents, slot_names

# ops that cannot raise on values once their shapes, dtypes and devices are what the guards say
_SAFE = frozenset(UNARY + BINARY + DUNDER_BINARY + DUNDER_INPLACE + ACTIVATIONS + """
sum mean nansum nanmean prod all any std var std_mean var_mean norm vector_norm logsumexp cumsum cumprod logcumsumexp
softmax log_softmax _softmax _log_softmax count_nonzero sort argsort
matmul mm bmm addmm addmv addbmm baddbmm mv dot vdot outer ger einsum tensordot kron linear bilinear cross
conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d layer_norm rms_norm group_norm
scaled_dot_product_attention interpolate normalize cosine_similarity pairwise_distance mse_loss l1_loss
smooth_l1_loss huber_loss binary_cross_entropy_with_logits kl_div glu
max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d
adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d pixel_shuffle pixel_unshuffle
reshape flatten unflatten unsqueeze squeeze transpose t permute expand expand_as broadcast_to contiguous clone
detach movedim moveaxis swapaxes swapdims split chunk unbind repeat tile flip roll diagonal triu tril
cat concat concatenate stack hstack vstack where masked_fill clamp clip clamp_min clamp_max lerp addcmul addcdiv
to type type_as float double half bfloat16 int long bool short char byte cpu requires_grad retain_grad
zeros ones full empty zeros_like ones_like full_like empty_like rand randn rand_like randn_like new_zeros new_ones
new_full new_empty copy fill zero item tolist select __getitem__ __setitem__ size dim numel T mT real imag
""".split()) - {"bernoulli"}
# safe only with a floating or complex result: an integer one divides (by zero) or raises to a power
_INT_FAILS = frozenset("""div divide true_divide floor_divide remainder fmod pow float_power __floordiv__
__rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __truediv__ __rtruediv__ __div__ __itruediv__ __ifloordiv__
__imod__ __ipow__""".split())
_local = threading.local()  # .stack: a list of (marker, its values) per compiled call running with markers


def may_raise(node, env) -> bool:
    """Whether a recorded call may raise when the compiled code runs (on values no guard checks)."""
    full = target_name(node.target) if node.target is not None else ""
    if not (full.startswith(("torch.Tensor.", "torch.nn.functional.")) or full.count(".") == 1
            and full.startswith("torch.")):  # (not a custom op, a user's function, print, a warning, a check)
        return True
    name = full.rsplit(".", 1)[-1]
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    if base not in _SAFE:
        return True
    if base in _INT_FAILS and not (type(node.meta) is TensorMeta and (node.meta.dtype.is_floating_point
                                                                     or node.meta.dtype.is_complex)):
        return True
    if base in ("__getitem__", "__setitem__") and not _plain_index(node.args[1] if len(node.args) > 1 else None):
        return True  # an index tensor or list: its values are not checked by any guard
    return _data_dependent(node, env)


def _plain_index(index) -> bool:
    """Ints, slices, None and `...`: their bounds were checked against the sizes (a guard) while tracing."""
    if type(index) is tuple:
        return all(_plain_index(i) for i in index)
    return index is None or index is Ellipsis or isinstance(index, (int, slice, Graph.SymExpr))


def _data_dependent(node, env) -> bool:
    """A size or value of data in the call (`x[u0]`, a tensor of u0 rows): its checks happen at run time."""
    exprs = [e.expr for e in node_sym_exprs(node)]
    for m in [node.meta] + [n.meta for n in node_inputs(node)]:
        if type(m) is TensorMeta:
            exprs += [d for d in m.shape if not isinstance(d, int)]
    return any(env.is_unbacked(s) for e in exprs for s in getattr(e, "free_symbols", ()))


class _Reached:
    """A marker's call: the graph got this far, with these values (kept until the call ends)."""

    _codegen_name = "ds_reached"

    def __init__(self, k: int):
        self.k = k
        self.__qualname__ = self.__name__ = f"reached({k})"
        self.__module__ = "raise_order"

    def __call__(self, *values) -> None:
        stack = getattr(_local, "stack", None)
        if stack:
            stack[-1].append((self.k, values))


class RaiseOrder:
    """Markers for one trace (see the module's docstring): installed on its graph after the snapshot."""

    def __init__(self, state, graph: Graph, env):
        self.state, self.graph, self.env = state, graph, env
        # per marker: ((the marker whose values its specs read, effects)..., whether a module's dict is written)
        self.marks: list = []
        self.broken: GraphBreak | None = None  # why the markers cannot say what eager had changed
        self.view = StateView(state)
        self._marked = 0  # the view's version at the last marker (0: the snapshot's)
        self._born: dict = {}  # a data-dependent symbol -> the version when it was made
        self._first = None  # the user's line of the first call a marker stands before
        self._busy = False
        graph.add = self._add  # (an attribute of this graph only, deleted by `stop`)

    def stop(self) -> None:
        """The trace ended: no more looks (and nothing of the trace's state kept for them)."""
        self.graph.__dict__.pop("add", None)
        self.view, self._born = None, {}

    def _add(self, kind, *args, **kwargs):
        node = Graph.add(self.graph, kind, *args, **kwargs)
        if kind not in ("call", "symbol") or self._busy or self.broken is not None or self.view is None:
            return node
        self._busy = True
        try:
            if kind == "symbol":
                if self.env.is_unbacked(node.target):  # (a check on it may be emitted later: see _check_at)
                    self._born[node.target] = self.view.look()
            elif may_raise(node, self.env):
                self.view.look()
                if node.target is runtime_check:
                    self._check_at(node)
                elif self.view.version != self._marked:
                    self._mark(node)
        except Exception as e:  # noqa: BLE001 - the trace goes on; the call breaks at its end (check)
            self.broken = e if isinstance(e, GraphBreak) else GraphBreak(
                f"dynashape could not record the Python state before a call that may raise ({type(e).__name__}: "
                f"{e})", node.location, "The call runs eagerly.")
        finally:
            self._busy = False
        return node

    def _check_at(self, node) -> None:
        """A runtime check: emitted where the trace asked it (`ds.check`, a meta rule's), or later: the
        engine's own facts on data-dependent sizes (torch._check in torch's code) wait for the next check
        or the trace's end (tracer.runtime_assert: while those are emitted, fewer are counted emitted than
        recorded). Eager checked such a one at some point after its symbols were made: the state must be
        the same there and here."""
        if getattr(self.state.tracer, "_emitted_asserts", 0) != len(self.env.runtime_asserts):  # a late one
            expr = node.args[0].expr if node.args and hasattr(node.args[0], "expr") else None
            if any(self._born.get(s, 0) != self.view.version for s in getattr(expr, "free_symbols", ())):
                raise GraphBreak("the function changes Python state between a data-dependent value and a check on "
                                 "it (the compiled code could not tell which changes eager made before the check "
                                 "failed)", node.location, "What to do: change the state before the value is read "
                                 "(`.item()`), or outside the compiled function.")
        if self.view.version != self._marked:
            self._mark(node)

    def _mark(self, node) -> None:
        """`node` (the last one) may raise and the state changed since the last marker: a marker in front."""
        self.graph.nodes.pop()  # the marker (and what its values need) goes in front of the call
        k = len(self.marks)
        tmpl = Template(self.state.tracer, self.state.readers)
        self.marks.append(self.view.effects(tmpl, k))
        Graph.add(self.graph, "call", "reached", _Reached(k), tuple(tmpl.flat), None, None, node.location,
                  torch.is_grad_enabled())
        self.graph.nodes.append(node)
        self._marked = self.view.version
        self._first = self._first or node.location

    def check(self, tracer) -> None:
        """After the trace: a break where the markers cannot say what eager had changed."""
        self.stop()
        if self.broken is not None:
            raise self.broken
        if self.marks and tracer.data_guards:
            raise GraphBreak("the function changes Python state before a call that may raise, in a trace that "
                             "branches on data (its paths cannot write what eager had changed when one raises)",
                             self._first, "What to do: change the state after that call, or outside the compiled "
                             "function.")

    def runner(self, fn, finish):
        """fn(L) -> the output, writing the state of the last marker passed when the graph raises."""
        marks = self.marks

        def run(L):
            stack = _local.__dict__.setdefault("stack", [])
            stack.append([])
            try:
                flat = fn(L)
            except Exception:
                reached = stack.pop()
                if reached:  # eager's changes up to the call that raised
                    _write(marks[reached[-1][0]], dict(reached), L)
                raise
            stack.pop()
            return finish(flat, L)
        return run


def _write(mark, values: dict, L) -> None:
    """The state a marker saw, written with the values of the markers its effects read."""
    from .pystate import read_effects, write_effects
    groups, bump = mark
    if not all(j in values for j, _ in groups):
        return  # (a marker the graph did not pass: it is straight-line code, so none)
    memo: dict = {}
    try:
        write_effects([t for j, effects in groups for t in read_effects(effects, values[j], L, memo)], bump)
    except Exception:  # noqa: BLE001 - the program's own exception goes on, not one of writing its state
        pass


class StateView:
    """The contents of the state's containers as the trace changes them (runtime/pystate.py's snapshot
    is the first). `version` moves where a look finds them changed since the last one, or finds an
    object the trace made and a changed container holds (a new list in `self.cache`) changed in place.
    Only the containers that may have changed are read again: those without a version tag (lists,
    cells), and the dicts whose tag moved (guards/native.py)."""

    def __init__(self, state):
        self.state = state
        self.version = 0
        self.seen: list = []  # contents per container of state._snap (by index), as last read
        self.dirty: set = set()  # indices of the containers that differ from the snapshot
        self.volatile: dict = {}  # of those, the ones holding objects the trace made -> what they hold
        self._touched: set = set()  # indices of the containers changed since the last marker
        self._effect_of: dict = {}  # index -> (the marker whose values it reads, its effect)
        self._watch, self._tags = None, None  # the dicts' watcher and their tags at the last look
        # its class, taken before the trace: while it runs, the extension's module is walked like a user's
        self._watcher = type(native.watch(()))

    def look(self) -> int:
        snap = self.state._snap
        n = len(self.seen)
        self.seen += [entry[3] for entry in snap[n:]]  # (containers met since: as met)
        changed = False
        for i in self._maybe_changed(snap, n):
            kind, obj, _, first = snap[i]
            now = self._contents(kind, obj, first)
            if _same(now, self.seen[i]):
                continue
            changed, self.seen[i] = True, now
            self._touched.add(i)
            self.volatile.pop(i, None)
            if _same(now, first):
                self.dirty.discard(i)
            else:
                self.dirty.add(i)
                held = self._held_new(now, first)
                if held != ():
                    self.volatile[i] = held
        for i, held in self.volatile.items():  # the objects the trace made, changed in place since
            now = self._held_new(self.seen[i], snap[i][3])
            if now != held:
                changed, self.volatile[i] = True, now
                self._touched.add(i)
        if changed:
            self.version += 1
        return self.version

    def effects(self, tmpl, k: int) -> tuple:
        """What writes the state as last seen: ((marker, effects) groups, whether a module's dict is among
        the targets). A container unchanged since an earlier marker keeps that marker's effect."""
        state = self.state
        for i in self._touched:
            kind, obj, src, first = state._snap[i]
            effect = state.effect(tmpl, kind, obj, src, first, self.seen[i]) if i in self.dirty else None
            if effect is None:
                self._effect_of.pop(i, None)
            else:
                self._effect_of[i] = (k, effect, _module_target(kind, obj, src))
        self._touched.clear()
        groups: dict = {}
        for i in sorted(self._effect_of):
            j, effect, _ = self._effect_of[i]
            groups.setdefault(j, []).append(effect)
        return tuple(groups.items()), any(m for _, _, m in self._effect_of.values())

    def _maybe_changed(self, snap, n: int):
        """Indices of the containers to read again: all the first time (or when new ones were met),
        else the untagged ones and those whose dict's tag moved or whose object's dict was replaced."""
        if self._watch is None or n != len(snap):
            self._start_watch(snap)
            return range(len(snap))
        tags = self._snapped()
        if tags is None:
            return range(len(snap))
        old, self._tags = self._tags, tags
        idx = self._tagged
        out = [idx[j] for j in range(len(tags)) if tags[j] != old[j]] + self._untagged
        return out + [i for i, o, d in self._owners if vars(o) is not d]

    def _start_watch(self, snap) -> None:
        tagged = [i for i, (kind, obj, _, _) in enumerate(snap) if kind == "attrs" or kind == "dict"
                  and isinstance(obj, dict)]
        dicts = tuple(vars(snap[i][1]) if snap[i][0] == "attrs" else snap[i][1] for i in tagged)
        self._tagged = tagged
        self._untagged = sorted(set(range(len(snap))) - set(tagged))
        self._owners = [(i, snap[i][1], d) for i, d in zip(tagged, dicts) if snap[i][0] == "attrs"]
        self._watch = self._watcher(dicts) if self._watcher is native.Unwatched else self._watcher(dicts, (), ())
        self._tags = self._snapped()

    def _snapped(self):
        """The dicts' version tags now, or None without the extension."""
        raw = self._watch.snap()
        return None if raw is None else memoryview(raw).cast("Q").tolist()

    def _contents(self, kind, obj, first):
        """A container's contents now, with the user's objects where the trace's stand-ins sit, and what
        the snapshot had under the names the trace fills for itself (`ignored`)."""
        c = _contents(kind, obj)
        back = {id(twin): it for _, _, twin, it in self.state._swaps} if self.state._swaps else None
        if kind == "list":
            return [back.get(id(x), x) for x in c] if back else c
        if back:
            c = {k: back.get(id(x), x) for k, x in c.items()}
        ignored = self.state.ignored
        for k in [k for k in c if (id(obj), k) in ignored]:
            if k in first:
                c[k] = first[k]
            else:
                del c[k]
        return c

    def _held_new(self, now, first) -> tuple:
        """What the objects the trace made that a changed container holds hold now, as a look compares
        it (() where it holds none)."""
        readers = self.state.readers
        values = now if type(now) is list else [x for k, x in now.items() if first.get(k, _ABSENT) is not x]
        return tuple(_inside(x, readers, 0) for x in values if _made(x, readers))


def _made(x, readers) -> bool:
    """An object the trace made that a marker rebuilds from what it holds (a list, a dict, a set, an
    object of a Python class: tracing/outputs.py's specs), so a change in place is a change of state."""
    if id(x) in readers or isinstance(x, _ATOMS) or isinstance(x, (torch.Tensor, SymBase)):
        return False  # (a tensor changed in place is the same object when the marker's value is read)
    if type(x) in (tuple, frozenset, torch.Size):
        return any(_made(y, readers) for y in x)
    return isinstance(x, (list, dict, set, collections.deque)) or _attributes_are_state(type(x))


def _inside(x, readers, depth: int):
    """What a look compares of an object the trace made: the identities of what it holds, and of what
    the objects it made in turn hold; a fresh object (never equal) where that cannot be told."""
    if not _made(x, readers):
        return id(x)
    if depth > 4:
        return object()
    if isinstance(x, (list, tuple, set, frozenset, collections.deque)):
        items = list(x)
    elif isinstance(x, dict):
        items = [y for kv in x.items() for y in kv]
    else:
        attrs = dict(getattr(x, "__dict__", None) or {})
        for name in slot_names(type(x)):
            attrs[name] = getattr(x, name, _ABSENT)
        items = [y for kv in attrs.items() for y in kv]
    return id(x), type(x), tuple(_inside(y, readers, depth + 1) for y in items)


def _same(a, b) -> bool:
    """The same contents, object by object (as the effects compare them)."""
    if a is b:
        return True
    if type(a) is list:
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return a.keys() == b.keys() and all(x is b[k] for k, x in a.items())


def _module_target(kind, obj, src) -> bool:
    from .pystate import _module_target as module_target
    return module_target(kind, obj, src)


_ABSENT = object()
