"""ExportedProgram: one graph, its input contract, and its own state.

Calling it checks the inputs first (structure, dtypes, ranks, static sizes,
the sizes that share a symbol or are derived from one, the symbols' ranges,
and the guards no range expresses), then runs the generated code:

    Expected input at args[1].shape[0] to be equal to 6, but got 5
    Expected input at args[0].shape[0] to be <= 12, but got 14
    Expected input at args[0].shape[0] = 9 to be of the form 2*dimx + 1, where dimx is an integer

Parameters, buffers and captured tensors are the program's state (`state_dict`),
passed to the generated code at each call as `L['<state>']`.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import sympy
import torch

from ..ir.codegen import compile_graph
from ..tracing.speculate import SideExit
from ..ir.graph import Graph
from ..symbolic.printer import pyexpr
from ..symbolic.userloc import Location
from .outtypes import rebuild
from .spec import ArgPaths

STATE = "<state>"  # the argument name under which the program reads its state (not an identifier)


# ---------------------------------------------------------------------------- the input contract
@dataclass
class TensorSpec:
    dtype: torch.dtype
    dims: tuple  # per dim: an int (static) or a sympy expression of the program's symbols
    contiguous: bool | None = None  # checked when the program read strides or contiguity


@dataclass
class SymIntSpec:
    expr: sympy.Expr  # an int input made symbolic


@dataclass
class ConstSpec:
    value: object  # the program specialized on this value: the caller must pass it again


@dataclass
class SeqSpec:
    type: type  # tuple or list
    items: list


@dataclass
class DictSpec:
    items: dict


@dataclass
class SymbolInfo:
    lo: int | None  # None: unbounded
    hi: int | None
    kind: str = "size"  # "size" | "int"
    dim: str | None = None  # the user's Dim name, for messages


@dataclass
class Check:
    """A condition on the inputs checked before each call (a guard, or a runtime assert)."""

    expr: sympy.Basic
    text: str
    location: Location | None = None
    kind: str = "guard"  # "guard" | "assert"


@dataclass
class SignatureSpec:
    params: list  # (name, inspect kind as int, has_default, default)

    def signature(self) -> inspect.Signature:
        out = []
        for name, kind, has_default, default in self.params:
            p = inspect.Parameter(name, inspect._ParameterKind(kind),
                                  default=default if has_default else inspect.Parameter.empty)
            out.append(p)
        return inspect.Signature(out)


def input_error(msg: str) -> RuntimeError:
    return RuntimeError(msg)


# ---------------------------------------------------------------------------- the program
class ExportedProgram:
    """A whole-program trace with symbolic dims; call it like the original.

    >>> import torch, dynashape as ds
    >>> ep = ds.export(lambda x: x * 2, (torch.ones(3, 4),), dynamic_shapes=({0: ds.Dim("n")},))
    >>> ep(torch.ones(5, 4)).shape, ep.range_constraints
    (torch.Size([5, 4]), {'s0': (2, inf)})
    """

    def __init__(self, *, graph: Graph, signature: SignatureSpec, inputs: dict, symbols: dict,
                 checks: list, state: dict, dynamic_shapes=None, name: str = "forward",
                 data_ranges: dict | None = None, out_types=None):
        self.graph = graph
        self.signature_spec = signature
        self.signature = signature.signature()
        self.inputs = inputs  # argument name -> TensorSpec | SymIntSpec | ConstSpec | SeqSpec | DictSpec
        self.symbols = symbols  # sympy.Symbol -> SymbolInfo
        self.checks = checks
        self.state_dict = state  # name -> Tensor (nn.Parameter for parameters)
        self.dynamic_shapes = dynamic_shapes
        self.name = name
        self.data_ranges = dict(data_ranges or {})  # unbacked symbol name -> (min, max): bounds of data
        self.out_types = out_types  # outtypes.skeleton of what the module returned: None when all plain
        self._fn = compile_graph(graph)
        self._by_name = {str(s): s for s in symbols}
        self._check_fns = [_compile_condition(c.expr) for c in checks]
        self._plans: dict = {}
        self._positional = tuple(p[0] for p in signature.params if p[1] in (0, 1))  # POSITIONAL_*

    # ------------------------------------------------------------ views
    @property
    def range_constraints(self) -> dict[str, tuple]:
        """Symbol name -> (min, max) of the sizes the program accepts, then of the data-dependent
        values it computes (`u0` of a nonzero: [0, numel]); max is math.inf when unbounded."""
        out = {str(s): (-math.inf if i.lo is None else i.lo, math.inf if i.hi is None else i.hi)
               for s, i in self.symbols.items()}
        out.update(self.data_ranges)
        return out

    @property
    def code(self) -> str:
        return self._fn.source

    def module(self) -> torch.nn.Module:
        """An nn.Module whose forward runs this program with the module's parameters and buffers."""
        return ExportedModule(self)

    def __call__(self, *args, **kwargs):
        return self._run(args, kwargs, self.state_dict)

    def __repr__(self) -> str:
        params = ", ".join(p[0] for p in self.signature_spec.params)
        ranges = ", ".join(f"{k}: [{lo}, {hi}]" for k, (lo, hi) in self.range_constraints.items()) or "none"
        lines = [f"ExportedProgram {self.name}({params}):", *("    " + ln for ln in str(self.graph).splitlines()),
                 f"Range constraints: {ranges}"]
        if self.checks:
            lines.append("Input checks: " + "; ".join(c.text for c in self.checks))
        return "\n".join(lines)

    __str__ = __repr__

    def _plan(self, expr):
        """How to check a size given as `expr`, computed once: (symbol names, affine, value_fn) where
        affine is (name, a, rest_fn) when expr == a*name + rest with a nonzero integer a."""
        plan = self._plans.get(expr)
        if plan is None:
            names = tuple(sorted(s.name for s in expr.free_symbols))
            affine = None
            for s in expr.free_symbols:
                poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
                if poly is not None and poly.degree() == 1 and poly.all_coeffs()[0].is_Integer:
                    a = int(poly.all_coeffs()[0])
                    affine = (s.name, a, _compile_value(expr - a * s))
                    break
            plan = self._plans[expr] = (names, affine, _compile_value(expr))
        return plan

    # ------------------------------------------------------------ running
    def _run(self, args, kwargs, state):
        if not kwargs and len(args) == len(self._positional) == len(self.signature_spec.params):
            L = dict(zip(self._positional, args))  # the common case, without inspect's binding
        else:
            try:
                ba = self.signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"the exported program takes {self.signature}: {e}") from None
            ba.apply_defaults()
            L = dict(ba.arguments)
        self.validate(L, lambda: ArgPaths(self.signature, args, kwargs))
        L[STATE] = state
        try:
            out = self._fn(L)
            return out if self.out_types is None else rebuild(out, self.out_types)
        except SideExit as x:  # exported with record_branches=True, and this input takes another path
            raise RuntimeError(f"this input takes a path the exported program did not record: {x.reason()}. "
                               f"Export with an example that takes this path, or express the branch with "
                               f"torch.where so both sides are in the graph.") from None

    def validate(self, L: dict, paths) -> dict:
        """Check the bound arguments against the contract; returns the symbols' values.
        `paths()` gives the ArgPaths that spell inputs in messages (made only for a message)."""
        v = _Validator(self, paths)
        for name, spec in self.inputs.items():
            v.walk(spec, L.get(name), (name,))
        v.finish()
        return v.values


