"""The fused backend: regions of the graph become calls into compiled C++ kernels.

`FusedBackend()(graph)` returns at once a callable that runs the eager replay code; the
regions are lowered, compiled (or found in the disk cache) by a background thread and the
callable switches to the fused code when every kernel is loaded. With
`config.fused_sync = True` the switch happens before the first call returns.

The fused code is the eager backend's generated Python over a rewritten graph in which a
region is one call returning its outputs:

    fused_mul_1 = _fused_mul_10(x, w, b, s0, s1)  # model.py:3 'y = F.gelu(x * w + b) ...'
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import warnings

import sympy
import torch

from ...ir.codegen import _call, _Emitter, compile_graph, exec_source
from ...ir.graph import Graph, SymExpr, _nodes_in, _sym_exprs_in, map_args
from ...ir.printing import format_node
from ...ir.tree import CannotMerge, compile_tree, is_data_guard
from ...runtime.config import config
from ...tracing.aliasing import is_inplace
from ...runtime.registry import register_backend
from ...symbolic.printer import pyexpr
from . import build
from . import autodiff, gemm, matmul, ops
from . import triton_run
from .cppgen import CppGen, combine as _combine_cpp
from .tritongen import NoTriton, TritonGen
from .lower import Lowerer, Region, Unfusable
from .schedule import schedule

log = logging.getLogger("dynashape.fused")
_warned: set = set()


def _failed(tag: str, msg: str) -> None:
    """A gap in lowering or building (the code stays correct: eager code or torch calls run): counted,
    the first messages of each kind kept in build.failure_messages (the fuzzer prints them), warned once."""
    if build.worker.closing:  # the interpreter is exiting: a killed compiler is no failure to report
        return
    build.counters["failures"] += 1
    build.last_failure[0] = msg
    if tag not in _warned and len(build.failure_messages) < 50:
        build.failure_messages.append(msg)
    _warn_once(tag, msg)


def _warn_once(tag: str, msg: str) -> None:
    if tag not in _warned:
        _warned.add(tag)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


class Tiered:
    """fn(L): the eager replay until the fused code is ready, then the fused code."""

    forwards_to_fn = True  # calling it calls self.fn: a caller may read self.fn and call that (a call fewer)

    def __init__(self, eager_fn):
        self.eager = eager_fn
        self.fn = eager_fn
        self.source = eager_fn.source
        self.fused = False  # the kernels are in use
        self.regions: list = []  # the compiled regions (RegionRuntime)
        self.error: str | None = None  # why the fused code is not in use, when it failed
        self.ready = threading.Event()

    def __call__(self, L):
        return self.fn(L)

    def __deepcopy__(self, memo):  # like a function: copying a compiled module shares its code
        return self

    def __reduce__(self):  # pickling a compiled entry keeps the eager code (kernels are process-local)
        return (_identity, (self.eager,))

    def swap(self, fn, regions) -> None:
        self.regions = regions
        if fn is not None:
            self.fn, self.source, self.fused = fn, fn.source, True


@register_backend("fused")
class FusedBackend:
    def __call__(self, graph, name: str = "forward"):
        eager_fn = compile_graph(graph, name)
        if _nothing_to_fuse(graph):  # the usual MLP: no background job to wake (it would take the GIL)
            tiered = Tiered(eager_fn)
            tiered.ready.set()
            return tiered
        return self._tiered(eager_fn, lambda: build_fused(graph, name))

    def tree(self, paths: list, side_exit, name: str = "forward"):
        """The function of a trace tree (`ir.tree.compile_tree`), its regions fused the same way.
        Raises CannotMerge, as compile_tree does, when the paths do not merge."""
        return self._tiered(compile_tree(paths, side_exit, name), lambda: build_fused_tree(paths, side_exit, name))

    @staticmethod
    def _tiered(eager_fn, build_fn):
        tiered = Tiered(eager_fn)
        if build.compiler() is None and (config.triton == "off" or not triton_run.available()):
            _warn_once("nocxx", "dynashape: backend='fused' found no C++ compiler (g++/c++ or $CXX); "
                                "running the eager backend instead")
            tiered.error = "no C++ compiler"
            tiered.ready.set()
            return tiered

        def job():
            try:
                fn, regions = build_fn()
                tiered.swap(fn, regions)
            except Exception as e:  # noqa: BLE001 - the eager code stays correct; say why once
                tiered.error = f"{type(e).__name__}: {e}"
                if build.worker.closing:  # the interpreter is exiting: nobody runs it any more
                    return
                _failed(f"fail:{type(e).__name__}:{str(e)[:80]}",
                        f"dynashape: fused backend fell back to eager code for a graph: {tiered.error[:2000]}")
            finally:
                tiered.ready.set()

        if config.fused_sync:
            job()
        else:
            build.worker.submit(job)
        return tiered


class _Stored:
    """A kernel output written in a dtype of its own, not its graph node's (the generators read
    `.meta.dtype`): cross-entropy's per-row logsumexp, kept in float64 for the backward."""

    def __init__(self, node, dtype):
        self.node, self.meta = node, dataclasses.replace(node.meta, dtype=dtype)


