"""TracingMode: a TorchFunctionMode that turns every torch call into an IR node.

For each call it (1) answers metadata queries (`x.shape`, `x.dim()`) from the
symbolic sizes, (2) runs the op on meta tensors for dtype, device and the
example's output shape, (3) asks the op's symbolic meta rule for the symbolic
output shape (or, with no rule, specializes the inputs' sizes: the fallback),
and (4) records the call in the graph and returns FakeTensors.
"""
from __future__ import annotations

import inspect
import sys
import types

import torch
from torch.overrides import TorchFunctionMode

from ..symbolic.userloc import user_location
from .errors import GraphBreak
from . import custom_ops
from .datadep import HANDLERS, NOT_MINE
from .fake import FakeTensor
from .meta import get_rule
from .meta.common import contiguous_strides, norm_dim, prod
from .symint import hint_of
from . import tensor_attrs

T = torch.Tensor

_DATA_READS = {
    T.__bool__: "bool() of a tensor (data-dependent control flow, e.g. `if t.sum() > 0:`)",
    T.__int__: "int() of a tensor's value", T.__float__: "float() of a tensor's value",
    T.__index__: "using a tensor's value as an index", T.__complex__: "complex() of a tensor's value",
    T.numpy: "Tensor.numpy()", T.__array__: "numpy conversion of a tensor",
    T.__repr__: "printing a tensor", T.__str__: "printing a tensor", T.__format__: "formatting a tensor",
    T.__contains__: "`in` on a tensor (reads data)", T.data_ptr: "Tensor.data_ptr()",
    T.backward: "a training step inside the compiled function (Tensor.backward())",
    T.register_hook: "Tensor.register_hook()",
    T.__reduce_ex__: "pickling a tensor", T.__deepcopy__: "deepcopy of a tensor",
    torch.autograd.grad: "torch.autograd.grad inside the compiled function",
    torch.autograd.backward: "a training step inside the compiled function (torch.autograd.backward)",
    T.grad.__get__: "reading .grad inside the compiled function (an optimizer's zero_grad() or step() too)",
}
# a backward or an optimizer inside: the function runs eagerly; compiling what computes the loss
# gives the speed (its backward is the generated one)
_STEP_ADVICE = ("What to do: compile the model (or the function that computes the loss) and call "
                "loss.backward() and optimizer.step() outside it: the backward then runs the compiled "
                "graph's (generated) backward. See the README, 'Training'.")
_STEP_READS = {T.backward, torch.autograd.backward, torch.autograd.grad, T.grad.__get__}
_ADVICE = ("What to do: keep data-dependent Python logic out of the compiled function, "
           "or express it with tensor ops (torch.where) so it stays in the graph.")
_DEVICE_PROPS = {T.device.__get__: "device", T.is_cuda.__get__: "is_cuda", T.is_cpu.__get__: "is_cpu",
                 T.is_meta.__get__: "is_meta", T.get_device: "get_device"}
_FACTORIES = {getattr(torch, n) for n in (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "eye", "tensor", "linspace",
    "logspace", "randperm", "empty_strided", "scalar_tensor", "as_tensor", "range", "tril_indices",
    "triu_indices", "normal", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
    "randn_like", "randint_like") if hasattr(torch, n)}
_NO_DECOMPOSE_MODULES = ("torch._tensor",)


