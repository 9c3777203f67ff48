"""Direct `torch.ops.aten` calls and the few ops that exist only there.

A program (or a library it calls) may call an ATen operator directly:
`torch.ops.aten.slice.Tensor(x, 0, 1, n)`, `torch.ops.aten.mul.Tensor(x, 2)`. Without a rule
the fallback would specialize every size. ATen operators whose arguments follow the torch
function of the same name (positionally, and by keyword) reuse that function's rule, for each
overload except `.out`; `slice` and `nonzero_static` get their own rules.

>>> torch.ops.aten.slice.Tensor(x, 0, 1, x.size(0))   # (s0, 4) -> (s0 - 1, 4), no guard
"""
from __future__ import annotations

import torch

from .common import norm_dim, shape
from .indexing import slice_length
from .registry import RULES, lookup, register

T = torch.Tensor

# ATen names whose schema matches the torch function or Tensor method of the same name
SAME_AS_TORCH = (
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "pow", "relu", "sigmoid", "tanh",
    "sin", "cos", "clamp", "maximum", "minimum", "where", "eq", "ne", "lt", "le", "gt", "ge", "logical_not",
    "sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "softmax", "log_softmax",
    "view", "reshape", "expand", "permute", "transpose", "unsqueeze", "squeeze", "select", "flatten", "narrow",
    "cat", "stack", "split", "chunk", "clone", "t", "mm", "bmm", "matmul", "addmm", "linear",
)

OWN_RULES = ("slice", "nonzero_static")


@register(*lookup(torch, "nonzero_static"), *lookup(T, "nonzero_static"))
def nonzero_static(input, *, size, fill_value=-1):
    """`size` rows whatever the data (padded with fill_value): a static shape, no data read."""
    return (size, len(shape(input)))


def aten_slice(self, dim=0, start=None, end=None, step=1):
    sizes = shape(self)
    d = norm_dim(dim, len(sizes))
    return sizes[:d] + (slice_length(sizes[d], start, end, step),) + sizes[d + 1:]


def _overloads(packet):
    for name in packet.overloads():
        if name == "out" or name.endswith("_out") or name.startswith("out"):
            continue
        yield getattr(packet, name)


def _register_aten() -> None:
    aten = torch.ops.aten
    for packet, rule in [(getattr(aten, "slice", None), aten_slice),
                         (getattr(aten, "nonzero_static", None), nonzero_static)]:
        if packet is not None:
            register(packet, *_overloads(packet))(rule)
    for name in SAME_AS_TORCH:
        packet = getattr(aten, name, None)
        rule = RULES.get(getattr(torch, name, None)) or RULES.get(getattr(T, name, None))
        if packet is None or rule is None:
            continue
        for op in (packet, *_overloads(packet)):
            RULES.setdefault(op, rule)


_register_aten()
