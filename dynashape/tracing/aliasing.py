"""What an op's result shares with its inputs: new memory, a view or a copy by layout, or the
input itself changed in place (which calls write what: tracing/writes.py). The tracer decides
aliasing guards, autograd history and whether a call may be re-run from these; the backends ask
`is_inplace` / `written` of graph calls."""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch (our own frames get its answer anyway)
import torch

from ..symbolic.sources import ModuleMemberSource
from .meta.common import canonical_strides
from .writes import INPLACE_DUNDERS, written as _written, writes as _writes  # noqa: F401 (INPLACE_DUNDERS: re-exported)

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
             "repeat", "baddbmm", "addmm", "conv1d", "conv2d", "one_hot", "nonzero", "index_select",
             "gather", "bitwise_and", "bitwise_or", "logical_and", "logical_or", "logical_not", "__and__",
             "__or__", "__invert__", "max", "min", "argmax", "prod", "var", "std", "norm", "erf", "floor",
             "ceil", "round", "sign", "reciprocal", "minimum", "maximum", "addcmul", "lerp", "batch_norm",
             "instance_norm", "group_norm"}
FRESH |= COMPUTES
# not einsum: of one operand it may return a view of it (`einsum("ij->ji", x)` is x.permute(1, 0)),
# of two or more it computes a product (new memory)


def returns_fresh(short: str, args) -> bool:
    """Whether a call's results are new memory whatever its inputs (`short`: the op's name)."""
    if short in FRESH:
        return True
    return short == "einsum" and sum(isinstance(a, torch.Tensor) for a in _operands(args)) >= 2


def _operands(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a


def is_inplace(func, kwargs, args=None) -> bool:
    """Whether the call changes an argument in place (tracing/writes.py has the table): an in-place
    method (`add_`), an in-place dunder, `out=`, `inplace=True`, running statistics, a schema that
    writes (`torch.ops.aten.add_.Tensor`, a custom op's `mutates_args`). Pass `args`: without them
    a flag given by position (`F.relu(x, True)`, `F.batch_norm(..., True)`) is not seen."""
    return _writes(func, args, kwargs)


def written(func, args, kwargs) -> list:
    """What an in-place call changes: the written arguments (tensors or lists of them), `out=`."""
    return _written(func, args, kwargs)


def shared_inputs(input_tensors):
    """(source, earlier source) of two distinct input tensors over one storage (a module's
    parameters and buffers aside), else None. `input_tensors`: (source, real tensor) pairs."""
    seen: dict = {}
    for src, t in input_tensors:
        if isinstance(src, ModuleMemberSource) or t.untyped_storage().nbytes() == 0:
            continue
        key = t.untyped_storage().data_ptr()
        if key in seen:
            return seen[key], src
        seen[key] = src
    return None


def odd_layout(meta: torch.Tensor) -> bool:
    """Empty or size-1 dims whose meta strides are not torch.empty's: device kernels may differ."""
    shape, strides = tuple(meta.shape), meta.stride()
    if not any(n <= 1 for n in shape):
        return False
    canon = canonical_strides(shape)
    return any((n <= 1 or 0 in shape) and st != c for n, st, c in zip(shape, strides, canon))