def _identity(fn):
    return fn


def wait() -> None:
    """Block until every background compile queued so far has finished."""
    build.worker.wait_idle()


# ---------------------------------------------------------------------------- building
class RegionRuntime:
    """One compiled region: the kernel, the Python wrapper the graph calls, the torch replay."""

    def __init__(self, region: Region, idx: int, layout_matters: bool = False):
        self.region, self.idx = region, idx
        # the graph has a stride-sensitive call (view), or an output the user gets: the kernel's
        # contiguous outputs must be laid out as eager's, which holds for contiguous inputs and no
        # permuted members (`(x.t() * 2).relu()` returned is column-major in eager)
        self.layout_matters = layout_matters or any(_reachable(o) and len(o.meta.shape) >= 2 for o in region.outputs)
        if self.layout_matters and any(ops.op_name(n.target) in ("permute", "transpose", "t") for n in region.nodes):
            raise Unfusable("a permuted value in a region whose layout shows (a view after it, or an output the "
                            "user gets): eager's layout decides")
        lw = Lowerer(region)
        outs = []
        D, k = region.domain, region.k
        for o in region.outputs:
            s = tuple(o.meta.shape)
            if ops.family(o) == "xent":  # per-row losses; the wrapper reduces them
                outs.append((o, lw.value(o, lw.ir.vars[:1]), "row"))
            elif ops.col_reduce(o):  # its argument's elements, added into the thread's columns (or sum)
                outs.append((o, lw.value(o.args[0], lw.ir.vars), ops.col_reduce(o)))
            elif s == tuple(D) or not s:
                outs.append((o, lw.value(o, lw.ir.vars[len(lw.ir.vars) - len(s):] if s else ()), "full"))
            else:
                row_idx = lw.ir.vars[:k] + (0,) * (len(s) - k)
                outs.append((o, lw.value(o, row_idx), "row"))
        # cross-entropy's per-row logsumexp, written after the outputs for the generated backward
        self.n_aux = 0
        for o in region.outputs:
            if autodiff.saves_lse(region, o):
                outs.append((_Stored(o, torch.float64), lw.xent_lse(o), "row"))
                self.n_aux += 1
        self.spec = CppGen(region, lw.ir, outs).generate()
        self.formulas = {sym: expr for expr, sym in lw.float_exprs.items()}  # computed by the caller
        sym_set = set(self.spec.symbols)
        for o in region.outputs:
            for s in o.meta.shape:
                if not isinstance(s, int):
                    sym_set |= s.free_symbols
        for n in region.nodes:  # sizes the torch calls name (reshape(s1, s0)) though the kernel may not
            for e in _sym_exprs_in((n.args, n.kwargs)):
                sym_set |= e.expr.free_symbols
        # numbers eager converts with a check (masked_fill(m, n) of int32, n = 2**40): a value the result's
        # type does not hold runs the torch calls, which raise as eager does (or compute what eager does)
        self.fit_checks = list(dict.fromkeys(lw.fit_checks))
        for e, _ in self.fit_checks:
            sym_set |= sympy.sympify(e).free_symbols
        # amax/amin over an empty dim raise in eager; the kernel would return -inf: let torch raise
        self.nonempty = None
        if any(ops.op_name(n.target) in ("amax", "amin") for n in region.nodes):
            inner = sympy.Mul(*[sympy.sympify(d) for d in D[k:]])
            if inner == 0:
                raise Unfusable("amax/amin over an empty dim: eager raises")
            if inner.free_symbols:
                self.nonempty = inner
                sym_set |= inner.free_symbols
        # an empty domain: the kernel would still read a row's loop-invariant values (hoisted out of its
        # empty inner loop), from an empty input whose data pointer is null (train fuzz seed 25112704
        # segfaulted); torch's calls give eager's empty results and reductions over nothing
        size = sympy.Mul(*[sympy.sympify(d) for d in D])
        self.empty = None
        if size == 0:
            raise Unfusable("an empty domain")
        if size.free_symbols:
            self.empty = size
            sym_set |= size.free_symbols
        # var/std over n <= correction elements: eager's NaN comes with its UserWarning, so torch gives both
        self.few = None
        corrs = [autodiff.correction_of(n) for n in region.nodes if ops.op_name(n.target) in ("var", "std")]
        if corrs:
            inner = sympy.Mul(*[sympy.sympify(d) for d in D[k:]])
            c = max(corrs)
            if not inner.free_symbols:
                if inner <= c:
                    raise Unfusable("var/std over no more elements than the correction: eager warns")
            else:
                self.few = (inner, c)
                sym_set |= inner.free_symbols
        self.symbols = sorted(sym_set, key=lambda s: s.name)
        self.kernel = None
        self.wrapper = None
        self.torch_calls = self._torch_calls()  # the region as torch calls (its names checked now)
        try:  # the backward under autograd, as generated Python (compiled at the first backward)
            self.backward = autodiff.backward_source(region, self.name, self.symbols)
        except autodiff.NoRule as e:
            log.debug("region %s keeps its torch calls under autograd: no rule for %s", self.name, e)
            self.backward = None
        members = set(region.nodes)
        if self.backward is not None and any(_reachable(o) and any(u in members for u in o.users)
                                             for o in region.outputs):
            # `return y, y * y`: one backward node would send h's gradient past y, so a hook or
            # retain_grad() on y would not see it; autograd must record y's own node: torch calls
            log.debug("region %s keeps its torch calls under autograd: it returns a value its members read", self.name)
            self.backward = None
        self._backward_fn = None
        self._lowered = (lw.ir, outs)  # for the Triton kernel, printed at the first device call
        self._device_fn = None
        self.tkernel = None
        self.internal = frozenset()  # inputs no user can reach or change (plan() says which)
        self.exposed = frozenset()  # inputs the graph made that a user can reach (plan() says which)
        self.graph_mutates = True  # whether the graph may change a region input in place (plan() says)

    @property
    def backward_fn(self):
        """The region's backward, compiled by dynashape (dynamic sizes, the fused backend) on first use."""
        if self._backward_fn is None:
            from ...runtime.compiled_module import compile as ds_compile
            ns = dict(self.backward.namespace)
            exec_source(self.backward.source, "fused-backward", ns)
            fn = ds_compile(ns[f"{self.name}_backward"], dynamic=True, backend="fused")
            fn.rank_local = True  # a collective inside autograd's backward would interleave with DDP's
            fn.internal = True  # compiled at the first backward: the user's stance is not about it
            self._backward_fn = fn
        return self._backward_fn

    def kernel_call(self, *args, _save=None):
        """The region's kernel (autograd off: FusedRegion.forward); `_save` gets what it keeps for
        the backward (n_aux values, or none where it fell back to its torch calls)."""
        return self.wrapper(*args, _save=_save)

    def compile(self, cpp: bool = True) -> None:
        """Build the kernels; `cpp=False` (a graph on devices) builds only the Triton one, here (in the
        background) rather than at the first call, and no C++ kernel, which only CPU tensors would use."""
        if config.triton == "cpu":  # every kernel through Triton (the interpreter on CPU tensors): no C++
            self.kernel = None
            self.wrapper = self._device_fn = self._make_device_fn()
            return
        if build.compiler() is None or not cpp:  # Triton on devices only (a GPU box may have no C++ compiler)
            self.kernel = None
            self.wrapper = self._without_cpp
            if not cpp:
                self._device_fn = self._make_device_fn()
            return
        n_ptr = self.spec.n_in + self.spec.n_out
        n_int = len(self.spec.symbols) + sum(self.spec.stride_dims)
        floats = tuple(i for i, s in enumerate(self.spec.symbols) if not s.is_integer)  # zf0: passed as a double
        self.kernel = build.load(self.spec.source, n_ptr, n_int, floats)
        self.wrapper = self._wrapper()

    def on_device(self, *args, _save=None):
        """The region on tensors the C++ kernel cannot read: its Triton kernel where inputs are on one
        CUDA device (or on the CPU with config.triton == "cpu"), else its torch calls."""
        fn = self._device_fn
        if fn is None:
            fn = self._device_fn = self._make_device_fn()
        return fn(*args, _save=_save)

    def _make_device_fn(self):
        if config.triton == "off" or not triton_run.available():
            return self._torch_with_save
        try:
            self.tkernel = triton_run.TritonKernel(TritonGen(self.region, *self._lowered).generate())
        except NoTriton as e:
            log.debug("region %s runs torch calls on devices: %s", self.name, e)
            return self._torch_with_save
        except Exception as e:  # noqa: BLE001 - a gap in the Triton printer: this region runs torch calls there
            _failed(f"triton:{type(e).__name__}:{str(e)[:60]}",
                    f"dynashape: fused backend runs a region as torch calls on devices ({type(e).__name__}: {e})")
            return self._torch_with_save
        return self._wrapper(device=True)

    @property
    def _without_cpp(self):
        """The wrapper where no C++ compiler is: torch's calls on CPU tensors, on_device elsewhere."""
        calls, on_device = self.torch_calls, self.on_device

        def run(*args, _save=None):
            if all(a.is_cpu for a in args[:len(self.region.inputs)]):
                return calls(*args)
            return on_device(*args, _save=_save)
        run.__name__ = run.__qualname__ = run._codegen_name = self.name
        return run

    @property
    def _torch_with_save(self):
        """The torch calls as a wrapper (named as the region's kernel wrapper: trace-tree paths compare names)."""
        calls = self.torch_calls

        def run(*args, _save=None):
            return calls(*args)
        run.__name__ = run.__qualname__ = run._codegen_name = self.name
        return run

    def where(self) -> str:
        """The user's line of the region's first call ('model.py:12 ...'), for messages."""
        loc = next((n.location for n in self.region.nodes if n.location is not None), None)
        return str(loc) if loc is not None else "line unknown"

    @property
    def name(self) -> str:
        return "fused_" + "_".join(o.name for o in self.region.outputs[:2])

    def _wrapper(self, device: bool = False):
        """The function the rewritten graph calls: the C++ kernel on CPU tensors (on others it hands over
        to on_device), or with `device`, the Triton kernel on tensors of one CUDA device."""
        r = self.region
        ins = [f"a{i}" for i in range(len(r.inputs))]
        syms = [s.name for s in self.symbols]
        params = ", ".join(ins + syms)
        grad_ins = [a for a, t in zip(ins, r.inputs) if t.meta.dtype.is_floating_point]
        lines = [f"def {self.name}({params}, _save=None):"]
        torch_calls = f"return _rt.torch_calls({params})"
        if ins:  # a tensor with no storage (vmap's BatchedTensor, also in a backward under autograd.grad(...,
            # is_grads_batched=True); torch.func's wrappers): no kernel can read it, torch's calls take it as eager
            lines.append("    try:")
            lines.append(f"        _p = ({''.join(f'{a}.data_ptr(), ' for a in ins)})")
            lines.append("    except RuntimeError:")
            lines.append(f"        {torch_calls}")
        if not device:  # the kernel reads host memory: anything else goes to Triton or torch's calls
            lines.append(f"    if not ({' and '.join(f'{a}.is_cpu' for a in ins)}):")
            lines.append(f"        return _rt.on_device({params}, _save=_save)")
        elif config.triton == "cpu":
            lines.append(f"    if not ({' and '.join(f'{a}.is_cpu' for a in ins)}):")
            lines.append(f"        {torch_calls}")
        else:  # one CUDA device, as the kernel's pointers must be
            same = " and ".join([f"{ins[0]}.is_cuda"] + [f"{a}.device == {ins[0]}.device" for a in ins[1:]])
            lines.append(f"    if not ({same}):")
            lines.append(f"        {torch_calls}")
        if self.layout_matters:  # a non-contiguous input: eager's outputs may be too, and a later view raise
            lines.append(f"    if not ({' and '.join(f'{a}.is_contiguous()' for a in ins)}):")
            lines.append(f"        {torch_calls}")
        if self.empty is not None:  # nothing to compute, and an empty input's data pointer is null
            lines.append(f"    if ({pyexpr(self.empty)}) == 0:")
            lines.append(f"        {torch_calls}")
        for e, dt in self.fit_checks:
            lines.append(f"    if not _fits({pyexpr(e)}, {dt}):")
            lines.append(f"        {torch_calls}")
        if self.few is not None:
            lines.append(f"    if ({pyexpr(self.few[0])}) <= {self.few[1]!r}:")
            lines.append(f"        {torch_calls}")
        if self.nonempty is not None:
            lines.append(f"    if ({pyexpr(self.nonempty)}) == 0:")
            lines.append(f"        {torch_calls}")
        if grad_ins:  # autograd records: the region's Function (kernel forward, generated backward), or
            cond = " or ".join(f"{a}.requires_grad" for a in grad_ins)  # where a member has no rule, its torch calls
            lines.append(f"    if _grad_on() and ({cond}):")
            if self.backward is not None and config.fused_autograd:
                lines.append(f"        return _apply(_rt, {len(ins)}, {params})")
            else:
                lines.append(f"        {torch_calls}")
        # an input with no memory (an efficient zero tensor autograd made: data_ptr 0; an empty one is
        # routed above) would be read through a null pointer: torch's calls take it, as in eager
        if ins:
            lines.append("    if 0 in _p:")
            lines.append(f"        {torch_calls}")
        outs = []
        epilogue = []
        # on a device: column sums go to one row of float64 atomics; new tensors on the inputs' device
        lines.append("    _nt = 1" if device else "    _nt = _nthreads()")
        on = f", device={ins[0]}.device" if device else ""
        for j, o in enumerate(r.outputs):
            dims = list(o.meta.shape)
            kind = ops.col_reduce(o)
            if kind:  # per thread, its columns' partial sums (or its one sum), in double; added up after
                cols = (pyexpr(r.domain[-1]) if not isinstance(r.domain[-1], int) else str(r.domain[-1])) \
                    if kind == "col" else "1"
                lines.append(f"    out{j} = _zeros((_nt, {cols}), dtype=torch.float64{on})")
                outs.append(f"out{j}")
                total = f"out{j}.sum(0)" if kind == "col" else f"out{j}.sum()"
                counted = r.domain[:-1] if kind == "col" else r.domain
                shape = ", ".join(pyexpr(d) if not isinstance(d, int) else str(d) for d in o.meta.shape)
                # into a tensor of its own: a view (reshape of the sum) returned by the region's autograd
                # Function could not be changed in place by the user (torch forbids it for such views)
                epilogue.append(f"    out{j} = _fresh({total}, ({shape}{',' if shape else ''}), {o.meta.dtype})")
                if ops.op_name(o.target) == "mean":  # the sum in the result's type, then divided, as eager's
                    # mean is: a float32 sum past float32's range is +-inf, and so is its mean (not sum / n in
                    # float64, finite). One expression: `(s0 + 1) // 2 - 1 * s1` was a precedence bug
                    epilogue.append(f"    out{j}.div_({pyexpr(sympy.Mul(*[sympy.sympify(d) for d in counted]))})")
                continue
            if ops.family(o) == "xent":
                dims = [r.domain[0]]
                red, ii = ops.arg(o, 6, "reduction", "mean"), ops.arg(o, 4, "ignore_index", -100)
                # a target out of range: torch's calls give eager's error (a NaN or inf logit's NaN stands)
                epilogue.append(f"    if not _targets_in_range(out{j}):")
                epilogue.append(f"        return _rt.rejected({params})")
                if red == "sum":
                    epilogue.append(f"    out{j} = out{j}.sum()")
                elif red == "mean":
                    epilogue.append(f"    out{j} = out{j}.sum() / (a1 != {ii}).sum()")
            shape = ", ".join(pyexpr(s) if not isinstance(s, int) else str(s) for s in dims)
            shape = f"({shape},)" if len(dims) == 1 else f"({shape})"
            lines.append(f"    out{j} = _empty({shape}, dtype={o.meta.dtype}{on})")
            outs.append(f"out{j}")
        aux = [f"lse{j}" for j, o in enumerate(r.outputs) if autodiff.saves_lse(r, o)]
        for j, a in enumerate(aux):
            lines.append(f"    {a} = _empty(({pyexpr(r.domain[0]) if not isinstance(r.domain[0], int) else r.domain[0]},), "
                         f"dtype=torch.float64{on})")  # (lower.py's _lse64)
        if device:  # Triton takes the tensors
            ints = [s.name for s in self.tkernel.spec.symbols] + [f"*{a}.stride()" for a in ins]
            lines.append(f"    if not _kernel({', '.join(ins + outs + aux + ints)}):")  # compiling: torch's calls
            lines.append(f"        {torch_calls}")
        else:
            ptrs = ["*_p"] + [f"{o}.data_ptr()" for o in outs + aux]
            ints = [s.name for s in self.spec.symbols] + [f"*{a}.stride()" for a in ins]
            lines.append(f"    _kernel({', '.join(ptrs + ints + ['_nt'])})")
        lines += epilogue
        if aux:
            lines.append("    if _save is not None:")
            lines.append(f"        _save.extend(({', '.join(aux)},))")
        lines.append(f"    return {', '.join(outs)}" + ("," if len(outs) > 1 else ""))
        if len(outs) > 1:
            lines[-1] = f"    return ({', '.join(outs)})"
        src = "\n".join(lines) + "\n"
        ns = {"torch": torch, "_empty": torch.empty, "_zeros": torch.zeros, "_fresh": _fresh,
              "_kernel": self.tkernel if device else self.kernel, "_nthreads": torch.get_num_threads,
              "_grad_on": torch.is_grad_enabled, "_rt": self, "_apply": autodiff.FusedRegion.apply,
              "_targets_in_range": targets_in_range, "_fits": ops.fits}
        exec_source(src, "fused-region-triton" if device else "fused-region", ns)
        fn = ns[self.name]
        fn.source = src
        fn._codegen_name = self.name
        return fn

    def rejected(self, *args):
        """The torch calls where the kernel ran but its result cannot stand (a cross-entropy's target out
        of range, whose error torch gives); counted, as each costs both."""
        build.counters["rejected"] += 1
        return self.torch_calls(*args)

    def _torch_calls(self):
        """The region's torch calls as a function of the wrapper's arguments: what runs under autograd
        (eager's graph and gradients), on a device, and where eager raises or the kernel cannot give
        eager's result."""
        r = self.region
        em = _Emitter(Graph())
        ins = [f"_in{i}" for i in range(len(r.inputs))]
        lines = [f"def {self.name}_torch({', '.join(ins + [s.name for s in self.symbols])}):"]
        lines += [f"    {t.name} = {a}" for t, a in zip(r.inputs, ins)]
        lines += ["    " + _call(em, n) for n in r.nodes]
        outs = ", ".join(o.name for o in r.outputs)
        lines.append(f"    return ({outs},)" if len(r.outputs) > 1 else f"    return {outs}")
        src = "\n".join(lines) + "\n"
        exec_source(src, "fused-region-torch", em.ns)
        fn = em.ns[f"{self.name}_torch"]
        fn.source = src
        return fn


