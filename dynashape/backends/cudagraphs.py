"""CUDA graphs of compiled entries (`ds.config.cudagraphs`): launch overhead paid once per size bucket.

A graph replays fixed memory at fixed sizes, so an entry serving every size needs one graph per
size it sees ("exact"), or, in "buckets" mode, one per bucket: a dynamic size is rounded up to a
power of two (capped by the largest value its guards accept, e.g. `ds.mark_dynamic(x, 0, max=)`),
inputs are copied into static buffers of the bucket's size and outputs sliced back. Padding is
used only for a size that the graph provably keeps in separate rows: it is dim 0 of every tensor
that has it, and every op treats those rows independently (pointwise ops, matmuls and linear
layers on the left operand, norms and reductions over other dims, row-wise softmax, embeddings,
attention with the size as its batch). Anything else (a sum over the rows, a size used as a
number, a transpose moving the rows) keeps that size exact, and `why_exact` says why (explain
output). Graphs capture inference only; an entry autograd records runs as compiled.

Only the tensors the call passes (arguments and items of tuple/list/dict arguments) are copied into
static buffers; parameters, buffers and tensors held by objects (a StaticCache's keys and values) are
read where they live, so their addresses (and every number the graph read) are part of a graph's key,
and in-place writes to them are replayed into the same memory eager writes.

Each graph is captured at the second call of its bucket (the first one runs as compiled, warming
kernels up), its outputs are cloned after each replay (never the graph's own memory), and the
graphs' memory is bounded by `ds.config.cudagraph_pool_mb`: the least recently used are freed.
"""
from __future__ import annotations

import collections
import logging

import sympy
import torch

from ..ir.graph import TensorMeta, _sym_exprs_in
from ..runtime.config import config
from ..runtime.registry import ENTRY_WRAPPERS
from ..symbolic.sources import ItemSource, LocalSource
from ..tracing.aliasing import FRESH, is_inplace, written
from ..tracing.tree import leaves
from .fused import ops, triton_run

log = logging.getLogger("dynashape.cudagraphs")
counters = {"captures": 0, "replays": 0, "padded_replays": 0}  # in this process (the fuzzer reports them)
SIMULATE = [False]  # tests: CPU tensors take the graph path, a "replay" reruns the function on the static buffers
WARM_UP = [True]  # False (the fuzzer): a bucket is captured at its first call, so far more calls are replays

_MATMULS = {"matmul", "mm", "linear", "addmm", "bmm", "baddbmm"}
_ROW_SAFE = {"embedding", "scaled_dot_product_attention", "layer_norm", "rms_norm", "group_norm"} | _MATMULS
_SPLITS = {"split": (2, 0), "chunk": (2, 0), "tensor_split": (2, 0), "split_with_sizes": (2, 0),
           "unbind": (1, 0), "narrow": (1, None), "select": (1, None)}  # name -> (position, default) of dim
_DIMMED = ops.REDUCE | {"softmax", "log_softmax", "cumsum", "cat", "stack"}
_RANDOM = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli", "multinomial",
           "normal", "poisson", "randperm", "uniform_", "normal_", "bernoulli_", "exponential_", "random_"}
# ops that update running statistics in place when their flag (argument 5) is set, as in training mode
_LIVE: collections.OrderedDict = collections.OrderedDict()  # (graphs, key) -> bytes, least recent first


def _name(n) -> str:
    return ops.op_name(n.target) or getattr(n.target, "__name__", str(n.target))


def _has(e, s) -> bool:
    return not isinstance(e, int) and s in sympy.sympify(e).free_symbols