class TracingMode(TorchFunctionMode):
    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer
        self._decomposing: set = set()

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        tr = self.tracer
        if tr.real is not None and func in _SPECULABLE and args and isinstance(args[0], FakeTensor):
            return _speculate(tr, func, args[0])
        env = tr.env
        env.framework_depth += 1  # conditions asked while handling an op are the framework's, not branches
        try:
            return self._handle(tr, func, args, kwargs)
        finally:
            env.framework_depth -= 1

    def _handle(self, tr, func, args, kwargs):
        if args and type(args[0]) is not FakeTensor and isinstance(args[0], torch.Tensor) and func not in _DATA_READS:
            # a real tensor read from an object or a module (`cache.keys.numel()`): its symbolic input first,
            # so metadata queries answer symbolically instead of specializing
            args = (tr.lift(args[0]),) + tuple(args[1:])
        h = _META_QUERIES.get(func)
        if h is not None and args and isinstance(args[0], FakeTensor):
            return h(self, *args, **kwargs)
        dd = HANDLERS.get(func)
        if dd is not None and args and isinstance(args[0], FakeTensor):
            out = dd(tr, func, args, kwargs)
            if out is not NOT_MINE:
                return out
        if func in _DATA_READS:
            raise GraphBreak(_DATA_READS[func], user_location(), _STEP_ADVICE if func in _STEP_READS else _ADVICE)
        if func in _BREAKS and args and isinstance(args[0], FakeTensor):
            raise GraphBreak(f"Tensor.{_BREAKS[func]} cannot be answered while tracing (it is the real tensor's, "
                             "made when the compiled code runs)", user_location(),
                             "What to do: read it outside the compiled function.")
        if func is T.set_ and args and isinstance(args[0], FakeTensor):  # (tensor_attrs.route_to_mode)
            raise GraphBreak("Tensor.set_ of a traced tensor (it makes the tensor another tensor's memory, "
                             "sizes and strides, which the trace does not model)", user_location(),
                             "What to do: call set_ outside the compiled function, or use the other "
                             "tensor itself (`x = y`).")
        if func in _SETTERS and args and isinstance(args[0], FakeTensor):
            name = _SETTERS[func]
            if name == "requires_grad":  # `t.requires_grad = b` is `t.requires_grad_(b)`: recorded as that op
                return self._handle(tr, torch.Tensor.requires_grad_, args, {})
            raise GraphBreak(f"`Tensor.{name} = ...` of a traced tensor (the assignment changes the real tensor, "
                             "which exists when the compiled code runs)", user_location(),
                             "What to do: assign it outside the compiled function (or use an in-place op: "
                             "`t.data.copy_(v)`, `t.copy_(v)` under torch.no_grad()).")
        if func is torch._C._set_grad_enabled:
            return func(*args, **kwargs)
        if func is T.retain_grad and args and isinstance(args[0], FakeTensor):
            args[0].ds_retains_grad = True  # an input's `retains_grad` then reads it (tensor_attrs), not its entry's
        if func in _DEVICE_PROPS and args and isinstance(args[0], FakeTensor):
            return _device_query(_DEVICE_PROPS[func], args[0].ds_device)
        if getattr(func, "__name__", "") == "__get__" and args and isinstance(args[0], FakeTensor):
            out = func(*args, **kwargs)  # a property: non-tensor metadata answers directly
            if not isinstance(out, torch.Tensor):
                return out
        if custom_ops.custom_overload(func) is not None:  # torch.library ops: their fake gives the shapes
            return custom_ops.call(tr, self, func, args, kwargs)
        rule = get_rule(func)
        if rule is None and self._decomposable(func):
            return self._decompose(func, args, kwargs)
        hook = sys.gettrace()  # runtime/outer.py's, watching the user's code: not needed in ours (half
        if hook is None:  # of a trace's Python calls are ours)
            return tr.call_op(func, rule, args, kwargs)
        sys.settrace(None)
        try:
            return tr.call_op(func, rule, args, kwargs)
        finally:
            sys.settrace(hook)

    # ------------------------------------------------------------ decomposition
    def _decomposable(self, func) -> bool:
        return (inspect.isfunction(func) and func not in self._decomposing
                and func.__module__ not in _NO_DECOMPOSE_MODULES
                and (func.__module__ or "").startswith("torch"))

    def _decompose(self, func, args, kwargs):
        """Trace through a Python-level torch function (e.g. F.multi_head_attention_forward)."""
        self._decomposing.add(func)
        env = self.tracer.env
        depth, env.framework_depth = env.framework_depth, 0  # library Python: its branches are like the user's
        try:
            with self:
                return _without_dispatch_check(func)(*args, **kwargs)
        finally:
            env.framework_depth = depth
            self._decomposing.discard(func)


_SPECULABLE = {T.__bool__, T.__int__, T.__float__, T.__index__}


def _speculate(tr, func, t):
    """`if t.any():`, `int(t)`: this call's real value, with a data guard in the graph."""
    if func is T.__bool__ or t.dtype is torch.bool:
        b = tr.speculate_bool(t)
        return b if func is T.__bool__ else func(torch.tensor(b))
    real = func(tr.real_value(t, f"`{func.__name__.strip('_')}({t.ds_node.name})`"))  # eager's value or error
    saved, tr.capture_scalar_outputs = tr.capture_scalar_outputs, True
    try:
        v = HANDLERS[T.item](tr, T.item, (t,), {})
    finally:
        tr.capture_scalar_outputs = saved
    got = int(v) if isinstance(real, int) else float(v)  # decided by the real value: a data guard
    return real if got == real else got