# calls whose result is new memory (never an alias of an argument); einsum only of two or more operands
# (`einsum("ij->ji", x)` returns a view of x)
_FRESH_CALLS = {"matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d", "einsum",
                "scaled_dot_product_attention", "embedding", "cat", "stack"}


def _made_here(n) -> bool:
    """Whether call `n` returns new memory, never (a view of) an argument's."""
    if n.kind != "call":
        return False
    name = ops.op_name(n.target)
    if name is not None:  # (a cast of the same dtype is "identity": eager returns the tensor itself)
        return ops.family(n) in ("pointwise", "reduce", "composite", "xent")
    fn = getattr(n.target, "__name__", None)
    if fn == "einsum":
        return len([a for a in _nodes_in(n.args[1:]) if ops.is_tensor(a)]) > 1
    return fn in _FRESH_CALLS


def _memory_roots(t) -> set | None:
    """The calls that made the memory `t` may share, found walking back through views and calls that may
    return (a view of) an argument; None where it may be the caller's (an input, a parameter, a constant)."""
    roots, seen, todo = set(), set(), [t]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.kind != "call":
            return None
        args = [a for a in _nodes_in((n.args, n.kwargs)) if a.kind != "symbol" and not isinstance(a.meta, SymExpr)]
        if _made_here(n) or not args:  # (a call that reads no value, torch.arange(n), makes new memory)
            roots.add(n)
        else:
            todo += args
    return roots


