"""`dynashape.export`: one whole-program trace with the dims the spec makes symbolic.

    ep = ds.export(model, (x,), dynamic_shapes={"x": {0: ds.Dim("batch", max=64)}})

Steps: bind the example inputs to the function's signature; resolve the
`dynamic_shapes` spec against them (spec.py); make one symbol per Dim (and per
AUTO/DYNAMIC dim); trace once with no graph breaks; compare what the trace
learned with the declared dims (solve.py); turn every remaining guard into an
input check of the program; lift parameters, buffers and captured tensors into
the program's own state; normalize the graph to the surviving symbols.
"""
from __future__ import annotations

import inspect
import itertools
import math
import warnings

import sympy
import torch

from ..ir.graph import Graph, SymExpr, TensorMeta, map_args
from ..symbolic.errors import ConstraintViolationError, DataDependentError
from ..symbolic.printer import pyexpr
from ..symbolic.shape_env import DimDynamic, ShapeEnv
from ..symbolic.sources import ItemSource, LocalSource
from ..symbolic.userloc import user_frames
from ..tracing.errors import GraphBreak, GraphBreakError
from ..tracing.global_state import parametrized
from ..tracing.pyenv import trace_environment
from ..tracing.meta.common import canonical_strides
from ..tracing.speculate import RealValues
from ..tracing.tracer import DimPolicy, Tracer
from ..tracing.tree import leaves
from . import outtypes
from .dims import Dim
from .program import (STATE, Check, ConstSpec, DictSpec, ExportedProgram, GlobalSpec, SeqSpec, SignatureSpec,
                      SymbolInfo, SymIntSpec, TensorSpec, flag_getter)
from .pystate import Snapshot
from .reads import AutogradReads, GradModeReads
from .solve import solve
from .spec import ArgPaths, Site, SpecError, create_symbols, int_policy, plan_roots, resolve_spec, source_of

_LEAVES = (bool, int, float, str, type(None), torch.dtype, torch.device)


def export(mod, args, kwargs=None, *, dynamic_shapes=None, record_branches: bool = False) -> ExportedProgram:
    """Trace `mod` (an nn.Module or a function) once on `args`/`kwargs` into an ExportedProgram.

    `dynamic_shapes` mirrors the inputs (a dict by argument name, or a tuple by
    position); per tensor a dict `{dim: spec}` or a tuple with one spec per dim. A
    spec is a `Dim` or derived dim (must stay dynamic over its range), `Dim.AUTO`
    (dynamic if the program allows), `Dim.DYNAMIC` (dynamic, error if specialized),
    `Dim.STATIC`, an int, or None (static). Unspecified dims are static.

    A branch on tensor data (`if x.sum() > 0:`) raises DataDependentError, since an
    exported program has no Python to fall back to; with `record_branches=True` the
    branch the example takes is recorded with a data guard, and an input that takes
    another path raises a RuntimeError that names the condition.

    >>> import torch, dynashape as ds
    >>> batch = ds.Dim("batch", max=64)
    >>> ep = ds.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    >>> ep(torch.randn(10, 4)).shape
    torch.Size([10, 2])
    """
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise TypeError(f"export takes the example positional arguments as a tuple, got {type(args).__name__}")
    kwargs = dict(kwargs or {})
    if isinstance(mod, torch.nn.Module):
        fn, name, module = mod.forward, type(mod).__name__, mod
    elif callable(mod):
        fn, name, module = mod, getattr(mod, "__name__", type(mod).__name__), None
    else:
        raise TypeError(f"export takes an nn.Module or a function, got {type(mod).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise TypeError(f"export needs a function whose signature it can read; {name} has none (wrap it: "
                        f"`def f(x, y): return {name}(x, y)`)") from None
    try:
        ba = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"the example inputs do not match {name}{sig}: {e}") from None
    bound = dict(ba.arguments)
    paths = ArgPaths(sig, args, kwargs)
    sites = resolve_spec(sig, bound, dynamic_shapes, paths)
    try:
        roots = plan_roots(sites)
    except SpecError as e:
        site = getattr(e, "mismatch", None)
        if site is None:
            raise
        raise SpecError(str(e) + _suggest_relation(fn, sig, ba, paths, sites, site)) from None
    ba.apply_defaults()
    L = _unalias(dict(ba.arguments), paths)
    job = _Trace(fn, sig, L, sites, roots, record_branches, passed=(set(bound), len(args)))
    job.run()
    checks, pins = solve(job.env, sites, roots)
    return job.program(checks, pins, bound, module, name)