def row_blocker(graph, s) -> str | None:
    """Why padding symbol `s` (rows appended at dim 0) could change a real row; None when it cannot."""
    for n in graph.nodes:
        if n.kind == "symbol":
            of, how, index = n.args
            if n.target == s and not (how == "size" and index == 0 and of.kind == "input"):
                return f"{s} is read as {how} {index} of {of.name}, not as the rows of an input"
            continue
        if n.kind == "output":
            if any(_has(e.expr, s) for e in _sym_exprs_in(n.args)):
                return f"the function returns a number computed from {s}"
            continue
        if n.kind != "call":
            continue
        metas = [a.meta for a in list(n.args) + list(n.kwargs.values()) if ops.is_tensor(a)]
        metas += [m for m in (n.meta if isinstance(n.meta, tuple) else (n.meta,)) if isinstance(m, TensorMeta)]
        where = f"{_name(n)} at {n.location}" if n.location is not None else _name(n)
        for m in metas:
            if any(_has(d, s) for d in m.shape[1:]) or (m.shape and _has(m.shape[0], s) and m.shape[0] != s):
                return f"{where} has {s} in a dim other than its rows"
        if not any(m.shape and m.shape[0] == s for m in metas):
            if any(_has(e.expr, s) for e in _sym_exprs_in((n.args, n.kwargs))):
                return f"{where} uses {s} as a number"
            continue
        name = _name(n)
        fam = ops.family(n)
        # rows stay rows when both ends have them as dim 0 and no other dim holds s (checked above):
        # row-major, row i of the result is row i of the input (view(B, T, h, C // h) as well)
        if fam == "view" or name in ops.VIEW or name in ops.STRIDED:
            out = n.meta
            if not (isinstance(out, TensorMeta) and out.shape and out.shape[0] == s):
                return f"{where} moves the rows of {s}"
            continue
        if any(_has(e.expr, s) for e in _sym_exprs_in((n.args, n.kwargs))):
            return f"{where} uses {s} as a number"
        if fam == "pointwise" or name in ("contiguous", "clone", "detach") or (fam == "identity" and name != "dropout"):
            continue
        if name in _DIMMED:  # cat's and stack's tensors sit in a list: their dim counts in the result's rank
            ts = ops.tensor_args(n)
            rank = len(ts[0].meta.shape) if ts and name not in ("cat", "stack") else len(n.meta.shape)
            dims = ops.norm_dims(ops.arg(n, 1, "dim", None), rank)
            if ops.arg(n, 1, "dim", None) is None and name not in ("softmax", "log_softmax", "cumsum"):
                dims = None
            if dims is None or 0 in dims:
                return f"{where} reduces or joins over the rows of {s}"
            continue
        if name in _MATMULS:
            ts = ops.tensor_args(n)
            right = ts[-1] if name not in ("linear",) else ts[1]
            if name == "addmm":
                right = ts[2]
            if _has_any(right.meta.shape, s) and len(right.meta.shape) < 3:
                return f"{where} contracts over the rows of {s}"
            continue
        if name in _ROW_SAFE:
            continue
        if name in _SPLITS:  # pieces along another dim: each keeps every row (dim 0 checked above)
            at, default = _SPLITS[name]
            rank = len(ops.tensor_args(n)[0].meta.shape)
            dims = ops.norm_dims(ops.arg(n, at, "dim", default), rank)
            if dims is None or 0 in dims:
                return f"{where} splits the rows of {s}"
            continue
        if name == "getitem" and not ops.is_tensor(n.args[0]):  # a piece of a split's tuple (rows checked above)
            continue
        return f"{where}: not known to keep rows apart"
    return None


def _has_any(shape, s) -> bool:
    return any(_has(d, s) for d in shape)


def _aliased_inputs(v, seen=None) -> list:
    """The input nodes whose memory graph value `v` may share (none: computed into new memory). A
    call with several results (split, chunk, unbind: a tuple of views) is followed like a view:
    `x.chunk(1)[0]` is x's memory."""
    seen = set() if seen is None else seen
    if not hasattr(v, "kind") or id(v) in seen:
        return []
    meta = getattr(v, "meta", None)
    if not (isinstance(meta, TensorMeta) or (isinstance(meta, (tuple, list))
                                             and any(isinstance(m, TensorMeta) for m in leaves(meta)))):
        return []
    seen.add(id(v))
    if v.kind == "input":
        return [v]
    if v.kind != "call" or getattr(v.target, "__name__", "") in FRESH:
        return []
    return [i for a in leaves((v.args, v.kwargs)) for i in _aliased_inputs(a, seen)]


def _argument(src) -> bool:
    """A call argument, or an item of a tuple, list or dict argument (`L['kwargs']['cache_position']`)."""
    while isinstance(src, ItemSource):
        src = src.base
    return isinstance(src, LocalSource)