def _holding(inputs) -> tuple[frozenset, frozenset]:
    """(internal, exposed): the positions of a region's inputs whose memory the graph made and no user can
    reach (its backward may read them as they are), and of those whose memory the graph made and a user
    can reach, through a returned or stored value or a view of one (`return loss, logits.view(-1)`): the
    user may change them before the backward, which eager's saved results do not see, so the forward keeps
    a copy. The other inputs are the caller's tensors (or views of them): version-checked, as documented."""
    internal, exposed = set(), set()
    for j, t in enumerate(inputs):
        roots = _memory_roots(t)
        if roots is not None:
            (exposed if any(_reachable(r) for r in roots) else internal).add(j)
    return frozenset(internal), frozenset(exposed)


XENT_RANGE = ("cross_entropy: a target is outside [0, number of classes) and is not ignore_index (eager's "
              "nll_loss asserts on the device too)")
_NEG_INF = float("-inf")


def assert_targets_in_range(rows) -> None:
    """Raise, asynchronously on CUDA (no read-back), where a cross-entropy kernel's per-row losses hold
    -inf: the mark of a target out of range (lower.py's _xent; no loss is -inf)."""
    torch._assert_async(rows.ne(_NEG_INF).all(), XENT_RANGE)


def targets_in_range(rows) -> bool:
    """False where a target is out of range, for torch's calls to give eager's error; on CUDA eager's
    nll_loss asserts on the device, and so does this, with no read-back a call."""
    if rows.is_cuda:
        assert_targets_in_range(rows)
        return True
    return not bool((rows == _NEG_INF).any())


