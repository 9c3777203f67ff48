"""What traced code reads of a tensor besides its values: autograd state, views, versions, flags.

Every attribute of `torch.Tensor` that Python code can read while tracing is in one of the
classes of `CLASSES` (tests/tracing/test_tensor_attrs.py walks `dir(torch.Tensor)` and fails on
one that is not):

    op        a torch op: recorded in the graph like any call (tensor results, in-place changes)
    shape     answered from the symbolic sizes (`size`, `numel`, `nbytes`...)
    static    the same for every tensor the guards accept (dtype, layout, device flags)
    history   the tensor's own autograd and view history (`is_leaf`, `grad_fn`, `_is_view`, `_base`,
              `_version`, `output_nr`...). An op's meta output *is* its fake (tracing/fake.py), so
              torch's own autograd recorded these for the same sequence of ops as eager; of an input,
              the real tensor's value, guarded
    input     a property of the caller's tensor (inference, conj bits, pinned, grad_dtype): of an
              input, its real value, guarded; of a computed tensor, the meta run's (exact)
    layout    strides and contiguity (tracing/tracer.py observe_strides: guarded layouts)
    data      reads values: a data-dependent value, speculation, or a graph break (tracing/mode.py)
    break     cannot be answered while tracing: a graph break that names it

The handlers here answer the `history` and `input` classes.
"""
from __future__ import annotations

import torch

from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .meta.common import prod

T = torch.Tensor


ESCAPE_ADVICE = "What to do: only compare grad_fn with None or read its name(), or read it outside the compiled function."


class TracedGradFn:
    """`t.grad_fn` while tracing, where eager's is not None: its type name is eager's node's name
    (`MulBackward0`), `name()` too; anything else of it (hooks, `next_functions`) is a graph break, and
    so is letting it out of the function."""

    __slots__ = ("_node_name", "_eager_type")

    def __init__(self, node_name: str | None, eager_type: type | None = None):
        self._node_name = node_name
        self._eager_type = eager_type

    def eager_type(self) -> type:
        """`type(t.grad_fn)` in the user's code (tracing/pyenv.py): eager's node class."""
        if self._eager_type is None:
            raise GraphBreak("type() of the grad_fn of a traced tensor whose node is not known while tracing",
                             user_location(), ESCAPE_ADVICE)
        return self._eager_type

    def name(self) -> str:
        if self._node_name is None:
            raise GraphBreak("grad_fn.name() of an input that is not a leaf (its history is the caller's)",
                             user_location(), "What to do: read it before calling the compiled function.")
        return self._node_name

    def __getattr__(self, attr):
        if attr.startswith("__"):  # stored in an object, pickled, copied: it would outlive the trace
            raise GraphBreak("the grad_fn of a traced tensor is kept or passed on (it exists only while "
                             "tracing)", user_location(), ESCAPE_ADVICE)
        raise GraphBreak(f"grad_fn.{attr} of a traced tensor (the autograd graph is built when the compiled "
                         f"code runs)", user_location(), ESCAPE_ADVICE)

    def __repr__(self) -> str:
        return f"<{self._node_name or 'grad_fn'} (traced)>"


_classes: dict = {}


def traced_grad_fn(mode, key, name: str | None, eager_type: type | None = None) -> TracedGradFn:
    """A TracedGradFn whose class is named as eager's node (`type(h.grad_fn).__name__`), one per node
    of the trace (`key`): `y.grad_fn is y.grad_fn`, and the outputs of one op share theirs, as in eager."""
    made = mode.tracer.grad_fns
    found = made.get(key)
    if found is not None:
        return found[0]
    cls = _classes.get(name)
    if cls is None:
        cls = _classes[name] = type(name or "TracedGradFn", (TracedGradFn,), {"__slots__": ()})
    made[key] = out = (cls(name, eager_type), key)  # (the key's objects kept: their ids stay theirs)
    return out[0]


torch.autograd.graph.Node.register(TracedGradFn)  # isinstance(t.grad_fn, Node), torch's documented check


# ------------------------------------------------------------------ resolving a fake
def _input(mode, t):
    """(source, real tensor) when `t` is a graph input, else None."""
    return mode.tracer.input_of(t)


def _input_history(mode, t):
    """`_input(mode, t)` while the trace has left the input's autograd history as the caller's
    (whose facts are read and guarded); None once an in-place op gave it one of the trace's own
    (`y.mul_(w.sum())` with w requiring grad: y is no longer a leaf, as in eager; the caller's
    tensor said it was one, and a branch on `y.is_leaf` took the wrong way: train fuzz 25112932)."""
    found = mode.tracer.input_of(t)
    if found is None or T.grad_fn.__get__(t) is not mode.tracer.input_grad_fn(t):
        return None
    return found


