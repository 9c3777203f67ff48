"""What the trace read from its inputs (the facts the guards must check), and the meta stand-ins it
reads them through."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..symbolic.sources import Source
from .errors import GraphBreak


@dataclass
class TensorInput:
    source: Source
    dtype: Any
    device: Any
    requires_grad: bool
    sizes: tuple  # per dim: the int when static, None when symbolic (shape guards cover it)
    strides: tuple  # the example's strides
    contiguous: bool
    tensor_type: type  # torch.Tensor or nn.Parameter
    is_param: bool = False
    example: Any = None  # the parameter/buffer object itself (identity makes its guard cheap)
    storage_offset: int = 0  # the example's
    example_shape: tuple = ()  # the example's sizes


@dataclass
class ValueInput:
    """A non-tensor value the trace specialized on (or an int made symbolic)."""

    source: Source
    value: Any
    kind: str  # "const": == value; "type": type(...) is; "id": is the same object; "symint": int, any value
    extra: dict = field(default_factory=dict)


def input_meta(t: torch.Tensor) -> torch.Tensor:
    """The meta stand-in of a real tensor the trace reads: its layout, and the autograd state that
    decides what ops on it may do (a non-leaf stays a non-leaf, so in-place ops on it are allowed
    as eager allows them; an inference tensor stays one)."""
    if t.is_inference():
        with torch.inference_mode():
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    if not t.requires_grad:
        return meta
    if t.is_leaf:
        return meta.requires_grad_(True)
    src = torch.empty((), dtype=t.dtype, device="meta", requires_grad=True)
    try:
        with torch.enable_grad():
            meta.copy_(src)  # a non-leaf with its own layout (CopyBackwards), not a view
        return meta
    except RuntimeError:  # an overlapping layout (expanded): a leaf that requires grad
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta").requires_grad_(True)


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def check_supported(t: torch.Tensor, source: Source) -> None:
    """Dense tensors only: sparse, quantized and nested tensors run eagerly, saying which argument. So
    do tensor subclasses: the trace's stand-in is a plain tensor, so a subclass's `__torch_function__`
    (its own ops, its result types) and `isinstance(x, Sub)` would be traced as a plain tensor's."""
    kind = None
    if type(t) not in _PLAIN_TENSORS:
        raise GraphBreak(f"argument {source.pretty()} is a tensor subclass ({type(t).__qualname__}), which "
                         "dynashape traces as a plain tensor only: its own torch function and types would be "
                         "lost", None, "The call runs eagerly. Pass `x.as_subclass(torch.Tensor)` to compile it.")
    if t.is_nested:
        kind = "nested"
    elif t.layout is not torch.strided:
        kind = f"sparse ({str(t.layout).replace('torch.', '')})"
    elif t.is_quantized:
        kind = "quantized"
    if kind is not None:
        raise GraphBreak(f"argument {source.pretty()} is a {kind} tensor, which dynashape does not support "
                         "(dense tensors only)", None, "The call runs eagerly.")