def _fresh(t, shape, dtype):
    """`t` reshaped, as a tensor of its own on `t`'s device (a column sum's result)."""
    out = torch.empty(shape, dtype=dtype, device=t.device)
    out.copy_(t.reshape(shape))
    return out


def _reachable(t) -> bool:
    """Whether a user can hold `t` (or a view of it) after the call: a hook, retain_grad() on it, an
    in-place change of it."""
    seen, todo = set(), [t]
    while todo:
        for u in todo.pop().users:
            if u.kind == "output":
                return True
            if u not in seen and u.kind == "call" and not _made_here(u):  # may return (a view of) its argument
                seen.add(u)
                todo.append(u)
    return False


def _layout_matters(graphs) -> bool:
    return any(ops.op_name(n.target) in ops.STRIDED for g in graphs for n in g.nodes if n.kind == "call")


def plan(graph: Graph, layout_matters: bool | None = None, used_elsewhere: frozenset = frozenset(),
         shared: dict | None = None) -> list[RegionRuntime]:
    """The regions of `graph` that lower. `shared`: regions already planned for another path of a
    trace tree, by their statements: the same region is the same runtime (one kernel, one name)."""
    rts = []
    if layout_matters is None:
        layout_matters = _layout_matters([graph])
    mutates = any(n.kind == "call" and is_inplace(n.target, n.kwargs) for n in graph.nodes)
    for i, r in enumerate(schedule(graph, used_elsewhere)):
        key = (tuple(format_node(n) for n in r.nodes), tuple(o.name for o in r.outputs),
               tuple(a.name for a in r.aliases))
        if shared is not None and key in shared:
            if shared[key] is not None:
                rts.append(_PathRegion(shared[key], r))
            continue
        if shared is not None:
            shared[key] = None
        try:
            rts.append(RegionRuntime(r, i, layout_matters))
            if shared is not None:
                shared[key] = rts[-1]
            elif not mutates:
                rts[-1].internal, rts[-1].exposed = _holding(r.inputs)
                rts[-1].graph_mutates = False
        except Unfusable as e:
            log.debug("region of %s stays torch calls: %s", [n.name for n in r.nodes], e)
        except Exception as e:  # noqa: BLE001 - a gap in lowering/codegen: this region stays torch calls
            _failed(f"lower:{type(e).__name__}:{str(e)[:60]}",
                    f"dynashape: fused backend left a region as torch calls ({type(e).__name__}: {e})")
    return rts