def _own(mode, t, viewness: bool = True):
    """The fake whose history is `t`'s: the tensor an op returned as it is (eager returns that object),
    after guarding the layouts that made the op return it rather than a copy. `viewness`: the answer
    also depends on whether reshape & co made a view or a copy (grad_fn, _is_view, _base, _version)."""
    same = getattr(t, "ds_same_as", None)
    layout_dependent = same is not None or (viewness and getattr(t, "ds_view_or_copy", False))
    if layout_dependent:  # reshape/contiguous/to...: a view, a copy or the input itself, by layout
        mode.tracer.observe_strides(t, exact=False)
    return same if same is not None else t


def _fact(mode, t, attr: str):
    """An input's `attr` (a property, or a method called without arguments), guarded."""
    src, real = _input(mode, t)
    return mode.tracer.input_fact(src, real, attr)


# ------------------------------------------------------------------ history
def q_is_leaf(mode, t):
    t = _own(mode, t, viewness=False)
    if _input_history(mode, t) is not None:
        return _fact(mode, t, "is_leaf")
    if getattr(t, "ds_grad_fn", None) is not None:
        return False
    return T.is_leaf.__get__(t)


def q_grad_fn(mode, t):
    t = _own(mode, t)
    if _input_history(mode, t) is not None:
        return None if _fact(mode, t, "is_leaf") else traced_grad_fn(mode, (id(t), t), None)
    name = getattr(t, "ds_grad_fn", None)
    if name is not None:  # "": eager's node is not known (a cast inside a decomposition under autocast)
        return traced_grad_fn(mode, (id(t), t), name or None, getattr(torch._C._functions, name, None) if name else None)
    fn = T.grad_fn.__get__(t)
    return None if fn is None else traced_grad_fn(mode, (id(fn), fn), type(fn).__name__, type(fn))


def q_output_nr(mode, t):
    t = _own(mode, t, viewness=False)
    if _input_history(mode, t) is not None:
        return _fact(mode, t, "output_nr")
    if getattr(t, "ds_grad_fn", None) is not None:
        return getattr(t, "ds_output_nr", 0)
    return T.output_nr.__get__(t)


def q_retains_grad(mode, t):
    t = _own(mode, t, viewness=False)
    if getattr(t, "ds_retains_grad", False) and not q_is_leaf(mode, t):  # retain_grad() in this call
        return True
    if _input_history(mode, t) is not None:
        return _fact(mode, t, "retains_grad")
    return T.retains_grad.__get__(t)


def q_is_view(mode, t):
    t = _own(mode, t)
    if _input(mode, t) is not None:
        return _fact(mode, t, "_is_view")
    return T._is_view(t)


def q_base(mode, t):
    t = _own(mode, t)
    if _input(mode, t) is not None:
        if _fact(mode, t, "_is_view"):
            raise GraphBreak("._base of an input that is a view (its base is not an argument)", user_location(),
                             "What to do: pass the base tensor itself.")
        return None
    base = T._base.__get__(t)
    if base is None:
        return None
    base = getattr(base, "ds_same_as", base)
    if getattr(base, "ds_node", None) is None:
        raise GraphBreak("._base of a tensor whose base is not a value of the function", user_location())
    if _input(mode, base) is not None and _fact(mode, base, "_is_view"):  # eager's base is the input's base
        raise GraphBreak("._base of a view of an input that is itself a view (its base is not an argument)",
                         user_location(), "What to do: pass the base tensor itself.")
    return base


def q_version(mode, t):
    t = _own(mode, t)
    if _input(mode, t) is not None or getattr(t, "ds_may_alias", True):
        raise GraphBreak("._version of an input or of a tensor that may share an input's memory (it counts "
                         "in-place changes made before the call)", user_location(),
                         "What to do: read it outside the compiled function.")
    return T._version.__get__(t)


# ------------------------------------------------------------------ properties of the caller's tensor
def _input_or_meta(attr: str, getter):
    def q(mode, t, *args, **kwargs):
        t = _own(mode, t)
        if _input(mode, t) is not None and not args and not kwargs:
            return _fact(mode, t, attr)
        return getter(t, *args, **kwargs)
    q.__name__ = f"q_{attr}"
    return q


def q_nbytes(mode, t):
    return prod(t.ds_sizes) * T.itemsize.__get__(t)