def _unalias(L: dict, paths: ArgPaths) -> dict:
    """The same tensor passed twice is two inputs of the program (the caller may pass two)."""
    seen: set[int] = set()

    def walk(v, key):
        if isinstance(v, torch.Tensor):
            if id(v) in seen:
                return v.view_as(v)
            seen.add(id(v))
            return v
        if isinstance(v, (tuple, list)) and type(v) in (tuple, list):
            return type(v)(walk(x, key + (i,)) for i, x in enumerate(v))
        if isinstance(v, dict) and type(v) is dict:
            if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in v):
                raise TypeError(f"export: the dict at {paths.path(key)} needs str or int keys")
            return {k: walk(x, key + (k,)) for k, x in v.items()}
        if not isinstance(v, _LEAVES):
            raise TypeError(f"export takes tensors, ints, floats, bools, strings, None, dtypes, devices and "
                            f"tuples/lists/dicts of them; got a {type(v).__name__} at {paths.path(key)}")
        return v

    return {k: walk(v, (k,)) for k, v in L.items()}


class _Trace:
    """One trace of the program under the symbols of the spec."""

    def __init__(self, fn, sig, L, sites: list[Site], roots, record_branches: bool = False, passed=None):
        self.fn, self.sig, self.L, self.sites, self.roots = fn, sig, L, sites, roots
        self.passed = passed  # (names the example passed, how many positionally): the trace calls as the user did
        self.env = ShapeEnv(specialize_zero_one=True, duck_shape=False)
        self.graph = Graph()
        self.pins: dict = {}
        self._reps = None  # the substitutions `sub` applies, fixed once the trace is solved
        by_source = {s.source: s for s in sites}

        def policy(source, value, kind, tensor=None, dim=None) -> DimPolicy:
            s = by_source.get(source)
            if s is None:
                return DimPolicy(DimDynamic.STATIC)
            if s.dim is None:
                return int_policy(s)
            return DimPolicy(DimDynamic.DYNAMIC, value=s.value) if s.value is not None else DimPolicy()

        self.tracer = Tracer(self.env, self.graph, policy)
        if record_branches:  # the example's branches, decided on its data and guarded in the program
            self.tracer.real = RealValues(self.graph, L)
            self.env.speculate = self.tracer.speculate_expr
        create_symbols(self.env, sites, roots)

    def run(self) -> None:
        tracer = self.tracer
        grad = self.grad = torch.is_grad_enabled()
        module = getattr(self.fn, "__self__", None)
        module = module if isinstance(module, torch.nn.Module) else None
        if module is not None:
            parametrized(tracer, module)  # the program checks it runs outside parametrize.cached()
        # named now: the trace rebinds a buffer (`self.count += 1`) to its stand-in until restored
        self.state_names = _state_names(module)
        snap = Snapshot()
        snap.add(self.fn, type(module).__name__ if module is not None else "the function")
        self.autograd_reads = autograd = AutogradReads()
        grad_reads = GradModeReads()

        def traced(*args, **kwargs):  # the recorder of autograd reads sits above the tracer's mode
            with autograd:
                return self.fn(*args, **kwargs)

        try:
            fake = {name: tracer.wrap_input(v, LocalSource(name)) for name, v in self.L.items()}
            args, kwargs = self._call(fake)
            with grad_reads, trace_environment(export=True):  # is_exporting() is True, as under torch.export
                tracer.run(traced, args, kwargs, finish=self._finish)
            tracer.real = None
        except GraphBreak as e:
            raise GraphBreakError(f"export traces the whole program as one graph, and here it cannot: {e.reason}",
                                  e.location, e.advice) from None
        except DataDependentError as e:
            raise e.with_traceback(None) from None
        except Exception as e:  # the program itself failed on the example; eager would fail the same way
            raise e.with_traceback(user_frames(e.__traceback__)) from None
        finally:
            torch._C._set_grad_enabled(grad)
            changed = snap.changed()
            snap.restore()  # nothing of the trace stays in the user's objects
        self.grad_read_at = grad_reads.where if grad_reads.read else self._grad_switched()
        self.graph.entry_grad = grad  # the code starts from the mode it was traced in: with no read of it,
        # no node switches it and the program runs under the caller's mode; with one, the mode is checked
        if changed:
            warnings.warn(f"export: the traced code changed {', '.join(changed[:4])}"
                          f"{' and more' if len(changed) > 4 else ''}; the exported program does not make such "
                          f"changes (it returns the outputs and updates its own buffers in place), and they were "
                          f"undone", stacklevel=3)
        for s in self.sites:  # int inputs got their symbols in the trace
            if s.dim is None:
                s.expr = next((sym for sym, info in self.env.var_info.items() if s.source in info.sources), None)

    def _grad_switched(self) -> str | None:
        """Where the trace switched grad mode without reading it (`torch._C._set_grad_enabled(False)`): the
        program depends on the mode it starts from then too."""
        for n in self.graph.nodes:
            if n.kind == "call" and n.grad_enabled is not self.grad:
                return str(n.location) if n.location is not None else "a call in the graph"
        if self.graph.exit_grad is not None and self.graph.exit_grad is not self.grad:
            return "the end of the function"
        return None

    def _global_spec(self) -> GlobalSpec:
        """The grad mode (where the trace read it, or read autograd state), the default dtype and the
        flags the trace read: what the program checks of the caller's global state."""
        at = self.grad_read_at or self.autograd_reads.where
        flags = {}
        for text, (_, value) in self.tracer.flag_reads.items():
            if flag_getter(text) is None:
                raise RuntimeError(f"export: the program reads {text}, which an exported program cannot check "
                                   f"when it runs; read it outside the exported function and pass the value in")
            flags[text] = value
        return GlobalSpec(torch.get_default_dtype(), self.grad if at is not None else None, at, flags)

    def _finish(self, out):
        self.out_types = outtypes.skeleton(out)  # namedtuples, ModelOutput: rebuilt around each call's values
        return self.tracer.to_ir(out)

    # ------------------------------------------------------------ the program
    def _call(self, fake: dict):
        """The trace's call, shaped as the example's: what it passed positionally stays positional,
        its keywords stay keywords, and defaults are left to the function (a wrapper such as
        transformers' that fills an argument from the config by keyword would otherwise get it
        twice)."""
        if self.passed is None:
            fba = inspect.BoundArguments(self.sig, fake)
            return fba.args, fba.kwargs
        names, n_pos = self.passed
        args, kwargs = [], {}
        for p in self.sig.parameters.values():
            v = fake[p.name]
            if p.name not in names:
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and any(isinstance(x, torch.Tensor) for x in leaves(v)):
                    kwargs[p.name] = v  # a tensor default is an input of the program: the trace reads it as one
                continue
            if p.kind is p.VAR_POSITIONAL:
                args.extend(v)
            elif p.kind is p.VAR_KEYWORD:
                kwargs.update(v)
            elif p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and len(args) < n_pos):
                args.append(v)
            else:
                kwargs[p.name] = v
        return tuple(args), kwargs

    def program(self, checks, pins: dict, bound: dict, module, name: str) -> ExportedProgram:
        env = self.env
        self.pins.update({s: sympy.Integer(v) for s, v in pins.items()})
        self._reps = None
        self._site_at = {(s.key, s.dim): s for s in self.sites}
        state = self._lift_state(module)
        self._normalize()
        self.graph.lint()
        inputs = {k: self._input_spec(v, (k,)) for k, v in self.L.items()}
        symbols = self._symbols(inputs)
        asserts = []
        for ra in env.runtime_asserts:
            expr = self.sub(ra.expr)
            if expr is sympy.true or not expr.free_symbols or not expr.free_symbols <= set(symbols):
                continue  # data-dependent asserts are checked by the graph itself, not on the inputs
            text = ra.message or pyexpr(expr, lambda s: env.sources_of(s)[0].name())
            asserts.append(Check(expr, text, ra.location, "assert"))
        guards = [Check(self.sub(c.expr), c.text, c.location) for c in checks]
        all_checks = asserts + [c for c in guards if c.expr is not sympy.true]  # the user's own words first
        params = [(p.name, int(p.kind), p.default is not p.empty, None if p.default is p.empty else p.default)
                  for p in self.sig.parameters.values()]
        dyn = _resolved_spec({k: inputs[k] for k in bound}, symbols, all_checks)
        return ExportedProgram(graph=self.graph, signature=SignatureSpec(params), inputs=inputs, symbols=symbols,
                               checks=all_checks, state=state, dynamic_shapes=dyn, name=name,
                               data_ranges=self._data_ranges(), out_types=getattr(self, "out_types", None),
                               global_spec=self._global_spec())

    def _data_ranges(self) -> dict:
        """The bounds of the data-dependent values the graph reads (`nonzero`'s count in [0, numel]),
        listed by range_constraints as torch.export does; checked by the graph, not on the inputs."""
        env, out = self.env, {}
        for n in self.graph.nodes:
            if n.kind == "symbol" and env.is_unbacked(n.target) and n.target.is_integer:  # floats: no range listed
                vr = env.var_to_range.get(n.target)
                if vr is not None:
                    out[str(n.target)] = (-math.inf if vr.lo.is_infinite else int(vr.lo),
                                          math.inf if vr.hi.is_infinite else int(vr.hi))
        return out

    @property
    def reps(self) -> dict:
        """What `sub` replaces: input symbols the trace tied to others or fixed, and pinned AUTO
        symbols. Data-dependent symbols stay: the graph computes them and checks their facts."""
        if self._reps is None:
            env = self.env
            self._reps = {k: v for k, v in env.replacements.items() if not env.is_unbacked(k)}
            self._reps.update(self.pins)
        return self._reps

    def sub(self, expr):
        """An expression over the symbols that survive."""
        reps = self.reps
        if reps and not expr.free_symbols.isdisjoint(reps):
            expr = expr.xreplace(reps)
        return expr

    def _lift_state(self, module) -> dict:
        """Tensors the trace captured become the program's state, named like the module's (by the
        names they had before the trace)."""
        names = self.state_names if module is not None else {}
        state: dict[str, torch.Tensor] = {}
        k = itertools.count()
        for node in self.graph.nodes:
            if node.kind != "const" or not isinstance(node.target, torch.Tensor):
                continue
            t = node.target
            name = names.get(id(t))
            while name is None or name in state:
                name = f"_tensor_constant{next(k)}"
            with torch.no_grad():
                copy = t.detach().clone()
            if isinstance(t, torch.nn.Parameter):
                copy = torch.nn.Parameter(copy, t.requires_grad)
            elif t.requires_grad:  # a captured tensor that requires grad (a global weight): the outputs do too
                copy.requires_grad_(True)
            state[name] = copy
            node.kind, node.target, node.args = "input", ItemSource(LocalSource(STATE), name), ()
            prefix = "p" if isinstance(t, torch.nn.Parameter) else "b" if id(t) in names else "c"
            node.name = self.graph._fresh(f"{prefix}_{name}")  # like torch.export: p_ params, b_ buffers
        return state

    def _normalize(self) -> None:
        """Write every expression over the surviving symbols; drop the bindings of replaced ones."""
        def sub(a):
            if isinstance(a, SymExpr):
                e = self.sub(a.expr)
                if e.is_Number:
                    return a.pytype(e)
                return SymExpr(e, a.pytype)
            return a

        def meta(m):
            if isinstance(m, TensorMeta):
                return TensorMeta(tuple(_num(self.sub(d)) if not isinstance(d, int) else d for d in m.shape),
                                  m.dtype, m.requires_grad)
            if isinstance(m, SymExpr):
                return SymExpr(self.sub(m.expr), m.pytype)
            if isinstance(m, (list, tuple)):
                return type(m)(meta(x) for x in m)
            if isinstance(m, dict):
                return {k: meta(v) for k, v in m.items()}
            return m

        for n in list(self.graph.nodes):
            if n.kind == "symbol" and n.target in self.reps:
                self.graph.nodes.remove(n)
                n.args[0].users.remove(n)
                continue
            n.args = map_args(n.args, sub) if n.kind != "symbol" else n.args
            n.kwargs = map_args(n.kwargs, sub)
            n.meta = meta(n.meta)

    def _input_spec(self, v, key):
        sites = self._site_at
        if isinstance(v, torch.Tensor):
            dims = []
            for i, size in enumerate(v.shape):
                s = sites.get((key, i))
                dims.append(_num(self.sub(s.expr)) if s is not None and s.expr is not None else int(size))
            tracer = self.tracer
            facts = {attr: value for (src, attr), value in tracer.input_facts.items() if src == source_of(key)}
            return TensorSpec(v.dtype, tuple(dims), _strides(v, dims) if tracer.strides_observed else None,
                              v.storage_offset() if tracer.offsets_observed else None,
                              v.requires_grad if self.autograd_reads.where is not None else None, facts or None)
        if isinstance(v, (tuple, list)):
            return SeqSpec(type(v), [self._input_spec(x, key + (i,)) for i, x in enumerate(v)])
        if isinstance(v, dict):
            return DictSpec({k: self._input_spec(x, key + (k,)) for k, x in v.items()})
        s = sites.get((key, None))
        if s is not None and s.expr is not None:
            e = _num(self.sub(s.expr))
            return ConstSpec(e) if isinstance(e, int) else SymIntSpec(e)
        return ConstSpec(v)

    def _symbols(self, inputs) -> dict:
        env = self.env
        free: dict = {}
        for spec in inputs.values():
            for e in _exprs(spec):
                for s in sorted(e.free_symbols, key=lambda s: (len(str(s)), str(s))):  # s2 before s10
                    free.setdefault(s, None)
        names = {r.symbol: r.name for r in self.roots.values()}
        out = {}
        for s in free:
            vr = env.var_to_range[s]
            lo = None if vr.lo.is_infinite else int(vr.lo)
            hi = None if vr.hi.is_infinite else int(vr.hi)
            kind = "size" if s.is_nonnegative else "int"
            out[s] = SymbolInfo(lo, hi, kind, names.get(s))
        return out