class _PathRegion:
    """A region of another path of a trace tree that runs `rt`'s kernel: `region` has this path's
    nodes (the same statements as rt.region's), for rewriting this path's graph."""

    def __init__(self, rt: RegionRuntime, region: Region):
        self.rt, self.region = rt, region

    def __getattr__(self, name):
        return getattr(self.__dict__["rt"], name)


def _compile_all(rts: list, cpp: bool = True) -> list:
    """The regions whose kernels built (found on disk or compiled); the others stay torch calls."""
    if cpp and config.triton != "cpu" and build.compiler() is not None:
        build.prebuild([rt.spec.source for rt in rts], _combine_cpp)  # one compiler run for all
    ok = []
    for rt in rts:
        try:
            rt.compile(cpp)
            ok.append(rt)
        except Exception as e:  # noqa: BLE001 - this region stays torch calls; the others still fuse
            _failed(f"cxx:{str(e)[:200]}", f"dynashape: fused backend could not build a kernel: {str(e)[:3000]}")
    return ok


def build_fused(graph: Graph, name: str = "forward"):
    """(fused forward, regions); (None, []) when nothing in the graph fuses."""
    cpu = _reads_cpu([graph])
    ok = _compile_all(plan(graph), cpu) if _may_fuse(graph) else []
    products = cpu and _products([graph])
    if not ok and not products:
        return None, []
    return compile_graph(rewrite(graph, ok, products), name), ok


