"""ExportedProgram: one graph, its input contract, and its own state.

Calling it checks the inputs first (structure, dict key order, dtypes, ranks,
static sizes, the sizes that share a symbol or are derived from one, the
symbols' ranges, the guards no range expresses, constants bit for bit, and what
the trace read beyond shapes: strides, storage offsets, requires_grad, the grad
mode, the default dtype, torch's flags), then runs the generated code under the
caller's grad mode:

    Expected input at args[1].shape[0] to be equal to 6, but got 5
    Expected input at args[0].shape[0] to be <= 12, but got 14
    Expected input at args[0].shape[0] = 9 to be of the form 2*dimx + 1, where dimx is an integer

Parameters, buffers and captured tensors are the program's state (`state_dict`),
passed to the generated code at each call as `L['<state>']`.
"""
from __future__ import annotations

import ast
import inspect
import logging
import math
import re
from dataclasses import dataclass, field

import sympy
import torch

from ..ir.codegen import compile_graph
from ..tracing.global_state import FLAG_GETTERS, PARAMETRIZE_CACHE, _parametrize_cache_enabled
from ..tracing.meta.common import canonical_strides
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
    # checked when the program read strides or contiguity: "canonical" (torch.empty's for the shape), or
    # per dim an int or an expression of the symbols (a transposed example's); None: any layout
    strides: tuple | str | None = None
    storage_offset: int | None = None  # checked when the program read a storage offset
    requires_grad: bool | None = None  # checked when the program read autograd state (x.requires_grad)
    facts: dict | None = None  # other properties of the caller's tensor the trace read (`is_leaf`): checked


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
class GlobalSpec:
    """The global state the trace read, checked before each call (the caller's may differ)."""

    default_dtype: torch.dtype  # decides factories' and Python scalars' dtypes: always checked
    grad_enabled: bool | None = None  # checked where the trace read the grad mode; None: the caller's mode
    grad_read_at: str | None = None  # the user's line that read it, for messages
    flags: dict = field(default_factory=dict)  # "torch.get_...()" -> value the trace read (tracer.flag_reads)

    def check(self) -> None:
        """Raise a RuntimeError that names the setting, when the caller's differs from the trace's."""
        now = torch.get_default_dtype()
        if now != self.default_dtype:
            raise input_error(f"the exported program was traced with torch.get_default_dtype() == "
                              f"{self.default_dtype}, but it is {now} now. Call it with torch.set_default_dtype("
                              f"{self.default_dtype}) in effect, or export it again under the default dtype you "
                              f"call it with.")
        if self.grad_enabled is not None and torch.is_grad_enabled() is not self.grad_enabled:
            on, off = ("on", "off") if self.grad_enabled else ("off", "on")
            at = f" at {self.grad_read_at}" if self.grad_read_at else ""
            raise input_error(f"the exported program was traced with grad mode {on} and reads it{at} (the mode, or "
                              f"whether tensors require grad), but grad mode is {off} now. Call it with grad mode {on} "
                              f"(`with torch.{'enable_grad' if self.grad_enabled else 'no_grad'}():`), or export "
                              f"it again with grad mode {off}.")
        for text, value in self.flags.items():
            got = flag_getter(text)()
            if got != value or type(got) is not type(value):
                raise input_error(f"the exported program read {text} == {value!r} while tracing, but it is {got!r} "
                                  f"now. Call it with the setting it was exported with, or export it again.")


_FLAG = re.compile(r"torch\.([a-z_0-9]+)\(\)|logging\.getLogger\(('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)"
                   r"\.isEnabledFor\((\d+)\)")


def flag_getter(text: str):
    """The function that reads a flag the trace read, from its text (`torch.get_default_device()`,
    `logging.getLogger('app').isEnabledFor(10)`); None when the text names none we know."""
    if text == PARAMETRIZE_CACHE:  # a parametrized module's (tracing/global_state.py)
        return _parametrize_cache_enabled
    m = _FLAG.fullmatch(text)
    if m is None:
        return None
    if m.group(1) is not None:
        return getattr(torch, m.group(1)) if m.group(1) in FLAG_GETTERS and hasattr(torch, m.group(1)) else None
    name, level = ast.literal_eval(m.group(2)), int(m.group(3))
    return lambda: logging.getLogger(name).isEnabledFor(level)


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
                 data_ranges: dict | None = None, out_types=None, global_spec: GlobalSpec | None = None):
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
        # the grad mode, default dtype and flags the trace read (None: a program made without them: unchecked)
        self.global_spec = global_spec
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
        if self.global_spec is not None:
            self.global_spec.check()
        return v.values


def same_constant(value, want) -> bool:
    """Whether a constant argument is the one the program specialized on: the same type and value,
    floats bit for bit (-0.0 is not 0.0: `x / s` gives -inf for one, inf for the other; a NaN is
    the same NaN), None and bools by identity."""
    if want is None or isinstance(want, bool):
        return value is want
    if type(value) is not type(want):
        return False
    if isinstance(want, float):
        return _same_float(value, want)
    if isinstance(want, complex):
        return _same_float(value.real, want.real) and _same_float(value.imag, want.imag)
    return value == want


