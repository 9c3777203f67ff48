"""What an op's result shares with its inputs: new memory, a view or a copy by layout, or the
input itself changed in place. The tracer decides aliasing guards, autograd history and whether a
call may be re-run from these; the fused backend asks `is_inplace` of graph calls."""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch (our own frames get its answer anyway)
import torch

from .meta.common import canonical_strides

INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                    "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                    "__imatmul__"}


VIEW_OR_COPY = {"reshape", "reshape_as", "flatten", "ravel", "contiguous", "unflatten", "view_as_real"}
# ops whose result is always new memory, whatever their inputs (factories, copies, arithmetic); not
# dropout: eval mode and p=0 return the input itself
FRESH = {"clone", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "tensor", "zeros_like",
          "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "eye", "linspace", "cat", "stack"}
COMPUTES = {"add", "sub", "mul", "div", "neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "gelu", "silu",
             "matmul", "mm", "bmm", "linear", "softmax", "log_softmax", "layer_norm", "sum", "mean", "amax", "amin",
             "pow", "sqrt", "rsqrt", "abs", "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "cumsum",
             "__add__", "__sub__", "__mul__", "__truediv__", "__neg__", "__matmul__", "__radd__", "__rsub__",
             "__rmul__", "__rtruediv__", "__pow__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
             "embedding", "scaled_dot_product_attention", "clamp", "triu", "tril", "roll", "flip",
             "repeat", "baddbmm", "addmm", "einsum", "conv1d", "conv2d", "one_hot", "nonzero", "index_select",
             "gather", "bitwise_and", "bitwise_or", "logical_and", "logical_or", "logical_not", "__and__",
             "__or__", "__invert__", "max", "min", "argmax", "prod", "var", "std", "norm", "erf", "floor",
             "ceil", "round", "sign", "reciprocal", "minimum", "maximum", "addcmul", "lerp", "batch_norm",
             "instance_norm", "group_norm"}
FRESH |= COMPUTES


def is_inplace(func, kwargs) -> bool:
    """An in-place method (`add_`), an in-place dunder (`__iadd__`, `__setitem__`), an `out=` call, or an
    operator whose schema writes an argument (`torch.ops.aten.add_.Tensor`, a custom op's `mutates_args`)."""
    if isinstance(func, torch._ops.OpOverload):
        return func._schema.is_mutable
    name = getattr(func, "__name__", "")
    if name in INPLACE_DUNDERS or (name.endswith("_") and not name.startswith("_")):
        return True
    return kwargs.get("out") is not None


def written(func, args, kwargs):
    """What an in-place call changes: the schema's written arguments, the `out=` tensors, or `self`."""
    if isinstance(func, torch._ops.OpOverload):
        params = func._schema.arguments
        return [args[i] if i < len(args) else kwargs.get(p.name) for i, p in enumerate(params)
                if p.alias_info is not None and p.alias_info.is_write]
    if kwargs.get("out") is not None:
        return kwargs["out"]
    return args[0] if args else None


def odd_layout(meta: torch.Tensor) -> bool:
    """Empty or size-1 dims whose meta strides are not torch.empty's: device kernels may differ."""
    shape, strides = tuple(meta.shape), meta.stride()
    if not any(n <= 1 for n in shape):
        return False
    canon = canonical_strides(shape)
    return any((n <= 1 or 0 in shape) and st != c for n, st, c in zip(shape, strides, canon))