def _state_names(module) -> dict[int, str]:
    """id(parameter or buffer) -> its name in the module."""
    names: dict[int, str] = {}
    if module is not None:
        for n, t in itertools.chain(module.named_parameters(remove_duplicate=False),
                                    module.named_buffers(remove_duplicate=False)):
            names.setdefault(id(t), n)
    return names


def _strides(t: torch.Tensor, dims: list):
    """The strides the trace assumed for an input, as the program checks them: "canonical" for
    torch.empty's layout; for a dense layout in another dim order (a transposed example) each stride
    as the product of the sizes of the dims inside it, which is what the trace computed; otherwise
    the example's own (the trace specialized the sizes of a layout that is not dense)."""
    example = tuple(t.stride())
    if t.is_contiguous() and example == canonical_strides(tuple(t.shape)):
        return "canonical"
    order = sorted(range(t.dim()), key=lambda i: example[i])
    out, concrete = [0] * t.dim(), [0] * t.dim()
    acc, acc_n = sympy.Integer(1), 1
    for i in order:
        out[i], concrete[i] = acc, acc_n
        acc, acc_n = acc * dims[i], acc_n * t.shape[i]
    if tuple(concrete) == example:
        return tuple(_num(e) for e in out)
    return example


def _num(e):
    return int(e) if isinstance(e, sympy.Basic) and e.is_Integer else e