def _compile_value(expr):
    """`fn(values) -> int` for an integer expression over symbols (values: name -> int)."""
    if expr.is_Integer:
        v = int(expr)
        return lambda V: v
    text = pyexpr(expr, lambda s: f"V[{s.name!r}]")
    return eval(compile(f"lambda V: int({text})", "<dynashape-export-size>", "eval"), {"math": math})


def _compile_condition(expr):
    """`fn(values) -> bool` for a condition over symbols; values maps symbol names to ints."""
    text = pyexpr(expr, lambda s: f"V[{s.name!r}]")
    fn = eval(compile(f"lambda V: bool({text})", "<dynashape-export-check>", "eval"), {"math": math})
    return fn


class _Where:
    """An input's path (`args[1][0]`), spelled only when a message needs it."""

    __slots__ = ("validator", "key", "suffix")

    def __init__(self, validator, key, suffix=""):
        self.validator, self.key, self.suffix = validator, key, suffix

    def __str__(self) -> str:
        return self.validator.paths.path(self.key) + self.suffix

    def __format__(self, spec) -> str:
        return format(str(self), spec)

    def shape(self, i) -> "_Where":
        return _Where(self.validator, self.key, f"{self.suffix}.shape[{i}]")


class _Validator:
    def __init__(self, ep: ExportedProgram, make_paths):
        self.ep = ep
        self._make_paths = make_paths
        self._paths = None
        self.values: dict[str, int] = {}  # symbol name -> value
        self.where: dict[str, _Where] = {}  # symbol name -> the input size it was read from
        self.deferred: list[tuple] = []

    @property
    def paths(self) -> ArgPaths:
        if self._paths is None:
            self._paths = self._make_paths()
        return self._paths

    def walk(self, spec, value, key):
        where = _Where(self, key)
        if isinstance(spec, TensorSpec):
            if not isinstance(value, torch.Tensor):
                raise input_error(f"Expected input at {where} to be a tensor, but got {type(value).__name__}")
            if value.dtype != spec.dtype:
                raise input_error(f"Expected input at {where}.dtype to be {spec.dtype}, but got {value.dtype}")
            if value.dim() != len(spec.dims):
                raise input_error(f"Unexpected number of dimensions in input at {where}.shape: expected "
                                  f"{len(spec.dims)}, but got {value.dim()}")
            for i, d in enumerate(spec.dims):
                self.dim(d, int(value.shape[i]), where.shape(i))
            if spec.contiguous is not None and value.is_contiguous() != spec.contiguous:
                want = "contiguous" if spec.contiguous else "non-contiguous"
                raise input_error(f"Expected input at {where} to be {want} like the example (the program reads "
                                  f"its strides), but got {'a non-' if spec.contiguous else 'a '}contiguous tensor")
        elif isinstance(spec, SymIntSpec):
            if not isinstance(value, int) or isinstance(value, bool):
                raise input_error(f"Expected input at {where} to be an int, but got {type(value).__name__}")
            self.dim(spec.expr, value, where)
        elif isinstance(spec, ConstSpec):
            want = spec.value
            same = value is want if want is None or isinstance(want, bool) else (
                type(value) is type(want) and value == want)
            if not same:
                raise input_error(f"Expected input at {where} to be equal to {want!r}, but got {value!r}")
        elif isinstance(spec, SeqSpec):
            if type(value) is not spec.type or len(value) != len(spec.items):
                got = f"{type(value).__name__}" + (f" of {len(value)} items" if isinstance(value, (tuple, list))
                                                   else "")
                raise input_error(f"Expected input at {where} to be a {spec.type.__name__} of "
                                  f"{len(spec.items)} items, but got {got}")
            for i, (s, x) in enumerate(zip(spec.items, value)):
                self.walk(s, x, key + (i,))
        elif isinstance(spec, DictSpec):
            if not isinstance(value, dict) or set(value) != set(spec.items):
                got = f"keys [{', '.join(map(repr, value))}]" if isinstance(value, dict) else type(value).__name__
                raise input_error(f"Expected input at {where} to be a dict with keys "
                                  f"[{', '.join(map(repr, spec.items))}], but got {got}")
            for k, s in spec.items.items():
                self.walk(s, value[k], key + (k,))
        else:
            raise AssertionError(f"unknown input spec {spec!r}")

    # ------------------------------------------------------------ sizes
    def dim(self, d, actual: int, where: str) -> None:
        if isinstance(d, int):
            if actual != d:
                raise input_error(f"Expected input at {where} to be equal to {d}, but got {actual}")
            return
        if not self.try_dim(d, actual, where):
            self.deferred.append((d, actual, where))

    def try_dim(self, expr, actual, where) -> bool:
        """Check (or learn a symbol from) one size; False when it depends on symbols not known yet."""
        names, affine, value_fn = self.ep._plan(expr)
        values = self.values
        unbound = [n for n in names if n not in values]
        if not unbound:
            want = value_fn(values)
            if actual != want:
                raise input_error(f"Expected input at {where} to be equal to {want}, but got {actual}")
            return True
        if affine is None or len(unbound) > 1 or unbound[0] != affine[0]:
            return False
        name, a, rest_fn = affine  # expr == a*name + rest
        b = rest_fn(values)
        if (actual - b) % a:
            form = pyexpr(expr, self.dim_name)
            raise input_error(f"Expected input at {where} = {actual} to be of the form {form}, where "
                              f"{self.dim_name(self.ep._by_name[name])} is an integer")
        info = self.ep.symbols.get(self.ep._by_name.get(name))
        if info is not None:  # the symbol's range, as a range of this size
            ends = [None if info.lo is None else a * info.lo + b, None if info.hi is None else a * info.hi + b]
            dlo, dhi = ends if a > 0 else ends[::-1]
            if dlo is not None and actual < dlo:
                raise input_error(f"Expected input at {where} to be >= {dlo}, but got {actual}")
            if dhi is not None and actual > dhi:
                raise input_error(f"Expected input at {where} to be <= {dhi}, but got {actual}")
        values[name] = (actual - b) // a
        if (a, b) == (1, 0):
            self.where[name] = where
        return True

    def dim_name(self, sym) -> str:
        info = self.ep.symbols.get(sym)
        return info.dim if info is not None and info.dim else sym.name

    def finish(self) -> None:
        progress = True
        while self.deferred and progress:
            progress = False
            for item in list(self.deferred):
                if self.try_dim(*item):
                    self.deferred.remove(item)
                    progress = True
        if self.deferred:
            d, actual, where = self.deferred[0]
            raise input_error(f"cannot check input at {where} = {actual} against {d}: its symbols are not "
                              f"determined by the other inputs")
        for check, fn in zip(self.ep.checks, self.ep._check_fns):
            if not all(s.name in self.values for s in check.expr.free_symbols):
                continue
            if not fn(self.values):
                at = f" (from {check.location})" if check.location else ""
                vals = ", ".join(f"{self.where.get(s.name, self.dim_name(s))} = {self.values[s.name]}"
                                 for s in sorted(check.expr.free_symbols, key=str))
                if check.kind == "assert":
                    raise input_error(f"Runtime assertion failed: {check.text}{at} ({vals})")
                raise input_error(f"Expected the inputs to satisfy {check.text}{at}, but got {vals}")


# ---------------------------------------------------------------------------- ep.module()
class ExportedModule(torch.nn.Module):
    """`ep.module()`: the program's state as parameters and buffers, its graph as forward."""

    def __init__(self, ep: ExportedProgram):
        super().__init__()
        object.__setattr__(self, "_program", ep)
        for name, t in ep.state_dict.items():
            *path, leaf = name.split(".")
            mod: torch.nn.Module = self
            for p in path:
                if p not in mod._modules:
                    mod.add_module(p, torch.nn.Module())
                mod = mod._modules[p]
            if isinstance(t, torch.nn.Parameter):
                mod.register_parameter(leaf, t)
            else:
                mod.register_buffer(leaf, t)

    def forward(self, *args, **kwargs):
        state = dict(self.named_parameters(remove_duplicate=False))
        state.update(self.named_buffers(remove_duplicate=False))
        return self._program._run(args, kwargs, state)

    def extra_repr(self) -> str:
        return f"exported {self._program.name}"


__all__ = ["ExportedProgram", "ExportedModule", "TensorSpec", "SymIntSpec", "ConstSpec", "SeqSpec", "DictSpec",
           "SymbolInfo", "Check", "SignatureSpec", "STATE"]
