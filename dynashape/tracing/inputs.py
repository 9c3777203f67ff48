"""What the trace read from its inputs: the facts the guards must check."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..symbolic.sources import Source


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