def _may_fuse(g: Graph) -> bool:
    """Whether `schedule` could find a region: a cross-entropy (a region of its own), or a call of the
    loop model's ops reading another's result (every region of two or more calls has such a pair; a
    lone activation between matrix products, the usual MLP, has none)."""
    for n in g.nodes:
        if n.kind != "call":
            continue
        name = ops.op_name(n.target)
        if name is None:
            continue
        if name in ops.XENT or any(u.kind == "call" and ops.op_name(u.target) is not None
                                   for u in _nodes_in((n.args, n.kwargs))):
            return True
    return False


def _nothing_to_fuse(graph: Graph) -> bool:
    """Whether `build_fused` would find no region and no product for brgemm, decided here only where
    that needs no calibration of brgemm (which stays in the background)."""
    if _may_fuse(graph):
        return False
    if not _reads_cpu([graph]) or not any(matmul.replacement(n) is not None for n in graph.nodes):
        return True
    return gemm.decided() is False


def _reads_cpu(graphs) -> bool:
    """Whether the graphs may run on CPU tensors: only then are C++ kernels built and products run
    through brgemm. A graph whose inputs and captured tensors are all on a device (CUDA: guarded)
    runs its regions as Triton kernels; building C++ for it cost seconds in which every call ran
    the eager code (an H100: the pointwise chain at 175 us a call where its kernel takes 6).
    Tensors it makes on the CPU itself still run correctly: the wrapper checks where they are."""
    devices = set()
    for g in graphs:
        devices |= getattr(g, "devices", None) or {"cpu"}  # (a graph saved before graphs kept devices)
    return "cpu" in devices