def _copied(n) -> bool:
    """An input copied into a static buffer before each replay: a tensor the call passes (an argument or an
    item of one). Every other tensor (a parameter, a buffer, a cache tensor held by an object argument) is
    read where it lives."""
    return _argument(n.target) and isinstance(n.meta, TensorMeta) and not n.args


def _put(Ls: dict, src, value) -> None:
    """Ls with the value at `src` replaced, rebuilding (shallow copies of) the containers on the way."""
    if isinstance(src, LocalSource):
        Ls[src.local] = value
        return
    parent = eval(src.base.name(), {"L": Ls})
    if type(parent) is dict:
        new = dict(parent)
        new[src.index] = value
    elif type(parent) in (list, tuple):
        new = list(parent)
        new[src.index] = value
        new = type(parent)(new)
    else:
        raise TypeError(f"{src.base.pretty()} is a {type(parent).__name__}")
    _put(Ls, src.base, new)


def _reader(graph, srcs):
    """L -> the values at `srcs`, read as the compiled code reads them."""
    return eval("lambda L: (" + "".join(f"{s.code()}, " for s in srcs) + ")", dict(graph.namespace))


def bucket(n: int, upper) -> int:
    if n == 0:  # no rows stays no rows: ops raise or decide at 0 elements where they do not at 1 (a
        return 0  # reshape's -1 is ambiguous there: padded to a row, the replay ran it, eager raises)
    b = 1
    while b < n:
        b *= 2
    if upper is not None and b > upper:
        b = max(n, int(upper))
    return b


class _Captured:
    def __init__(self, statics: dict, outs, graph, L):
        self.statics, self.outs, self.graph, self.L = statics, outs, graph, L
        # a region ran its torch calls in the capture while its Triton kernel compiled in the background:
        # the bucket is captured again, once, when the compiles are done
        self.provisional = False