def _exprs(spec):
    if isinstance(spec, TensorSpec):
        yield from (d for d in spec.dims if not isinstance(d, int))
    elif isinstance(spec, SymIntSpec):
        yield spec.expr
    elif isinstance(spec, SeqSpec):
        for x in spec.items:
            yield from _exprs(x)
    elif isinstance(spec, DictSpec):
        for x in spec.items.values():
            yield from _exprs(x)


def _resolved_spec(inputs: dict, symbols: dict, checks) -> dict:
    """The spec the program ended with: None for static dims, a Dim (or derived dim) for each
    surviving symbol, Dim.AUTO where only a guard (no range or relation) describes it."""
    guarded = set().union(*(c.expr.free_symbols for c in checks)) if checks else set()
    dims: dict = {}

    def dim_of(sym):
        if sym not in dims:
            info = symbols[sym]
            if sym in guarded or info.kind == "int":
                dims[sym] = (Dim.AUTO if sym in guarded else Dim.DYNAMIC)(min=info.lo, max=info.hi)
            else:
                dims[sym] = Dim(info.dim or str(sym), min=info.lo if (info.lo or 0) > 2 else None, max=info.hi)
        return dims[sym]

    def one(e):
        if isinstance(e, int):
            return None
        if e.is_Symbol:
            return dim_of(e)
        free = e.free_symbols
        if len(free) == 1:
            (s,) = free
            poly = sympy.Poly(e, s) if e.is_polynomial(s) else None
            if poly is not None and poly.degree() == 1:
                a, b = poly.all_coeffs()
                d = dim_of(s)
                if a.is_Integer and b.is_Integer and a >= 1 and isinstance(d, Dim):
                    return d * int(a) + int(b)
        return Dim.AUTO

    def walk(spec):
        if isinstance(spec, TensorSpec):
            return tuple(one(d) for d in spec.dims)
        if isinstance(spec, SymIntSpec):
            return one(spec.expr)
        if isinstance(spec, SeqSpec):
            return spec.type(walk(x) for x in spec.items)
        if isinstance(spec, DictSpec):
            return {k: walk(x) for k, x in spec.items.items()}
        return None

    return {k: walk(v) for k, v in inputs.items()}