def q_data_ptr_like(what):
    def q(mode, t, *args, **kwargs):
        raise GraphBreak(f"{what} of a tensor (its memory exists only when the compiled code runs)",
                         user_location(), "What to do: read it outside the compiled function.")
    return q


def _handlers() -> dict:
    table = {
        "is_leaf": q_is_leaf, "grad_fn": q_grad_fn, "output_nr": q_output_nr, "retains_grad": q_retains_grad,
        "_is_view": q_is_view, "_base": q_base, "_version": q_version, "nbytes": q_nbytes,
        "is_inference": _input_or_meta("is_inference", T.is_inference),
        "is_conj": _input_or_meta("is_conj", T.is_conj), "is_neg": _input_or_meta("is_neg", T.is_neg),
        "is_pinned": _input_or_meta("is_pinned", lambda t, *a, **k: False),
        "is_shared": _input_or_meta("is_shared", lambda t: False),
        "grad_dtype": _input_or_meta("grad_dtype", lambda t: T.grad_dtype.__get__(t)),
        "name": _input_or_meta("name", lambda t: T.name.__get__(t)),
        "_cdata": q_data_ptr_like("._cdata"), "untyped_storage": q_data_ptr_like(".untyped_storage()"),
        "storage": q_data_ptr_like(".storage()"), "_typed_storage": q_data_ptr_like("._typed_storage()"),
        "const_data_ptr": q_data_ptr_like(".const_data_ptr()"), "_use_count": q_data_ptr_like("._use_count()"),
    }
    out = {}
    for name, h in table.items():  # torch>=2.4: a newer attribute may be missing
        attr = getattr(T, name, None)
        if attr is None:
            continue
        out[attr.__get__ if isinstance(attr, property) or type(attr).__name__ == "getset_descriptor" else attr] = h
        if name in ("is_inference", "is_conj", "is_neg") and hasattr(torch, name):
            out[getattr(torch, name)] = h
    return out


HANDLERS = _handlers()


# ------------------------------------------------------------------ the classification
# Every attribute of torch.Tensor that is not a torch op, by class (see the module docstring). An
# op is a name with an aten schema that returns tensors, or one listed under "op" (casts, Python
# methods built on ops). `classify` says which; tests/tracing/test_tensor_attrs.py walks
# dir(torch.Tensor) and compares each class's answers with eager's.
_PYTHON = ("__class__ __dict__ __weakref__ __doc__ __module__ __annotations__ __delattr__ __dir__ "
           "__getattribute__ __hash__ __init__ __init_subclass__ __new__ __setattr__ __sizeof__ "
           "__subclasshook__ __torch_dispatch__ __torch_function__ _make_subclass _make_wrapper_subclass "
           "_dtensor__new__ _fix_weakref _clear_non_serializable_cached_data as_subclass module_load __slotnames__")