class Graphs:
    """fn(L) -> flat values, run through CUDA graphs keyed by (bucketed) input sizes."""

    def __init__(self, fn, graph, guard_set, env, mode: str):
        self.fn, self.guard_set, self.mode = fn, guard_set, mode
        self.source = getattr(fn, "source", "")
        self.why_none = None  # why no graph is ever captured
        copied = [n for n in graph.inputs() if _copied(n)]
        self.copied = [n.target for n in copied]  # the tensors a replay copies into its static buffers
        self.read_copied = _reader(graph, self.copied)
        # everything else the graph reads: numbers the call passes, and what lives elsewhere (module
        # parameters and buffers, tensors held by object arguments such as a KV cache, numbers read from
        # attributes). A capture bakes in their values and addresses: each call reads them, and they are
        # part of its key
        ext = [n for n in graph.inputs() if not _copied(n)]
        self.ext_tensor = tuple(isinstance(n.meta, TensorMeta) for n in ext)
        self.read_ext = _reader(graph, [n.target for n in ext])
        self.written = []  # positions in ext of the tensors the graph changes in place (versions bumped)
        for n in graph.nodes:
            if n.kind != "call":
                continue
            name = getattr(n.target, "__name__", "")
            if is_inplace(n.target, n.kwargs, n.args):  # (running statistics and `inplace` flags by position too)
                changed = written(n.target, n.args, n.kwargs)
                hit = [i for w in leaves(changed) for i in _aliased_inputs(w)]
                if any(_copied(i) for i in hit):  # a replay would change the static copy, not the caller's tensor
                    self.why_none = f"{name} at {n.location} changes an argument in place"
                self.written += [k for k, e in enumerate(ext) if any(e is i for i in hit) and k not in self.written]
            elif name in _RANDOM or (name in ("dropout", "dropout1d", "dropout2d") and ops.arg(n, 2, "training", True)):
                self.why_none = f"{name} at {n.location} draws random numbers (a replay would not draw eager's)"
        out = graph.output_node
        for v in (out.args[0] if out else ()):
            if self.why_none is None and _aliased_inputs(v):  # the replay's output is a copy: eager's would
                # share the input's memory
                self.why_none = f"the output {v.name} may be a view of an input"
        if torch.is_grad_enabled() and any(isinstance(n.meta, TensorMeta) and n.meta.requires_grad
                                           for n in graph.inputs()):
            self.why_none = "autograd records this entry (graphs capture inference: call it under torch.no_grad())"
        for v in (out.args[0] if out else ()):  # made inside (torch.ones(..., requires_grad=True)): a replay's
            if self.why_none is None and isinstance(getattr(v, "meta", None), TensorMeta) and v.meta.requires_grad:
                self.why_none = f"the output {v.name} requires grad (autograd records inside the graph)"
        # `torch.set_grad_enabled(b)` called as a function outlives the call: the code sets it on return,
        # which a replay does not run
        self.exit_grad = graph.exit_grad if graph.entry_grad is not None and graph.exit_grad is not None \
            and graph.exit_grad != graph.entry_grad else None
        syms = sorted({s for n in graph.inputs() if isinstance(n.meta, TensorMeta) for d in n.meta.shape
                       if not isinstance(d, int) for s in sympy.sympify(d).free_symbols}, key=str)
        self.padded: dict = {}  # symbol -> its largest value (None: unbounded)
        self.why_exact: dict = {}  # symbol -> why it is not padded
        if mode == "buckets":
            lives = {s: n.target.pretty() for n in ext if isinstance(n.meta, TensorMeta) for d in n.meta.shape
                     if not isinstance(d, int) for s in sympy.sympify(d).free_symbols}
            for s in syms:
                why = f"it is a size of {lives[s]}, which is not copied (so not padded)" if s in lives \
                    else row_blocker(graph, s)
                if why is None:
                    vr = env.var_to_range.get(s)
                    up = getattr(vr, "upper", None)
                    self.padded[s] = int(up) if up is not None and up != sympy.oo and str(up) != "int_oo" else None
                else:
                    self.why_exact[s] = why
        # position in self.copied -> the padded symbol of its dim 0
        self.rows = {i: n.meta.shape[0] for i, n in enumerate(copied) if n.meta.shape and n.meta.shape[0] in self.padded}
        out = graph.output_node
        self.out_rows = [v.meta.shape[0] if hasattr(v, "meta") and isinstance(v.meta, TensorMeta) and v.meta.shape
                         and v.meta.shape[0] in self.padded else None for v in (out.args[0] if out else ())]
        self.graphs: collections.OrderedDict = collections.OrderedDict()
        self.seen: set = set()
        self.replays = 0
        self.exact_keys: set = set()  # buckets whose padded inputs the guards rejected: exact sizes there
        self.recaptured: set = set()  # buckets captured again once their kernels were compiled

    def __getattr__(self, name):  # a fused backend's regions, readiness...: the compiled function's
        if name in ("fn", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def cuda_graphs_report(self) -> list[str]:
        if self.why_none:
            return [f"CUDA graphs: none ({self.why_none})"]
        lines = [f"CUDA graphs ({self.mode}): {len(self.graphs)} captured, {self.replays} replays"]
        for s, why in self.why_exact.items():
            lines.append(f"  {s} stays exact: {why}")
        for s, up in self.padded.items():
            lines.append(f"  {s} rounded up to powers of two" + (f" (at most {up})" if up is not None else ""))
        return lines

    def __call__(self, L):
        if self.why_none is not None:
            return self.fn(L)
        ts = self._eligible(L)
        got = self._ext_key(L) if ts is not None else None
        if got is None:
            return self.fn(L)
        ext, vals = got
        grad0 = torch.is_grad_enabled()  # each run of fn starts here: the guards checked this mode
        written = [vals[k] for k in self.written]  # read once: the capture restores them, a replay bumps them
        sizes = {s: ts[i].shape[0] for i, s in self.rows.items()}
        bucketed = {s: bucket(n, self.padded[s]) for s, n in sizes.items()}
        key = tuple((tuple(t.shape), t.dtype) for t in ts) + ext
        bkey = tuple(((bucketed[self.rows[i]],) + tuple(t.shape[1:]) if i in self.rows else tuple(t.shape), t.dtype)
                     for i, t in enumerate(ts)) + ext
        if bkey in self.exact_keys:
            bkey = key
        cap = self.graphs.get(bkey)
        if cap is None:
            if bkey not in self.seen and WARM_UP[0]:  # the first call of a bucket runs as compiled: kernels warm up
                self.seen.add(bkey)
                return self.fn(L)
            cap = self._capture(L, ts, written, bkey, bucketed if bkey != key else {}, grad0)
            if cap is None:
                self.exact_keys.add(bkey)
                return self.fn(L)
        elif cap.provisional and not triton_run.compiling[0]:
            self.recaptured.add(bkey)
            del self.graphs[bkey]
            _LIVE.pop((id(self), bkey), None)
            cap = self._capture(L, ts, written, bkey, bucketed if bkey != key else {}, grad0)
            if cap is None:
                self.exact_keys.add(bkey)
                return self.fn(L)
        else:
            self.graphs.move_to_end(bkey)
            _LIVE.move_to_end((id(self), bkey))
        return self._replay(cap, ts, written, sizes, grad0)

    def _eligible(self, L):
        """The tensors the call passes, when a graph may serve it; else None."""
        try:
            ts = self.read_copied(L)
        except Exception:  # noqa: BLE001 - the compiled function reports it as eager would
            return None
        for t in ts:  # a copy would not require grad: even under no_grad, eager's views of it do (retain_grad)
            if not isinstance(t, torch.Tensor) or t.requires_grad:
                return None
            if not (t.is_cuda or (SIMULATE[0] and t.is_cpu)) or not t.is_contiguous():
                return None  # the static buffers are contiguous: another layout runs as compiled
        return ts

    def _ext_key(self, L):
        """(key, values): what a capture bakes in of the other values (each number, and each tensor's
        address, strides and device) and the values read; None when a call cannot replay (a tensor autograd
        would record, an unhashable value)."""
        try:
            vals = self.read_ext(L)
        except Exception:  # noqa: BLE001 - the compiled function reports it as eager would
            return None
        grad = torch.is_grad_enabled()
        key = []
        for v, is_t in zip(vals, self.ext_tensor):
            if is_t:
                if not isinstance(v, torch.Tensor) or (grad and v.requires_grad) \
                        or not (v.is_cuda or (SIMULATE[0] and v.is_cpu)):
                    return None
                key.append((v.data_ptr(), v.stride(), v.device))
            else:
                key.append((type(v), v))
        try:
            hash(tuple(key))
        except TypeError:
            return None
        return tuple(key), vals

    def _static(self, L, ts, bucketed):
        Ls = dict(L)
        statics = []
        for i, (src, t) in enumerate(zip(self.copied, ts)):
            shape = list(t.shape)
            if i in self.rows:
                shape[0] = bucketed.get(self.rows[i], shape[0])
            buf = torch.zeros(shape, dtype=t.dtype, device=t.device)
            _fill(buf, t)
            statics.append(buf)
            _put(Ls, src, buf)
        return Ls, statics

    def _capture(self, L, ts, written, bkey, bucketed, grad0):
        try:
            Ls, statics = self._static(L, ts, bucketed)
        except TypeError as e:  # an argument inside an object we do not rebuild
            self.why_none = f"a tensor the call passes is inside something other than a tuple, list or dict ({e})"
            return None
        if bucketed and not self.guard_set.fn(Ls):  # the bucket's size is outside what the graph was traced for
            return None
        # a warm-up run outside the capture (lazy initialization: cuBLAS handles, Triton's first launch)
        # really runs: what it writes in place where it lives (a cache's index_copy_, a buffer's add_)
        # is put back, so the replay that serves this call writes it once, as eager does
        before = [t.clone() for t in written]
        not_ready = triton_run.counters["not_ready"]
        if SIMULATE[0]:
            self.fn(Ls)
            cap = _Captured(statics, None, None, Ls)
        else:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn(Ls)
            torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for t, b in zip(written, before):
                t.copy_(b)
        torch._C._set_grad_enabled(grad0)  # the warm-up left the mode fn returns with
        if not SIMULATE[0]:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs = self.fn(Ls)
            cap = _Captured(statics, outs, g, Ls)
        cap.provisional = triton_run.counters["not_ready"] != not_ready and bkey not in self.recaptured
        self.graphs[bkey] = cap
        counters["captures"] += 1
        nbytes = sum(t.numel() * t.element_size() for t in statics)
        if cap.outs is not None:
            nbytes += sum(t.numel() * t.element_size() for t in cap.outs if isinstance(t, torch.Tensor))
        _LIVE[(id(self), bkey)] = (self, nbytes)
        _evict()
        return cap

    def _replay(self, cap, ts, written, sizes, grad0):
        self.replays += 1
        counters["replays"] += 1
        if any(t.dim() and buf.shape[0] != t.shape[0] for buf, t in zip(cap.statics, ts)):
            counters["padded_replays"] += 1
        for buf, t in zip(cap.statics, ts):
            _fill(buf, t)
        if cap.graph is None:  # SIMULATE
            torch._C._set_grad_enabled(grad0)
            outs = self.fn(cap.L)
        else:
            cap.graph.replay()
            outs = cap.outs
            if written:  # as eager's in-place ops do: autograd sees that these tensors changed
                torch.autograd.graph.increment_version(written)
            if self.exit_grad is not None:
                torch._C._set_grad_enabled(self.exit_grad)
        res = []
        for v, rows in zip(outs, self.out_rows):
            if isinstance(v, torch.Tensor):
                if rows is not None:  # the real rows of a padded output
                    v = v[:sizes[rows]]
                v = v.clone()  # never the graph's memory: the next replay overwrites it
            res.append(v)
        return tuple(res) if isinstance(outs, tuple) else res


def _fill(buf, t) -> None:
    """Copy `t` into its static buffer: its first rows (the rest is padding), or all of a 0-dim tensor."""
    (buf[:t.shape[0]] if t.dim() else buf).copy_(t)


def _evict() -> None:
    limit = config.cudagraph_pool_mb * 2 ** 20
    while _LIVE and sum(b for _, b in _LIVE.values()) > limit and len(_LIVE) > 1:
        (_, key), (owner, _) = _LIVE.popitem(last=False)
        owner.graphs.pop(key, None)


class ByMode:
    """An entry's function under the `ds.config.cudagraphs` of each call: entries are shared by every
    ds.compile of a function, so one compiled while graphs were off must capture once they are on, and
    turning them off must stop the replays. The Graphs of a mode are made at its first call."""

    def __init__(self, fn, graph, guard_set, env):
        self.fn, self.made = fn, (graph, guard_set, env)
        self.source = getattr(fn, "source", "")
        self.modes: dict = {}  # mode -> Graphs

    def __call__(self, L):
        mode = config.cudagraphs
        if mode == "off":
            return self.fn(L)
        g = self.modes.get(mode)
        if g is None:
            g = self.modes[mode] = self._graphs(mode)
        return g(L)

    def _graphs(self, mode: str):
        try:
            return Graphs(self.fn, *self.made, mode)
        except Exception as e:  # noqa: BLE001 - a gap in the analysis: this entry runs as compiled, and says why
            log.warning("dynashape: CUDA graphs are off for an entry: analysing its graph failed (%s: %s)",
                        type(e).__name__, e)
            return _NoGraphs(self.fn, f"analysing the graph failed: {type(e).__name__}: {e}")

    def __getattr__(self, name):  # the fused backend's regions, readiness...: the compiled function's
        if name in ("fn", "made", "modes", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __deepcopy__(self, memo):  # like a function: copying a compiled module shares its code
        return self

    def __reduce__(self):  # graphs are this process's: a pickled entry keeps the function
        return (_same, (self.fn,))

    def cuda_graphs_report(self) -> list[str]:
        if not self.modes:
            return [f"CUDA graphs: none yet (ds.config.cudagraphs is {config.cudagraphs!r} now)"]
        return [line for g in self.modes.values() for line in g.cuda_graphs_report()]


class _NoGraphs:
    def __init__(self, fn, why: str):
        self.fn, self.why = fn, why

    def __call__(self, L):
        return self.fn(L)

    def cuda_graphs_report(self) -> list[str]:
        return [f"CUDA graphs: none ({self.why})"]


def _same(fn):
    return fn


def wrap(fn, graph, guard_set, env):
    """fn, or where CUDA graphs may run, fn under the graphs of each call's ds.config.cudagraphs."""
    if not SIMULATE[0] and not torch.cuda.is_available():
        return fn
    return ByMode(fn, graph, guard_set, env)


ENTRY_WRAPPERS.append(wrap)