def _device_query(what, device):
    if what == "device":
        return device
    if what == "get_device":
        return -1 if device.type == "cpu" else device.index
    return device.type == {"is_cuda": "cuda", "is_cpu": "cpu", "is_meta": "meta"}[what]


_NO = lambda *a, **k: False  # noqa: E731
_bypassed: dict = {}


def _without_dispatch_check(f):
    """A copy of `f` whose `has_torch_function*` checks are off, so its body runs under the mode
    instead of re-dispatching to it."""
    g = _bypassed.get(f)
    if g is None:
        ns = dict(f.__globals__, has_torch_function=_NO, has_torch_function_unary=_NO,
                  has_torch_function_variadic=_NO)
        g = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        _bypassed[f] = g
    return g


# ------------------------------------------------------------------ metadata queries
def _q_size(mode, t, dim=None):
    s = t.ds_sizes
    return torch.Size(s) if dim is None else s[norm_dim(dim, len(s))]


def _q_shape(mode, t):
    return torch.Size(t.ds_sizes)


def _q_dim(mode, t):
    return len(t.ds_sizes)


def _q_numel(mode, t):
    return prod(t.ds_sizes)


def _q_len(mode, t):
    if not t.ds_sizes:
        raise TypeError("len() of a 0-d tensor")
    return int(t.ds_sizes[0])  # len() must return an int: the size is specialized


def _q_stride(mode, t, dim=None):
    strides = mode.tracer.observe_strides(t)
    return strides if dim is None else strides[norm_dim(dim, len(strides))]


def _q_storage_offset(mode, t):
    return mode.tracer.observe_storage_offset(t)


def _q_is_contiguous(mode, t, memory_format=torch.contiguous_format):
    mode.tracer.observe_strides(t, exact=False)  # contiguity ignores the strides of size-1 dims
    return T.is_contiguous(t, memory_format=memory_format)


def _q_requires_grad(mode, t):
    return t.requires_grad


def _dtype_query(method):
    def q(mode, t, *args, **kwargs):
        return method(t, *args, **kwargs)  # the meta tensor has the real dtype
    return q


def _q_type(mode, t, dtype=None, non_blocking=False, **kwargs):
    if dtype is None and not kwargs:  # the type's name: the real device's, not meta's
        name = T.type(torch.empty(0, dtype=t.dtype))
        dev = t.ds_device.type
        return name if dev == "cpu" else name.replace("torch.", f"torch.{dev}.", 1)
    return mode.tracer.call_op(T.type, get_rule(T.type), (t, dtype, non_blocking), kwargs)


_META_QUERIES = {
    T.size: _q_size, T.shape.__get__: _q_shape, T.dim: _q_dim, T.ndimension: _q_dim,
    T.ndim.__get__: _q_dim, T.numel: _q_numel, T.nelement: _q_numel, T.__len__: _q_len,
    T.stride: _q_stride, T.is_contiguous: _q_is_contiguous, T.storage_offset: _q_storage_offset, T.requires_grad.__get__: _q_requires_grad,
    T.type: _q_type, torch.numel: _q_numel,
}
for _name in ("is_floating_point", "is_complex", "is_signed", "element_size", "is_quantized"):
    for _owner in (T, torch):
        if hasattr(_owner, _name):
            _META_QUERIES[getattr(_owner, _name)] = _dtype_query(getattr(T, _name))
_META_QUERIES.update(tensor_attrs.HANDLERS)  # autograd and view history, the caller's tensor's flags
_BREAKS = {f: n for f, n in tensor_attrs.breaks().items() if f not in _DATA_READS and f not in _META_QUERIES}
_SETTERS = tensor_attrs.setters()  # `t.grad = g`, `t.data = d`, `t.requires_grad = b`: what the mode sees
tensor_attrs.route_to_mode(FakeTensor)  # `x.set_(y)` reaches the mode too


def symbolic_strides(t: FakeTensor) -> tuple:
    """Strides in terms of the symbolic sizes when the layout is dense; None otherwise."""
    meta_strides = T.stride(t)
    sizes = t.ds_sizes
    if T.is_contiguous(t):
        return contiguous_strides(sizes)
    order = sorted(range(len(sizes)), key=lambda i: meta_strides[i])
    acc, out = 1, [0] * len(sizes)
    for i in order:
        out[i] = acc
        acc = acc * sizes[i]
    if tuple(hint_of(s) for s in out) == tuple(meta_strides):
        return tuple(out)
    return None


__all__ = ["TracingMode", "symbolic_strides"]
