"""The Tracer: turns a call of a Python function on real inputs into a graph.

Inputs become FakeTensors and SymInts named by their sources; every torch call
goes through the TracingMode into `call_op`, which runs the op on meta tensors,
applies the op's symbolic rule (or the specializing fallback), and records a
node. The graph is built through the object passed in (the IR layer sits above
this one).
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch: our own answers are plain, faster
import logging
import operator
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch

from ..symbolic.shape_env import DimConstraint, DimDynamic, ShapeEnv
from ..symbolic.sources import ItemSource, ModuleMemberSource, SizeSource, Source
from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import user_location
from .datadep import with_history
from .caught import in_user_try, refuse_in_try, watching_errors
from .torch_flags import refuse_forward_ad, refuse_transformed
from .errors import GraphBreak
from . import autocast, meta_cache, op_memo
from .fake import FakeTensor, make_fake
from .inputs import TensorInput, ValueInput, check_supported as _check_supported, input_meta as _input_meta
from .aliasing import VIEW_OR_COPY as _VIEW_OR_COPY, odd_layout as _odd_layout, returns_fresh as _returns_fresh, \
    shared_inputs as _shared_inputs
from .writes import new_storage_offset as _new_offset, written as _written, writes as _writes
from .meta_device import META_IMPL as _META_IMPL, meta_to as _meta_to
from .names import target_name
from .mode import _FACTORIES, TracingMode, symbolic_strides
from .tensor_attrs import ESCAPE_ADVICE, TracedGradFn
from .global_state import intercept_global_state, parametrized
from .state import tracing_scope
from .speculate import data_guard, describe_condition, guard_text, random_op
from .standins import meta_leaf as _meta_leaf, misfit as _misfit, tensors_in as _tensors
from .symint import hint_of, install, meta_value
from .tree import leaves, map_leaves as _map, sizes_as_tuples as _sizes_as_tuples, wrap_tensors as _wrap_out

log = logging.getLogger("dynashape.dynamic")
_glog = logging.getLogger("dynashape.guards")


@dataclass
class DimPolicy:
    """How one input value becomes symbolic: the answer of a policy for one source."""

    dynamic: DimDynamic = DimDynamic.STATIC
    min: int | None = None
    max: int | None = None
    constraint: DimConstraint | None = None
    value: Any = None  # a ready SymInt (e.g. export's derived dim `2*dx + 1`): used as the size


# (source, example value, kind: "size" | "int" | "param", the tensor, its dim) -> DimPolicy
Policy = Callable[..., DimPolicy]


def static_policy(source, value, kind, tensor=None, dim=None) -> DimPolicy:
    return DimPolicy(DimDynamic.STATIC)


def dynamic_policy(source, value, kind, tensor=None, dim=None) -> DimPolicy:
    if kind == "param":
        return DimPolicy(DimDynamic.STATIC)
    return DimPolicy(DimDynamic.DUCK if kind == "size" else DimDynamic.DYNAMIC)


class Tracer:
    def __init__(self, env: ShapeEnv, graph, policy: Policy = static_policy, *,
                 capture_scalar_outputs: bool = True, capture_dynamic_output_shape_ops: bool = True):
        install(env)
        self.env = env
        self.graph = graph  # an ir.Graph (duck-typed: built through its methods)
        graph.modes_now = meta_cache.modes_now  # each call records the inference mode and autocast it ran under
        self.policy = policy
        self.capture_scalar_outputs = capture_scalar_outputs  # item()/tolist() in the graph, else a break
        self.capture_dynamic_output_shape_ops = capture_dynamic_output_shape_ops  # nonzero & co, else a break
        self.tensor_inputs: list[TensorInput] = []
        self.value_inputs: list[ValueInput] = []
        self.lift_sources: dict[int, Source] = {}  # id(real tensor) -> where to read it at run time
        self._fakes: dict[int, FakeTensor] = {}  # id(real tensor) -> its FakeTensor
        self._keep: list = []  # keeps real tensors alive while their ids are keys
        self._module_tensors: set[int] = set()  # ids of parameters and buffers of modules
        self.strides_observed = False
        self.offsets_observed = False
        self.derived_sizes: list[tuple[Source, sympy.Expr]] = []  # input sizes given as expressions
        self.fallbacks: list[str] = []
        self._bound: set = set()
        self.aliases: list[tuple[Source, Source]] = []  # (source, earlier source of the same tensor)
        self._source_of: dict[int, Source] = {}  # id(real tensor) -> the source it was first read from
        self.mutates = False  # the trace ran an in-place op (or out=, or setitem)
        self.mutates_input = False  # ... on a tensor that may be (a view of) an input's memory
        self.flag_reads: dict = {}  # "torch.get_...()" -> (getter, value read): guarded
        self._in_try = None  # (what, frame): an op or check recorded inside the user's try/except (caught.py)
        self._input_tensors: list = []  # (source, real tensor) of tensor inputs, in order
        self._offsets: dict[int, int] = {}  # id(input fake) -> the real tensor's storage offset
        self.object_input = None  # fn(value, source) -> value: how other Python objects come in
        self.real = None  # speculate.RealValues when the trace may decide data-dependent branches
        self.data_guards: list = []  # (description, location) of each branch decided on data
        self.visible_effects: list[str] = []  # what a side exit could not undo (in-place on an input)
        self._input_of: dict[int, tuple] = {}  # id(input fake) -> (source, real tensor)
        self._input_grad_fn: dict = {}  # id(input fake) -> its autograd node when made (tensor_attrs.py)
        self.grad_fns: dict = {}  # the stand-ins of `t.grad_fn` (tensor_attrs.py), one per node
        self.input_facts: dict = {}  # (source, attribute) -> value read of the caller's tensor: guarded
        self._op_memo: dict = {}  # op_memo.key -> recipe: calls met again with the same symbolic arguments
        self._op_refused: dict = {}  # (op, rank of its first argument) -> how often its result was not kept

    # ----------------------------------------------------------------- inputs
    def register_module(self, module: torch.nn.Module, source: Source) -> None:
        """Parameters and buffers of `module` become inputs read from it at each call."""
        parametrized(self, module)  # (inside parametrize.cached(): eagerly)
        members = [(n, t, "param") for n, t in module.named_parameters(remove_duplicate=True)]
        members += [(n, t, "buffer") for n, t in module.named_buffers(remove_duplicate=True)]
        for name, t, kind in members:
            if t is not None and id(t) not in self.lift_sources:
                self.lift_sources[id(t)] = ModuleMemberSource(source, name, kind)
                self._module_tensors.add(id(t))
                self._keep.append(t)

    def wrap_input(self, value, source: Source, depth: int = 0):
        """A real argument as what the traced code sees (FakeTensor, SymInt, or the value)."""
        if isinstance(value, torch.Tensor):
            _check_supported(value, source)
            return self.tensor_input(value, source, "param" if isinstance(value, torch.nn.Parameter) else "size")
        if isinstance(value, bool) or value is None or isinstance(value, (str, torch.dtype, torch.device)) \
                or (type(value).__module__ == "numpy" and getattr(value, "shape", None) == ()):  # numpy scalars
            self.value_inputs.append(ValueInput(source, value, "const"))
            return value
        if isinstance(value, (int, float)):
            kind = "int" if isinstance(value, int) else "float"
            pol = self.policy(source, value, kind)
            if pol.dynamic is DimDynamic.STATIC:
                self.value_inputs.append(ValueInput(source, value, "const"))
                return value
            self.value_inputs.append(ValueInput(source, value, "sym" + kind))
            sym = self.env.symint(value, source, pol.dynamic, pol.min, pol.max, is_size=False,
                                  constraint=pol.constraint)
            if isinstance(sym, SymBase):
                node = self.graph.input(source, None, _name_hint(source))
                self._bind(sym, node, "value", None)
            return sym
        if isinstance(value, (tuple, list, dict)) and depth >= _MAX_DEPTH:
            raise GraphBreak(f"argument {source.root().pretty()} is nested more than {_MAX_DEPTH} levels deep",
                             None, "What to do: pass a flatter structure (e.g. a list of tensors).")
        if isinstance(value, (tuple, list)):
            self.value_inputs.append(ValueInput(source, type(value), "type", {"len": len(value)}))
            items = [self.wrap_input(v, ItemSource(source, i), depth + 1) for i, v in enumerate(value)]
            if type(value) in (tuple, list, torch.Size):
                return type(value)(items)
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if isinstance(value, dict):
            self.value_inputs.append(ValueInput(source, type(value), "type", {"keys": tuple(value)}))
            return {k: self.wrap_input(v, ItemSource(source, k), depth + 1) for k, v in value.items()}
        if isinstance(value, torch.nn.Module):
            self.value_inputs.append(ValueInput(source, value, "id"))
            self.register_module(value, source)
            return value
        if self.object_input is not None:
            return self.object_input(value, source)
        self.value_inputs.append(ValueInput(source, value, "id"))
        return value

    def tensor_input(self, t: torch.Tensor, source: Source, kind: str = "size") -> FakeTensor:
        if id(t) in self._fakes:
            first = self._source_of.get(id(t))
            if first is not None and first != source:  # f(a, a): the guards require the same object
                self.aliases.append((source, first))
            return self._fakes[id(t)]
        self._source_of[id(t)] = source
        self._input_tensors.append((source, t))
        static = getattr(self.policy, "static_param", None)
        if kind == "param" and static is not None and static(t):
            sizes = list(t.shape)  # what the policy answers for each dim (STATIC), asked once
        else:
            sizes = self._input_sizes(t, source, kind)
        self._finish_input(t, source, kind, sizes)
        return self._fakes[id(t)]

    def _input_sizes(self, t: torch.Tensor, source: Source, kind: str) -> list:
        sizes = []
        for i, hint in enumerate(t.shape):
            pol = self.policy(SizeSource(source, i), hint, kind, t, i)
            if pol.value is not None:
                s = pol.value
                if hint_of(s) != hint:
                    raise ValueError(f"{SizeSource(source, i).pretty()} = {hint}, but its declared size "
                                     f"{s} is {hint_of(s)} on this example")
                if isinstance(s, SymBase) and not isinstance(s.node.expr, sympy.Symbol):
                    self.derived_sizes.append((SizeSource(source, i), s.node.expr))
            elif pol.dynamic is DimDynamic.STATIC:
                s = int(hint)  # the common case for parameters: no symbol, no sympy
            else:
                s = self.env.symint(hint, SizeSource(source, i), pol.dynamic, pol.min, pol.max,
                                    constraint=pol.constraint)
            sizes.append(s)
        return sizes

    def _finish_input(self, t: torch.Tensor, source: Source, kind: str, sizes: list) -> None:
        meta = _input_meta(t)
        static = all(isinstance(s, int) for s in sizes)  # (a parameter's, usually)
        # a module's parameter/buffer with static sizes: the guards pin the object itself
        pinned = t if static and isinstance(source, ModuleMemberSource) else None
        node = self.graph.input(source, self._tensor_meta(sizes, t), _name_hint(source), pinned)
        device = t.device
        self.graph.devices.add(device.type)
        fake = make_fake(meta, sizes, node, device, self)
        if not static:
            for i, s in enumerate(sizes):
                if isinstance(s, SymBase):
                    self._bind(s, node, "size", i)
                    self._bind_affine(s, node, i)
        offset = t.storage_offset()
        shape = tuple(t.shape)
        self.tensor_inputs.append(TensorInput(
            source, t.dtype, device, t.requires_grad,
            shape if static else tuple(s if isinstance(s, int) else None for s in sizes), t.stride(),
            t.is_contiguous(), type(t), kind == "param", pinned, offset, shape))
        self._fakes[id(t)] = fake
        self._offsets[id(fake)] = offset
        self._input_of[id(fake)] = (source, t)
        self._input_grad_fn[id(fake)] = torch.Tensor.grad_fn.__get__(fake)  # (the caller's history, as met)
        self._keep.append(t)

    def input_of(self, fake):
        """(source, real tensor) of an input's fake, else None."""
        return self._input_of.get(id(fake))

    def input_grad_fn(self, fake):
        """The autograd node an input's fake had when it was made (None for a leaf)."""
        return self._input_grad_fn.get(id(fake))

    def input_fact(self, source: Source, real: torch.Tensor, attr: str):
        """A property of the caller's tensor the trace read (`x.is_leaf`, `x._is_view()`): its
        value now, checked by the guards at every call."""
        v = getattr(real, attr)
        if callable(v):
            v = v()
        self.input_facts.setdefault((source, attr), v)
        return v

    def _bind(self, s: SymBase, node, how: str, index) -> None:
        expr = s.node.expr
        if isinstance(expr, sympy.Symbol) and expr not in self._bound:
            self._bound.add(expr)
            self.graph.symbol(expr, node, how, index)

    def _bind_affine(self, s: SymBase, node, index) -> None:
        """A size `a*r + b` whose root `r` is not bound yet: bind `r = (size - b) // a`."""
        expr = s.node.expr
        free = expr.free_symbols
        if isinstance(expr, sympy.Symbol) or len(free) != 1:
            return
        (root,) = free
        if root in self._bound:
            return
        a, b = sympy.Poly(expr, root).all_coeffs() if sympy.Poly(expr, root).degree() == 1 else (None, None)
        if a is None:
            return
        self._bound.add(root)
        self.graph.symbol(root, node, "affine", (index, int(a), int(b)))

    def lift(self, t: torch.Tensor) -> FakeTensor:
        """A real tensor met inside the trace: a parameter/buffer input, or a captured constant."""
        fake = self._fakes.get(id(t))
        if fake is not None:
            return fake
        refuse_transformed(t)  # vmap's, jvp's: not a constant of ours
        src = self.lift_sources.get(id(t))
        if src is not None:  # module parameters and buffers are static by default
            return self.tensor_input(t, src, "param" if id(t) in self._module_tensors else "size")
        meta = _input_meta(t)
        node = self.graph.const(t, self._tensor_meta(tuple(t.shape), t), "const")
        self.graph.devices.add(t.device.type)
        fake = make_fake(meta, tuple(t.shape), node, t.device, self)
        self._fakes[id(t)] = fake
        self._keep.append(t)
        return fake

    # ----------------------------------------------------------------- tracing
    def run(self, fn, args, kwargs, finish=None):
        """`finish(out)` -> the graph's output value (default: `to_ir(out)`)."""
        self._in_try = None
        refuse_forward_ad()  # tangents the compiled code would not carry
        with watching_errors(), tracing_scope(self), intercept_global_state(self), TracingMode(self):
            out = fn(*args, **kwargs)
        refuse_in_try(self._in_try)
        self.graph.exit_grad = torch.is_grad_enabled()  # `torch.set_grad_enabled(False)` outlives the call
        if self.mutates_input:
            self._refuse_shared_memory()
        self._emit_pending_asserts()
        self.graph.output(finish(out) if finish is not None else self.to_ir(out))
        self.graph.symbol_bounds = {s: (vr.lo, vr.hi) for s, vr in self.env.var_to_range.items()
                                    if s in self.env._unbacked}
        return out

    def _refuse_shared_memory(self) -> None:
        """Distinct input tensors over one storage, and the trace mutates: the fakes do not model
        that a write through one is seen through the other, so this call runs eagerly."""
        shared = _shared_inputs(self._input_tensors)
        if shared is not None:
            self.mutates = self.mutates_input = False  # the eager entry this break makes serves any aliasing
            raise GraphBreak(f"inputs {shared[0].pretty()} and {shared[1].pretty()} share memory and the "
                             "function changes a tensor in place", None,
                             "What to do: pass tensors that do not overlap (e.g. .clone() one of them).")

    def observe_storage_offset(self, t: FakeTensor) -> int:
        """An input's storage offset is guarded (the fakes start at 0); a computed tensor's
        depends on how its inputs sit in memory, which the trace does not model."""
        offset = self._offsets.get(id(t))
        if offset is None:
            raise GraphBreak("storage_offset() of a tensor computed inside the function", user_location(),
                             "What to do: read it outside the compiled function, or from an input.")
        self.offsets_observed = True  # the guards check each input's storage offset
        return offset

    def observe_strides(self, t: FakeTensor, exact: bool = True):
        """The user read strides or contiguity: guard the inputs' layouts from now on.

        Dense layouts have strides in terms of the sizes. A size-1 (or empty) dim's stride is
        arbitrary: an input's is guarded exactly; a computed tensor's, like any layout not dense,
        depends on how its inputs were sized, so every input size is specialized and the meta
        strides (exact once the input layouts are guarded) are the answer."""
        self.strides_observed = True
        meta = tuple(T_stride(t))
        if exact and getattr(t, "ds_odd_layout", False):
            # empty or size-1 dims that a meta kernel laid out unlike torch.empty would (or a view of
            # such a tensor): the device kernel may choose otherwise (they differ there)
            raise GraphBreak("stride() of a computed tensor with empty or size-1 dims (the meta and "
                             "device kernels may lay those out differently)", user_location(),
                             "What to do: read strides of inputs, or of .contiguous() results.")
        for n in t.ds_sizes:  # a size that may be 0 or 1 (size-oblivious): decide which, by the example
            if isinstance(n, SymBase) and not n >= 2:
                int(n)
        known = [n if isinstance(n, int) else self.env.static_value(n.node.expr) for n in t.ds_sizes]
        is_input = getattr(t.ds_node, "kind", None) == "input"
        if exact and not is_input and any(n is not None and n <= 1 for n in known):
            # an empty tensor, or the stride of a size-1 dim: the CPU kernel chooses it unlike the meta
            # kernel (`x.movedim(0, -1) * 1` of a (1, 1, 2) x: (2, 1, 2) on CPU, (2, 1, 1) on meta)
            raise GraphBreak("stride() of a computed tensor with an empty or size-1 dim (device kernels lay "
                             "those out as they like, unlike the meta kernel)", user_location(),
                             "What to do: read strides of inputs, or of tensors whose dims are all > 1.")
        # a view's strides come from its base's sizes (x[:, :3] of x (n, m) has stride m), which
        # its own sizes do not determine: only a fresh tensor's dense layout is a formula of them
        strides = None if getattr(t, "ds_view", False) and not is_input else symbolic_strides(t)
        if strides is not None:
            degenerate = [d for d, n in enumerate(known) if n is not None and n <= 1]
            if 0 in known:
                degenerate = list(range(len(meta)))
            if all(hint_of(strides[d]) == meta[d] for d in degenerate):
                return strides
        for sym in list(self.env.var_to_val):
            if sym.is_integer and sym not in self.env.replacements:
                self.env.guard_int(sym)
        return meta

    def note_inplace(self, func, args, kwargs) -> None:
        """A call that writes (tracing/writes.py) is being recorded: what it changes may be an input's
        memory, which decides aliasing guards and whether the call may be re-run from its start."""
        changed = _written(func, args, kwargs)
        if not changed:
            return
        self.mutates = True
        moved = _new_offset(func, args, kwargs)  # as_strided_(size, stride, offset): the input starts there now
        if moved is not None and id(args[0]) in self._offsets:
            self._offsets[id(args[0])] = moved
        for t in _tensors(changed):  # its grad_fn is now the in-place op's, which the meta run records
            t.__dict__.pop("ds_grad_fn", None)
        if any(getattr(t, "ds_may_alias", True) for t in _tensors(changed)):
            self.mutates_input = True  # (maybe) an input's memory: aliasing between inputs matters
            if not self.visible_effects:  # the first is why a side exit could not re-run the call
                self.visible_effects.append(f"{_fname(func)} changes an input (or a tensor that may share "
                                            f"its memory) in place at {user_location()}")

    def call_op(self, func, rule, args, kwargs):
        args, kwargs = _map((args, kwargs), self._lift_leaf)
        memo = op_memo.lookup(self, func, args, kwargs) if not _writes(func, args, kwargs) else None
        if memo is not None and memo[1] is not None:  # met before with the same symbolic arguments
            return op_memo.replay(self, func, args, kwargs, memo[1], _short_name(func))
        out = self._call_op(func, rule, args, kwargs)
        if memo is not None:
            op_memo.remember(self, memo, func, args, kwargs, out)
        return out

    def _call_op(self, func, rule, args, kwargs):
        self.note_inplace(func, args, kwargs)
        meta_args, meta_kwargs, device = self._meta_args(func, args, kwargs)
        try:
            amp = autocast.active_for(args, kwargs)
            if amp is not None:
                out = autocast.meta_run(amp, _META_IMPL.get(func, func), meta_args, meta_kwargs, _fname(func))
            else:
                out = meta_cache.call(_META_IMPL.get(func, func), meta_args, meta_kwargs)
        except (NotImplementedError, RuntimeError) as e:  # e.g. nonzero, or F.one_hot reading .item()
            if rule is not None and self._has_unbacked((args, kwargs)):
                # sizes known only at run time (x.split(t.tolist()), x[x > 0] * y): the stand-in sizes
                # the meta run got need not fit together, so the rule gives the shapes
                shapes = rule(*args, **kwargs)
                return self._record(func, args, kwargs, self._meta_for_rule(func, args, kwargs, shapes),
                                    shapes, device)
            if rule is None and self._has_unbacked((args, kwargs)):
                raise GraphBreak(f"{_fname(func)} has no symbolic rule, and its inputs have sizes known only "
                                 f"at run time", user_location(),
                                 "What to do: make the size static (e.g. pad to a fixed length), or move "
                                 "this op out of the compiled function.") from None
            if isinstance(e, RuntimeError) and "meta" not in str(e):
                self._guard_error(e, rule, args, kwargs)
                raise
            raise GraphBreak(f"{_fname(func)} needs the tensor's data to know its output "
                             f"({str(e).splitlines()[0]})", user_location()) from None
        except (IndexError, ValueError, TypeError) as e:  # eager's error for these sizes, as above
            self._guard_error(e, rule, args, kwargs)
            raise
        if rule is not None:
            shapes = rule(*args, **kwargs)
            if self._has_unbacked((args, kwargs)) and _misfit(out, shapes) is not None:
                # a data-dependent size's stand-in was chosen before a later fact fixed it (a runtime
                # assert that `v`'s length equals 2): the meta run saw the old size, the rule the new one
                out = self._meta_for_rule(func, args, kwargs, shapes)
        else:
            shapes = self._fallback(func, args, kwargs, out)
        return self._record(func, args, kwargs, out, shapes, device)

    def _unbacked(self, s) -> bool:
        return isinstance(s, SymBase) and not s.node.expr.free_symbols.isdisjoint(self.env._unbacked)

    def _has_unbacked(self, obj) -> bool:
        return any(self._unbacked(a) or (isinstance(a, FakeTensor) and any(map(self._unbacked, a.ds_sizes)))
                   for a in leaves(obj))

    def _meta_for_rule(self, func, args, kwargs, shapes):
        """Meta outputs of the rule's shapes. Their dtypes come from a meta run in which every
        data-dependent size is 1 (it fits any broadcast and matmul); failing that, from the first
        tensor argument."""
        def ones(x):
            if isinstance(x, FakeTensor) and any(map(self._unbacked, x.ds_sizes)):
                size = [1 if self._unbacked(d) else meta_value(d) for d in x.ds_sizes]
                return torch.empty(size, dtype=x.dtype, device="meta")
            return _meta_leaf(x)
        shape_list = [shapes] if isinstance(shapes, tuple) else list(shapes)
        try:
            probe = meta_cache.call(_META_IMPL.get(func, func), *_map((args, kwargs), ones))
            dtypes = [t.dtype for t in _tensors(probe)]
        except (NotImplementedError, RuntimeError):
            dtypes = []
        if len(dtypes) != len(shape_list):
            dtype = next((a.dtype for a in leaves(args) if isinstance(a, torch.Tensor)), torch.float32)
            dtypes = [dtype] * len(shape_list)
        outs = [torch.empty([meta_value(d) for d in s], dtype=dt, device="meta") for s, dt in zip(shape_list, dtypes)]
        # made from sizes alone: the autograd history eager's results have (requires_grad, grad_fn)
        return with_history(func, args, kwargs, outs[0] if isinstance(shapes, tuple) else tuple(outs))

    def _lift_leaf(self, x):
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
            return self.lift(x)
        return x

    def _meta_args(self, func, args, kwargs):
        device = None
        for a in leaves((args, kwargs)):
            if isinstance(a, FakeTensor):
                device = a.ds_device
                break
        margs, mkwargs = _map((args, kwargs), _meta_leaf)
        if "device" in mkwargs and mkwargs["device"] is not None:
            device = torch.device(mkwargs["device"])
            mkwargs["device"] = "meta"
        elif func in _FACTORIES and device is None:  # a tensor argument already puts the meta run on meta
            mkwargs["device"] = "meta"
            device = device or torch.device("cpu")
        if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda):
            margs, mkwargs, device = _meta_to(func, margs, mkwargs, device)
        return margs, mkwargs, device or torch.device("cpu")

    def _guard_error(self, e, rule, args, kwargs) -> None:
        """The meta run raised eager's error for these sizes (`x[i]` past the dim, `view` that does not
        fit). The program may catch it and go on (try/except), so the error must hold only where it was
        raised: the op's rule, where it raises the same error, guards the condition (`i < s0`);
        otherwise each symbolic size and int the call read is specialized."""
        if rule is not None:
            try:
                rule(*args, **kwargs)
            except type(e):
                return
            except Exception:  # noqa: BLE001 - the rule does not model this error: specialize below
                pass
        self._specialize_sizes(args, kwargs)

    @staticmethod
    def _specialize_sizes(args, kwargs) -> bool:
        """Guard every symbolic size and int the call reads to its value; whether there was one."""
        specialized = False
        for a in leaves((args, kwargs)):
            if isinstance(a, FakeTensor):
                for s in a.ds_sizes:
                    if isinstance(s, SymBase):
                        int(s)
                        specialized = True
            elif isinstance(a, SymBase):
                int(a)
                specialized = True
        return specialized

    def _fallback(self, func, args, kwargs, out):
        """No symbolic rule: specialize every symbolic size it reads, use the meta result."""
        specialized = self._specialize_sizes(args, kwargs)
        if specialized:
            loc = user_location()
            msg = f"{_fname(func)} has no symbolic rule: specialized its input sizes at {loc}"
            self.fallbacks.append(msg)
            log.info("fallback: %s", msg)
        return [tuple(t.shape) for t in _tensors(out)]

    def _record(self, func, args, kwargs, out, shapes, device):
        outs = list(_tensors(out))
        index = {id(t): i for i, t in enumerate(outs)}
        if isinstance(shapes, tuple):
            shapes = [shapes]
        if len(shapes) != len(outs):
            raise AssertionError(f"meta rule for {_fname(func)} returned {len(shapes)} shapes "
                                 f"for {len(outs)} outputs")
        bad = _misfit(out, shapes)
        if bad is not None:
            s, t = bad
            raise AssertionError(f"meta rule for {_fname(func)} computed shape {tuple(s)} (= "
                                 f"{tuple(meta_value(x) for x in s)} on the example) but torch gives {tuple(t.shape)}")
        for s in shapes:
            for x in s:  # a data-dependent value used as a size must be a size
                if isinstance(x, SymBase) and x.node.expr in self.env._unbacked \
                        and not self.env.is_size_like(x.node.expr):
                    self.runtime_assert(x >= 0, f"{self.env.describe(x.node.expr)} is used as a size, "
                                                f"so it must be >= 0")
                    self.env.mark_size_like(x.node.expr)
        ir_args, ir_kwargs = self.to_ir(args, True), self.to_ir(kwargs, True)
        if type(out) is torch.Tensor:  # the usual single result (a meta tensor of the cache or the meta run)
            meta = self._tensor_meta(shapes[0], out)
        else:
            meta = _map(out, lambda x: self._tensor_meta(shapes[index[id(x)]], x) if isinstance(x, torch.Tensor)
                        else None) if outs else None
        short = _short_name(func)
        if self._in_try is None:
            self._in_try = in_user_try(_fname(func))
        node = self.graph.call(func, ir_args, ir_kwargs, meta, user_location(),
                               torch.is_grad_enabled(), name_hint=short)
        # an in-place op returns the tensor it changed: the same fake (maybe resized). An op that
        # merely returned its input on the example (`contiguous()`, `to()`, `float()`) may copy on
        # another input, so its result is a value of its own, computed by the recorded call.
        arg_leaves = list(leaves((args, kwargs)))  # walked once, read below
        in_fakes = {id(a): a for a in arg_leaves if isinstance(a, FakeTensor)} if _writes(func, args, kwargs) else {}

        odd_inputs = any(getattr(a, "ds_odd_layout", False) for a in arg_leaves)
        # an op may hand back (a view of) its input's memory: a view, or an op that returns its input
        # as it is when nothing needs converting (contiguous, to, float, ...); other results are fresh
        aliasing_in = any(getattr(a, "ds_may_alias", True) if isinstance(a, FakeTensor) else isinstance(a, torch.Tensor)
                          for a in arg_leaves)
        returns_input = aliasing_in and not _returns_fresh(short, args)

        def wrap(x, path):
            if not isinstance(x, torch.Tensor):
                return x
            i = index[id(x)]
            same = in_fakes.get(id(x))
            if same is not None:  # in-place op or a returned input: the same object, maybe resized
                same.ds_sizes = tuple(shapes[i])
                # requires_grad_() / detach_(): its node's meta says so now (a fused region's backward
                # returned no gradient to a leaf made inside the function)
                self._current_node(same)
                return same
            n = node
            for k in path:
                n = self.graph.call(operator.getitem, (n, k), {}, self._tensor_meta(shapes[i], x),
                                    None, torch.is_grad_enabled(), name_hint=f"{node.name}_{k}")
            is_view = x._is_view()
            fake = make_fake(x, shapes[i], n, device, self)
            # its layout follows its base's, which the trace does not model; reshape & co return a view or
            # a copy depending on the sizes and strides of the call, so their layout is a view's too
            # (a view of such a result too: whose view it is, and so its history, follows that layout)
            fake.ds_view_or_copy = short in _VIEW_OR_COPY or (is_view and any(
                getattr(a, "ds_view_or_copy", False) for a in arg_leaves if isinstance(a, FakeTensor)))
            fake.ds_view = is_view or fake.ds_view_or_copy
            fake.ds_odd_layout = odd_inputs or (not fake.ds_view and _odd_layout(x))
            fake.ds_may_alias = returns_input
            return fake

        return wrap(out, ()) if type(out) is torch.Tensor else _wrap_out(out, wrap, ())

    # ----------------------------------------------------------------- speculation
    def _speculation_blocked(self) -> str | None:
        """Why this call may not be re-run from its start after a side exit (None: it may)."""
        if self.visible_effects:
            return self.visible_effects[0]
        for n in self.graph.nodes:
            if n.kind != "call":
                continue
            name = getattr(n.target, "__name__", "")
            if name == "print" or name == "manual_seed":
                return f"{name}() runs before it (at {n.location})"
            if random_op(n.target, n.args, n.kwargs):
                return f"a random op ({_fname(n.target)}) runs before it (at {n.location})"
        return None

    def _refuse(self, what: str, loc) -> None:
        why = self._speculation_blocked()
        if why is not None:
            raise GraphBreak(f"{what} depends on data, and the call cannot be re-run from its start if "
                             f"another call takes the other branch: {why}", loc,
                             "What to do: move the in-place change, print or random op after the "
                             "condition, or out of the compiled function.")

    def real_value(self, t: FakeTensor, what: str, loc=None):
        """This call's real value of a traced tensor: the graph so far runs on the real inputs, which
        is refused (a graph break) once the call changed an input in place, printed or drew randoms."""
        self._refuse(what, loc or user_location())
        return self.real.value(t.ds_node)

    def speculate_bool(self, t: FakeTensor) -> bool:
        """`bool(t)` of a traced tensor: this call's real value, guarded inside the graph."""
        loc = user_location()
        cond = describe_condition(loc, f"bool({t.ds_node.name})")
        b = bool(self.real_value(t, f"`{cond}`", loc))  # raises as eager would (a tensor of several values)
        self._data_guard(t.ds_node, b, cond, loc)
        return b

    def speculate_expr(self, expr, location):
        """A condition (or int/float) over data-dependent values, decided by this call's real values.
        None when the real value is not known (the caller raises DataDependentError)."""
        if self.real is None:
            return None
        loc = location or user_location()
        is_bool = isinstance(expr, (sympy.Rel, sympy.logic.boolalg.BooleanFunction,
                                    sympy.logic.boolalg.BooleanAtom))  # a Symbol is a Boolean to sympy too
        pytype = bool if is_bool else (float if not expr.is_integer else int)
        self._refuse(f"`{self.env.describe(expr)}`", loc)
        v = self.real.expr(expr, pytype)
        if v is None:
            return None
        cond_text = describe_condition(loc, self.env.describe(expr))
        if is_bool:
            v = bool(v)
            self._data_guard(self.graph.SymExpr(expr, bool), v, cond_text, loc)
            self.env.add_fact(expr if v else sympy.Not(expr), loc)
            return v
        v = int(v) if pytype is int else float(v)
        eq = sympy.Eq(expr, v)
        self._data_guard(self.graph.SymExpr(eq, bool), True, f"{self.env.describe(expr)} == {v}", loc)
        self.env.add_fact(eq, loc)
        return v

    def _data_guard(self, cond, expected: bool, text: str, loc) -> None:
        self.graph.call(data_guard, (cond, expected, guard_text(text, loc)), {}, None, loc,
                        torch.is_grad_enabled(), name_hint="guard")
        self.data_guards.append((text, loc))
        if _glog.isEnabledFor(logging.INFO):
            _glog.info("data guard `%s` (%s) at %s: every call on this path reads its value from the device "
                       "(a sync on GPU)", text, expected, loc)

    # ----------------------------------------------------------------- data-dependent values
    def new_unbacked(self, *, size_like: bool, lo=None, hi=None, description: str | None = None,
                     pytype: type = int):
        """A fresh unbacked SymInt (SymFloat/SymBool by `pytype`) with the tightest bounds known."""
        if pytype is float:
            return self.env.wrap(self.env.create_unbacked_symfloat(), float, None)
        if pytype is bool:
            return self.env.wrap(self.env.create_unbacked_symbool(), bool, None)
        sym = self.env.create_unbacked_symint(size_like=size_like, min=lo, max=hi, description=description)
        return self.env.wrap(sym, int, None)

    def bind_unbacked(self, s, node, how: str, index) -> None:
        """Generated code computes the value at run time: `u0 = nonzero.size(0)`, `u1 = item`."""
        expr = s.node.expr
        if isinstance(expr, sympy.Rel):  # a SymBool from item(): bound through its int symbol
            expr = next(iter(expr.free_symbols))
        if isinstance(expr, sympy.Symbol) and expr not in self._bound:
            self._bound.add(expr)
            self.graph.symbol(expr, node, how, index)

    def runtime_assert(self, cond, message: str | None = None, location=None, error=RuntimeError,
                       exact: bool = False) -> None:
        """A fact the trace relies on, checked when the compiled code runs (not a guard). A failing
        check raises `error`; `exact`: with `message` as it is (eager's text, torch._check's), else
        with the user's line appended."""
        self._emit_pending_asserts()
        loc = location or user_location()
        expr = cond.node.expr if isinstance(cond, SymBase) else cond
        if self.env.static_value(expr) is True:
            return
        self.env.expect_true(expr, message, loc)
        self._emitted_asserts = len(self.env.runtime_asserts)
        self._emit_assert(expr, message, loc, error, exact and message is not None)

    def _emit_pending_asserts(self) -> None:
        """Facts the engine recorded on its own (torch._check in library code): checked at the end."""
        for ra in self.env.runtime_asserts[getattr(self, "_emitted_asserts", 0):]:
            if ra.expr.free_symbols <= self._bound:
                self._emit_assert(ra.expr, ra.message, ra.location)
        self._emitted_asserts = len(self.env.runtime_asserts)

    def _emit_assert(self, expr, message, loc, error=RuntimeError, exact: bool = False) -> None:
        from .checks import ERRORS, runtime_check
        if self._in_try is None:
            self._in_try = in_user_try(lambda: f"the check `{self.env.describe(expr)}`")
        text = message or f"check `{self.env.describe(expr)}` failed"
        if loc is not None and not exact:
            text += f" (at {loc})"
        args = (self.graph.SymExpr(expr, bool), text)
        if error is not RuntimeError:  # by name: a graph's constants are plain values (saved programs too)
            args += (error.__name__ if ERRORS.get(error.__name__) is error else "RuntimeError",)
        self.graph.call(runtime_check, args, {}, None, loc, torch.is_grad_enabled(), name_hint="check")

    # ----------------------------------------------------------------- IR values
    # The IR layer sits above this one: its value types come through the graph object we were given.
    def _tensor_meta(self, sizes, t):
        return self.graph.TensorMeta(_shape_exprs(sizes), t.dtype, bool(t.requires_grad))

    def _current_node(self, fake: FakeTensor):
        """The node a read of `fake` reads, its meta's requires_grad made the tensor's own now: an
        in-place write of a value that requires grad (`v[:1] = y.sum()`, also through a view of it)
        made a tensor computed under no_grad require grad, and a fused region reading it must
        return its gradient (its backward once returned None for it, silently)."""
        node = fake.ds_node
        m = node.meta
        meta_type = self.graph.TensorMeta
        if type(m) is meta_type and m.requires_grad != fake.requires_grad:
            node.meta = meta_type(m.shape, m.dtype, bool(fake.requires_grad))
        return node

    def to_ir(self, value, sizes_as_tuples: bool = False):
        """`value` with traced tensors and symbolic values as graph values. `sizes_as_tuples`: an
        op's argument, where a torch.Size is the tuple of its sizes (tree.sizes_as_tuples)."""
        t = type(value)
        if t is FakeTensor:
            return self._current_node(value)
        if t in _PLAIN:
            return value
        if t is tuple or t is list or (sizes_as_tuples and t is torch.Size):
            items = [self.to_ir(v, sizes_as_tuples) for v in value]
            return items if t is list else tuple(items)
        if t is dict:
            return {k: self.to_ir(v, sizes_as_tuples) for k, v in value.items()}
        if sizes_as_tuples:
            value = _sizes_as_tuples(value)
        if isinstance(value, FakeTensor):
            return self._current_node(value)
        if isinstance(value, torch.Tensor):
            return self.lift(value).ds_node
        if isinstance(value, SymBase):
            return self.graph.SymExpr(self.env.simplify(value.node.expr), value.node.pytype)
        if isinstance(value, torch.Size):  # rebuilt as a torch.Size when the code runs
            return self.graph.call(torch.Size, ([self.to_ir(v) for v in value],), {}, None, None,
                                   torch.is_grad_enabled(), name_hint="size")
        if isinstance(value, (list, tuple)):
            items = [self.to_ir(v) for v in value]
            if type(value) in (list, tuple):
                return type(value)(items)
            if hasattr(value, "_fields"):  # namedtuple / structseq
                return tuple(items)
            return type(value)(items)
        if isinstance(value, dict):
            return {k: self.to_ir(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self.to_ir(value.start), self.to_ir(value.stop), self.to_ir(value.step))
        if isinstance(value, TracedGradFn):  # returned, printed, passed to an op: it exists only while tracing
            raise GraphBreak("the grad_fn of a traced tensor is returned or passed on (it exists only while "
                             "tracing)", user_location(), ESCAPE_ADVICE)
        return value


_PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                    torch.memory_format, type(Ellipsis)})  # values that are their own IR
_MAX_DEPTH = 64  # nesting of list/tuple/dict arguments traced; deeper runs eagerly


def T_stride(t):
    return torch.Tensor.stride(t)


def _fname(func) -> str:
    return target_name(func).replace("torch.nn.functional.", "F.")


def _short_name(func) -> str:
    """`linear` for torch.nn.functional.linear: the op's name in generated code and in op tables."""
    return target_name(func).rsplit(".", 1)[-1]


def _name_hint(source: Source) -> str:
    name = source.pretty().replace(".", "_").replace("[", "_").replace("]", "").replace("'", "")
    return name[5:] if name.startswith("self_") else name


def _shape_exprs(sizes) -> tuple:
    return tuple(s.node.expr if isinstance(s, SymBase) else int(s) for s in sizes)