def _products(graphs) -> bool:
    """Whether the graphs' matrix products run through brgemm (matmul.py); asks gemm only if they have one."""
    return any(matmul.replacement(n) is not None for g in graphs for n in g.nodes) and gemm.active()


def build_fused_tree(paths: list, side_exit, name: str = "forward"):
    """(fused tree function, regions) for the paths of a trace tree; (None, []) when nothing fuses.
    A region never spans a data guard, and one shared by several paths returns every value any
    path reads, so the paths' shared statements stay identical and still merge."""
    layout_matters = _layout_matters(paths)
    stmts = [{(n.name, format_node(n)) for n in g.nodes} for g in paths]
    shared: dict = {}
    per_path = []
    for k, g in enumerate(paths):
        elsewhere = frozenset(u.name for j, h in enumerate(paths) if j != k for n in h.nodes
                              if (n.name, format_node(n)) not in stmts[k] for u in _nodes_in((n.args, n.kwargs)))
        per_path.append(plan(g, layout_matters, elsewhere, shared))
    cpu = _reads_cpu(paths)
    ok = _compile_all([rt for rts in per_path for rt in rts if isinstance(rt, RegionRuntime)], cpu)
    products = cpu and _products(paths)
    if not ok and not products:
        return None, []
    built = {id(rt) for rt in ok}
    rewritten = [rewrite(g, [rt for rt in rts if id(getattr(rt, "rt", rt)) in built], products)
                 for g, rts in zip(paths, per_path)]
    try:
        return compile_tree(rewritten, side_exit, name), ok
    except CannotMerge:
        # paths that traced a shared statement with different symbols (y as f32[1, s1] on one path,
        # f32[1, s2] on another) plan different regions there, whose calls no longer merge (inference
        # fuzz seed 25112801): fuse only what follows each path's first data guard
        rewritten = [rewrite(g, [rt for rt in rts if id(getattr(rt, "rt", rt)) in built
                                 and _after_first_guard(g, rt.region)], products) for g, rts in zip(paths, per_path)]
        return compile_tree(rewritten, side_exit, name), ok


def _after_first_guard(g: Graph, region: Region) -> bool:
    first = next((i for i, n in enumerate(g.nodes) if is_data_guard(n)), len(g.nodes))
    pos = {n: i for i, n in enumerate(g.nodes)}
    return all(pos.get(n, -1) > first for n in region.nodes)


def rewrite(g: Graph, rts: list, products: bool = False) -> Graph:
    """The graph with each region replaced by one call of its wrapper (and item reads), and with
    `products`, each matrix product by its brgemm function (matmul.replacement)."""
    last = {rt.region.nodes[-1]: rt for rt in rts}
    member = {n for rt in rts for n in rt.region.nodes}
    g2 = g.empty_like()
    new: dict = {}

    def m(a):
        return new[a] if not isinstance(a, SymExpr) else a

    for n in g.nodes:
        if n in member:
            rt = last.get(n)
            if rt is None:
                continue
            r = rt.region
            args = [new[t] for t in r.inputs] + [SymExpr(rt.formulas[s], int if s.is_integer else float) if s in rt.formulas else SymExpr(s)
                                                 for s in rt.symbols]
            metas = tuple(o.meta for o in r.outputs)
            if len(r.outputs) == 1:
                o = r.outputs[0]
                new[o] = g2.call(rt.wrapper, args, {}, o.meta, o.location, n.grad_enabled, name_hint=o.name,
                                 modes=n.modes)
            else:
                call = g2.call(rt.wrapper, args, {}, metas, n.location, n.grad_enabled, name_hint=rt.name,
                               modes=n.modes)
                for j, o in enumerate(r.outputs):
                    new[o] = g2.call(torch.Tensor.__getitem__, (call, j), {}, o.meta, o.location, n.grad_enabled,
                                     name_hint=o.name, modes=n.modes)
            for a in r.aliases:  # views of the outputs, as eager makes them
                new[a] = g2.add(a.kind, a.name, a.target, map_args(a.args, m), map_args(a.kwargs, m), a.meta,
                                a.location, a.grad_enabled, a.modes)
            continue
        target = (matmul.replacement(n) if products else None) or n.target
        new[n] = g2.add(n.kind, n.name, target, map_args(n.args, m), map_args(n.kwargs, m), n.meta,
                        n.location, n.grad_enabled, n.modes)
    return g2