def _same_float(a: float, b: float) -> bool:
    if a != a or b != b:  # NaN: any NaN computes as any other
        return a != a and b != b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


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
        self.layouts: list[tuple] = []  # (strides spec, tensor, where): checked once every symbol is known

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
            self.tensor_state(spec, value, where)
        elif isinstance(spec, SymIntSpec):
            if not isinstance(value, int) or isinstance(value, bool):
                raise input_error(f"Expected input at {where} to be an int, but got {type(value).__name__}")
            self.dim(spec.expr, value, where)
        elif isinstance(spec, ConstSpec):
            if not same_constant(value, spec.value):
                zero = isinstance(spec.value, float) and spec.value == 0 and value == 0  # 0.0 vs -0.0
                why = ". The program specialized on its value, and the sign of a zero changes results" if zero else ""
                raise input_error(f"Expected input at {where} to be equal to {spec.value!r}, but got {value!r}{why}")
        elif isinstance(spec, SeqSpec):
            if type(value) is not spec.type or len(value) != len(spec.items):
                got = f"{type(value).__name__}" + (f" of {len(value)} items" if isinstance(value, (tuple, list))
                                                   else "")
                raise input_error(f"Expected input at {where} to be a {spec.type.__name__} of "
                                  f"{len(spec.items)} items, but got {got}")
            for i, (s, x) in enumerate(zip(spec.items, value)):
                self.walk(s, x, key + (i,))
        elif isinstance(spec, DictSpec):
            self.dict_keys(spec, value, key, where)
            for k, s in spec.items.items():
                self.walk(s, value[k], key + (k,))
        else:
            raise AssertionError(f"unknown input spec {spec!r}")

    def dict_keys(self, spec: DictSpec, value, key, where) -> None:
        """The same keys in the same order: the program iterates a dict (or **kwargs) in the example's
        order, which is the order eager would iterate this one in only when it is the same."""
        want = list(spec.items)
        if isinstance(value, dict) and list(value) == want:
            return
        keys = ", ".join(map(repr, want))
        got = f"keys [{', '.join(map(repr, value))}]" if isinstance(value, dict) else type(value).__name__
        if not isinstance(value, dict) or set(value) != set(want):
            raise input_error(f"Expected input at {where} to be a dict with keys [{keys}], but got {got}")
        what = "the keyword arguments" if len(key) == 1 and key[0] == self.paths.var_kw else f"input at {where}"
        raise input_error(f"Expected {what} in the order of the example, [{keys}] (the program iterates them in that "
                          f"order), but got {got}. Pass them in the example's order.")

    def tensor_state(self, spec: TensorSpec, value: torch.Tensor, where) -> None:
        """What the trace read of a tensor besides dtype and shape: its layout (the strides are checked
        in `finish`, once the symbols are known), storage offset, requires_grad and other properties."""
        if spec.strides is not None:
            self.layouts.append((spec.strides, value, where))
        if spec.storage_offset is not None and value.storage_offset() != spec.storage_offset:
            raise input_error(f"Expected input at {where}.storage_offset() to be {spec.storage_offset} like the "
                              f"example (the program reads it), but got {value.storage_offset()}. Pass a copy "
                              f"(x.clone()) or export with an example laid out like the inputs.")
        if spec.requires_grad is not None and value.requires_grad is not spec.requires_grad:
            raise input_error(f"Expected input at {where}.requires_grad to be {spec.requires_grad} like the example "
                              f"(the program reads autograd state), but got {value.requires_grad}. "
                              + ("Pass x.detach(), or export" if value.requires_grad else "Export")
                              + f" with an example whose requires_grad is {value.requires_grad}.")
        for attr, want in (spec.facts or {}).items():
            got = getattr(value, attr)
            got = got() if callable(got) else got
            if got != want or type(got) is not type(want):
                raise input_error(f"Expected input at {where}.{attr} to be {want!r} like the example (the program "
                                  f"reads it), but got {got!r}. Export with an example like this input.")

    def check_layouts(self) -> None:
        for strides, value, where in self.layouts:
            got = tuple(value.stride())
            if strides == "canonical":
                want = canonical_strides(tuple(value.shape))
            else:
                want = tuple(d if isinstance(d, int) else self.ep._plan(d)[2](self.values) for d in strides)
            if got != want:
                kind = "contiguous like the example, " if strides == "canonical" else ""
                raise input_error(f"Expected input at {where}.stride() to be {want} ({kind}the program reads strides), "
                                  f"but got {got}. Pass x.contiguous() or a tensor laid out like the example, or "
                                  f"export with an example laid out like this input.")

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
        self.check_layouts()
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
           "SymbolInfo", "Check", "SignatureSpec", "GlobalSpec", "STATE", "flag_getter", "same_constant"]
