"""Pointwise ops: unary, binary and ternary, with broadcasting; in-place variants.

The output shape is the broadcast of the tensor arguments' shapes (Python
scalars do not take part). An in-place op keeps `self`'s shape, and the other
operands must broadcast to it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import broadcast, check_equal, is_tensor, shape
from .registry import lookup, register

T = torch.Tensor

UNARY = """abs absolute acos arccos acosh arccosh angle asin arcsin asinh arcsinh atan arctan atanh arctanh
bitwise_not ceil clone conj cos cosh deg2rad digamma erf erfc erfinv exp exp2 expm1 fix floor frac i0 isfinite
isinf isnan isneginf isposinf isreal lgamma log log10 log1p log2 logical_not logit nan_to_num neg negative
positive rad2deg reciprocal relu round rsqrt sgn sigmoid sign signbit sin sinc sinh sqrt square tan tanh trunc
detach alias contiguous bernoulli""".split()

BINARY = """add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow float_power
atan2 arctan2 hypot logaddexp logaddexp2 maximum minimum fmax fmin copysign nextafter xlogy
eq ne lt le gt ge greater greater_equal less less_equal not_equal isclose
logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift
heaviside rsub""".split()

DUNDER_BINARY = """__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __div__
__floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__
__lshift__ __rshift__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__""".split()

DUNDER_INPLACE = """__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __iand__ __ior__
__ixor__ __ilshift__ __irshift__""".split()

ACTIVATIONS = """relu relu6 gelu silu mish sigmoid tanh softplus softsign elu selu celu leaky_relu hardtanh
hardsigmoid hardswish hardshrink softshrink tanhshrink logsigmoid threshold rrelu
dropout alpha_dropout feature_alpha_dropout dropout1d dropout2d dropout3d""".split()


def _broadcast_args(*args, **kwargs):
    shapes = [shape(a) for a in list(args) + list(kwargs.values()) if is_tensor(a)]
    return broadcast(*shapes)


def _inplace(self, *args, **kwargs):
    out = shape(self)
    for a in list(args) + list(kwargs.values()):
        if is_tensor(a):
            b = broadcast(out, shape(a))
            if len(b) != len(out):
                raise RuntimeError("output with shape doesn't match the broadcast shape")
            for x, y in zip(b, out):
                check_equal(x, y)
    return out


def _first(x, *args, **kwargs):
    return shape(x)


register(*lookup(torch, *UNARY), *lookup(T, *UNARY), *lookup(T, "__invert__", "__neg__", "__abs__", "__pos__"), *lookup(torch.special, "expit", "erf", "logit"))(_first)
register(*lookup(T, *[n + "_" for n in UNARY if n not in ("detach", "alias", "contiguous")]),
         *lookup(T, "detach_", "requires_grad_", "zero_", "fill_", "uniform_", "normal_", "bernoulli_",
                 "random_", "exponential_", "clamp_", "clamp_min_", "clamp_max_", "clip_", "relu_",
                 "sigmoid_", "tanh_", "masked_fill_"),
         *lookup(torch, "relu_", "sigmoid_", "tanh_"),
         *lookup(F, "relu_", "elu_", "leaky_relu_", "hardtanh_", "threshold_"))(_inplace)
register(*lookup(T, "retain_grad"))(lambda x: [])  # no result, no size read: nothing to specialize
register(*lookup(torch, *BINARY), *lookup(T, *BINARY), *lookup(T, *DUNDER_BINARY),
         *lookup(torch, "where", "lerp", "addcmul", "addcdiv", "clamp", "clip", "clamp_min", "clamp_max",
                 "masked_fill"),
         *lookup(T, "where", "lerp", "addcmul", "addcdiv", "clamp", "clip", "clamp_min", "clamp_max",
                 "masked_fill"))(_broadcast_args)
register(*lookup(T, *[n + "_" for n in BINARY]), *lookup(T, *DUNDER_INPLACE),
         *lookup(T, "lerp_", "addcmul_", "addcdiv_", "copy_"))(_inplace)
register(*lookup(F, *ACTIVATIONS), *lookup(torch, "dropout", "alpha_dropout", "feature_dropout", "celu",
                                         "selu", "rrelu", "threshold", "hardshrink"),
         *lookup(torch._C._nn, "gelu", "silu", "mish", "softplus", "elu", "leaky_relu", "hardtanh",
                 "hardsigmoid", "hardswish", "softshrink", "log_sigmoid", "relu6"))(_first)