CLASSES: dict[str, str] = {}
for _cls, _names in {
    "python": _PYTHON,  # object machinery, not tensor state
    "op": ("H T mH mT real imag data __abs__ __add__ __and__ __div__ __eq__ __floordiv__ __ge__ __getitem__ __gt__ "
           "__iadd__ __idiv__ __ifloordiv__ __imod__ __imul__ __ipow__ __isub__ __itruediv__ __invert__ __iter__ "
           "__le__ __lshift__ __lt__ __matmul__ __mod__ __mul__ __ne__ __neg__ __or__ __pos__ __pow__ __radd__ "
           "__rand__ __rdiv__ __reversed__ __rfloordiv__ __rlshift__ __rmatmul__ __rmod__ __rmul__ __ror__ "
           "__rpow__ __rrshift__ __rshift__ __rsub__ __rtruediv__ __rxor__ __setitem__ __sub__ __truediv__ "
           "__xor__ __delitem__ acos acosh add add_ all angle any asin asinh atan atan2 atanh bfloat16 bool byte "
           "cdouble ceil cfloat char copysign cos cosh dequantize div double eig eq erf erfc exp expm1 float floor "
           "fmod frexp gcd ge gt half index int ipu isfinite isinf isnan ldexp le lgamma log log10 log1p long "
           "lstsq lt lu mtia mul mul_ ne neg new new_tensor pow remainder retain_grad round select short sin "
           "sinh solve sort split sqrt sub sum symeig tan tanh to_sparse_coo unique unsafe_split "
           "unsafe_split_with_sizes values xpu"),
    "shape": "shape ndim nbytes size dim ndimension numel nelement __len__ is_same_size",
    "static": ("dtype layout device is_cpu is_cuda is_ipu is_maia is_meta is_mps is_mtia is_xla is_xpu is_vulkan "
               "is_mkldnn is_nested is_quantized is_sparse is_sparse_csr itemsize volatile _has_symbolic_sizes_strides "
               "_python_dispatch is_floating_point is_complex is_signed element_size get_device type dense_dim "
               "sparse_dim _dimI _dimV _nnz is_coalesced is_distributed _is_zerotensor q_per_channel_axis q_scale "
               "q_zero_point qscheme __array_priority__"),
    "history": "is_leaf grad_fn requires_grad output_nr retains_grad _is_view _base _version",
    "input": "is_inference is_conj is_neg is_pinned is_shared grad_dtype name",
    "layout": "stride is_contiguous storage_offset dim_order",
    "data": ("__bool__ __nonzero__ __int__ __long__ __index__ __float__ __complex__ __contains__ __array__ "
             "__repr__ __str__ __format__ item tolist numpy allclose equal is_nonzero"),
    "break": ("grad _grad _grad_fn _backward_hooks _post_accumulate_grad_hooks __cuda_array_interface__ _cdata "
              "data_ptr const_data_ptr untyped_storage storage _typed_storage _use_count is_set_to backward "
              "register_hook register_post_accumulate_grad_hook reinforce record_stream share_memory_ apply_ "
              "map_ map2_ __dlpack__ __dlpack_c_exchange_api__ __deepcopy__ __reduce__ __reduce_ex__ "
              "_reduce_ex_internal __getstate__ __setstate__ __array_wrap__ _view_func _view_func_unsafe "
              "_rev_view_func_unsafe storage_type __dlpack_device__"),
}.items():
    for _n in _names.split():
        CLASSES[_n] = _cls


def _returns_tensors(name: str) -> bool:
    """Whether `name` is an aten op with an overload returning tensors (a traced call)."""
    op = getattr(torch.ops.aten, name, None)
    if op is None:
        return False
    try:
        return any("Tensor" in str(r.type) for ov in op.overloads() for r in getattr(op, ov)._schema.returns)
    except Exception:  # noqa: BLE001  (not an op packet)
        return False


def breaks() -> dict:
    """{the function the TracingMode sees when the attribute is read: its name} for the break class."""
    out = {}
    for name, cls in CLASSES.items():
        attr = getattr(T, name, None) if cls == "break" else None
        if attr is None:
            continue
        key = attr.__get__ if isinstance(attr, property) or type(attr).__name__ == "getset_descriptor" else attr
        try:
            out[key] = name
        except TypeError:  # unhashable: never seen as a torch function
            pass
    return out


def setters() -> dict:
    """{the function the TracingMode sees when the attribute is assigned: its name} for every
    attribute of torch.Tensor that can be assigned (`t.grad = g`, `t.data = d`, `t.real = r`)."""
    out = {}
    for name in dir(torch._C.TensorBase):
        attr = getattr(torch._C.TensorBase, name, None)
        if type(attr).__name__ == "getset_descriptor" or isinstance(attr, property):
            out[attr.__set__] = name
    return out


# ops whose binding skips __torch_function__ (torch 2.x's `Tensor.set_`): no TorchFunctionMode ever
# sees them, so on a FakeTensor they would run on its meta storage, unrecorded (route_to_mode)
NO_TORCH_FUNCTION = ("set_",)


def route_to_mode(cls) -> None:
    """Give `cls` (FakeTensor) its own method for each op of NO_TORCH_FUNCTION, which hands the call
    to the active TorchFunctionMode as torch does for every other op (with no mode: torch's own)."""
    for name in NO_TORCH_FUNCTION:
        setattr(cls, name, _dispatching(getattr(torch._C.TensorBase, name)))


def _dispatching(original):
    def method(self, *args, **kwargs):
        if torch._C._is_torch_function_mode_enabled():
            return torch.overrides.handle_torch_function(original, (self,), self, *args, **kwargs)
        return original(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = original.__name__
    method.__doc__ = original.__doc__
    return method


def classify(name: str) -> str | None:
    """The class of attribute `name` of torch.Tensor (None: not classified)."""
    if name in CLASSES:
        return CLASSES[name]
    return "op" if _returns_tensors(name) else None

__all__ = ["CLASSES", "HANDLERS", "NO_TORCH_FUNCTION", "TracedGradFn", "classify", "route_to_mode", "setters",
           "traced_grad_fn"]