def _suggest_relation(fn, sig, ba, paths, sites, site) -> str:
    """For a derived dim the example does not fit: trace with an independent Dim in its place
    and report the relation the program needs, if that reveals one."""
    fresh = Dim(f"_{site.spec_path.replace('dynamic_shapes', 'd')}".translate(str.maketrans("[]'\" ", "_____")))
    trial = [Site(s.key, s.dim, s.size, fresh if s is site else s.spec, s.spec_path, s.arg_path) for s in sites]
    try:
        roots = plan_roots(trial)
        ba2 = inspect.BoundArguments(sig, ba.arguments.copy())
        ba2.apply_defaults()
        job = _Trace(fn, sig, _unalias(dict(ba2.arguments), paths), trial, roots,
                     passed=(set(ba.arguments), len(ba.args)))
        job.run()
        solve(job.env, trial, roots)
    except ConstraintViolationError as e:
        for v in e.violations:
            if v.kind == "relation" and fresh.name in v.names and v.suggestions and \
                    not v.suggestions[0].startswith("#"):
                rhs = v.suggestions[0].split(" = ", 1)[1]
                return f"\nSuggested fixes:\n  use {rhs} for {site.spec_path} (the program needs {site.arg_path} == {rhs})"
    except Exception:
        pass
    return ""


__all__ = ["export"]
