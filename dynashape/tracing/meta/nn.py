"""Meta rules: neural-network layers (see registry.py for the rule contract).

Python-level `F.*` functions get a rule of their own (one graph node with the
user's arguments, read through the function's signature); the C functions
they call (`torch._C._nn.*`, `torch.*`) get one too, for direct calls.
Window sizes use floor division, as torch does:

    out = (L + 2*p - d*(k - 1) - 1) // s + 1
"""
from __future__ import annotations

import inspect
import math
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from ...symbolic.symtypes import SymBase, sym_min
from .common import broadcast, canonical_strides, check_equal, prod, same, shape
from .registry import lookup, register

NN = torch._C._nn


def _ntuple(x, n: int, what: str = "argument") -> tuple:
    """An int (or SymInt) or a sequence of 1 or n of them as an n-tuple."""
    if isinstance(x, (list, tuple)):
        if len(x) == 1:
            return tuple(x) * n
        if len(x) != n:
            raise RuntimeError(f"{what} must have {n} elements, got {len(x)}")
        return tuple(x)
    return (x,) * n


def python_rule(*fns, like=None):
    """Register `rule(a)` for Python functions: `a` holds their bound arguments, defaults applied
    (`like`: a function with the same parameters, for `boolean_dispatch` wrappers taking *args)."""
    def deco(rule):
        for fn in fns:
            sig = inspect.signature(like or fn)

            def bound(*args, _sig=sig, **kwargs):
                b = _sig.bind(*args, **kwargs)
                b.apply_defaults()
                return rule(b.arguments)
            register(fn)(bound)
        return rule
    return deco


def _window(L, k, s, p, d, ceil_mode=False):
    """Output length of a sliding window (conv, pool, unfold), as torch's pooling_output_shape."""
    num = L + 2 * p - d * (k - 1) - 1
    if ceil_mode:
        num = num + (s - 1)
    out = num + 1 if isinstance(s, int) and s == 1 else num // s + 1
    if ceil_mode and not _known_le(p + s, d * (k - 1) + 1):
        # torch drops a last window that would start in the right padding, i.e. when
        # (out - 1) * s >= L + p; as p <= d*(k-1) + 1 that is min(out, ceil((L + p) / s)), with no guard
        out = sym_min(out, (L + p + s - 1) // s)
    return out


def _known_le(a, b) -> bool:
    """a <= b for plain ints (a symbolic window parameter gets the general formula)."""
    return isinstance(a, int) and isinstance(b, int) and a <= b


# ------------------------------------------------------------------ embedding and normalization
@python_rule(F.embedding)
def embedding(a):
    return shape(a["input"]) + shape(a["weight"])[1:]


@register(torch.embedding)
def embedding_c(weight, indices, *args, **_):
    return shape(indices) + shape(weight)[1:]


def _check_trailing(x: tuple, normalized_shape) -> tuple:
    ns = (normalized_shape,) if not isinstance(normalized_shape, (list, tuple)) else tuple(normalized_shape)
    if len(ns) > len(x):
        raise RuntimeError(f"normalized_shape {ns} has more dims than the input {x}")
    for a, b in zip(x[len(x) - len(ns):], ns):
        check_equal(a, b)
    return x


@python_rule(*lookup(F, "layer_norm", "rms_norm"))
def layer_norm(a):
    return _check_trailing(shape(a["input"]), a["normalized_shape"])


@register(torch.layer_norm, *lookup(torch, "rms_norm"))
def layer_norm_c(input, normalized_shape, *args, **_):
    return _check_trailing(shape(input), normalized_shape)


def _channels(x: tuple, *params) -> tuple:
    """Per-channel parameters (weight, running stats) must match dim 1 of the input."""
    for t in params:
        if t is not None and len(x) > 1:
            check_equal(x[1], shape(t)[0])
    return x


@python_rule(F.batch_norm, F.instance_norm)
def batch_norm(a):
    return _channels(shape(a["input"]), a["weight"], a["bias"], a["running_mean"], a["running_var"])


@register(torch.batch_norm, torch.instance_norm)
def batch_norm_c(input, weight=None, bias=None, running_mean=None, running_var=None, *args, **_):
    return _channels(shape(input), weight, bias, running_mean, running_var)


@python_rule(F.group_norm)
def group_norm(a):
    return _channels(shape(a["input"]), a["weight"], a["bias"])


@register(torch.group_norm)
def group_norm_c(input, num_groups, weight=None, bias=None, *args, **_):
    return _channels(shape(input), weight, bias)


@python_rule(F.normalize, F.local_response_norm)
def same_shape(a):
    return shape(a["input"])


# ------------------------------------------------------------------ convolution
def _conv_shape(x: tuple, w: tuple, stride, padding, dilation, groups, transposed=False, output_padding=0):
    n = len(w) - 2
    if len(x) not in (n + 1, n + 2):
        raise RuntimeError(f"expected a {n + 1}-D (unbatched) or {n + 2}-D (batched) input, got {len(x)}-D")
    s, d, k = _ntuple(stride, n, "stride"), _ntuple(dilation, n, "dilation"), w[2:]
    spatial = x[-n:]
    if transposed:
        check_equal(x[-n - 1], w[0])
        p, op = _ntuple(padding, n, "padding"), _ntuple(output_padding, n, "output_padding")
        out = tuple((L - 1) * s_ - 2 * p_ + d_ * (k_ - 1) + op_ + 1
                    for L, k_, s_, p_, d_, op_ in zip(spatial, k, s, p, d, op))
        return x[:-n - 1] + (w[1] * groups,) + out
    check_equal(x[-n - 1], w[1] * groups)
    if padding == "same":
        out = spatial
    else:
        p = (0,) * n if padding == "valid" else _ntuple(padding, n, "padding")
        out = tuple(_window(L, k_, s_, p_, d_) for L, k_, s_, p_, d_ in zip(spatial, k, s, p, d))
    channels = 0 if same(x[-n - 1], 0) else w[0]  # torch: an input of 0 channels gives 0 out channels
    return x[:-n - 1] + (channels,) + out


@register(*lookup(torch, "conv1d", "conv2d", "conv3d"))
def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv_shape(shape(input), shape(weight), stride, padding, dilation, groups)


@register(*lookup(torch, "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"))
def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_shape(shape(input), shape(weight), stride, padding, dilation, groups, True, output_padding)


@register(torch.convolution)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return _conv_shape(shape(input), shape(weight), stride, padding, dilation, groups, transposed,
                       output_padding)


# ------------------------------------------------------------------ pooling
def _pool_shape(input, n, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> tuple:
    x = shape(input)
    k = _ntuple(kernel_size, n, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) else _ntuple(stride, n, "stride")
    p, d = _ntuple(padding, n, "padding"), _ntuple(dilation, n, "dilation")
    out = tuple(_window(L, *args, ceil_mode) for L, *args in zip(x[-n:], k, s, p, d))
    return x[:-n] + out


def _max_pool_rule(n, with_indices):
    def rule(a):
        out = _pool_shape(a["input"], n, a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                          a["ceil_mode"])
        return [out, out] if with_indices or a.get("return_indices") else out
    return rule


def _max_pool_c(n, with_indices):
    def rule(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
        out = _pool_shape(input, n, kernel_size, stride, padding, dilation, ceil_mode)
        return [out, out] if with_indices else out
    return rule


def _avg_pool_c(n):
    def rule(input, kernel_size, stride=None, padding=0, ceil_mode=False, *args, **_):
        return _pool_shape(input, n, kernel_size, stride, padding, 1, ceil_mode)
    return rule


def _adaptive_shape(input, output_size, n) -> tuple:
    x = shape(input)
    sizes = _ntuple(output_size, n, "output_size")
    return x[:-n] + tuple(L if o is None else o for L, o in zip(x[-n:], sizes))  # None keeps the input's


def _adaptive_rule(n, with_indices):
    def rule(a):
        out = _adaptive_shape(a["input"], a["output_size"], n)
        return [out, out] if with_indices or a.get("return_indices") else out
    return rule


def _adaptive_c(n, with_indices):
    def rule(input, output_size):
        out = _adaptive_shape(input, output_size, n)
        return [out, out] if with_indices else out
    return rule


for _n in (1, 2, 3):
    python_rule(*lookup(F, f"max_pool{_n}d"), like=getattr(F, f"max_pool{_n}d_with_indices"))(
        _max_pool_rule(_n, False))
    python_rule(*lookup(F, f"max_pool{_n}d_with_indices"))(_max_pool_rule(_n, True))
    register(*lookup(torch, f"max_pool{_n}d"))(_max_pool_c(_n, False))
    register(*lookup(torch, f"max_pool{_n}d_with_indices"),
             *lookup(NN, f"max_pool{_n}d_with_indices"))(_max_pool_c(_n, True))
    register(*lookup(F, f"avg_pool{_n}d"))(_avg_pool_c(_n))  # C functions (torch.avg_pool1d, _nn.avg_pool2d)
    python_rule(*[f for f in lookup(F, f"adaptive_avg_pool{_n}d") if inspect.isfunction(f)])(
        _adaptive_rule(_n, False))
    register(*lookup(torch, f"adaptive_avg_pool{_n}d", f"_adaptive_avg_pool{_n}d"),
             *lookup(NN, f"adaptive_avg_pool{_n}d"))(_adaptive_c(_n, False))
    python_rule(*lookup(F, f"adaptive_max_pool{_n}d"), like=getattr(F, f"adaptive_max_pool{_n}d_with_indices"))(
        _adaptive_rule(_n, False))
    python_rule(*lookup(F, f"adaptive_max_pool{_n}d_with_indices"))(_adaptive_rule(_n, True))
    register(*lookup(torch, f"adaptive_max_pool{_n}d"), *lookup(NN, f"adaptive_max_pool{_n}d"))(
        _adaptive_c(_n, True))


# ------------------------------------------------------------------ attention
@register(F.scaled_dot_product_attention)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                 scale=None, enable_gqa=False):
    q, k, v = shape(query), shape(key), shape(value)
    check_equal(q[-1], k[-1])
    check_equal(k[-2], v[-2])
    if enable_gqa and len(q) >= 3:  # key/value heads repeat to the query's
        k, v = k[:-3] + (q[-3],) + k[-2:], v[:-3] + (q[-3],) + v[-2:]
    return broadcast(q[:-2], k[:-2], v[:-2]) + (q[-2], v[-1])


# ------------------------------------------------------------------ padding, one_hot, shuffles
def _pad_shape(input, pad) -> tuple:
    x = list(shape(input))
    if len(pad) % 2 or len(pad) // 2 > len(x):
        raise RuntimeError(f"padding length {len(pad)} does not fit a {len(x)}-D input")
    for i in range(len(pad) // 2):  # pairs run from the last dim backwards
        x[-1 - i] = x[-1 - i] + pad[2 * i] + pad[2 * i + 1]
    return tuple(x)


def _pad_layout(input, pad) -> None:
    """Constant padding branches on its amounts: when none is positive it returns the input (narrowed
    by the negative ones) cloned, in the input's layout; else a new tensor in the suggested memory
    format, row-major for a transposed input. The meta kernel decides on the example's amounts, and
    `stride()` / `is_contiguous()` of the result may be read: where the input's layout is not
    torch.empty's (the two branches then lay the result out differently), the branch is decided here,
    guarded (`F.pad(x.mT, (0, n % 3))`: n % 3 == 0 keeps x.mT's layout, fuzz seed 25112940)."""
    if not any(isinstance(p, SymBase) for p in pad):
        return  # plain amounts: the same branch on every call
    if tuple(torch.Tensor.stride(input)) == canonical_strides(tuple(torch.Tensor.size(input))):
        return  # row-major either way
    all(p <= 0 for p in pad)  # each comparison decided (guarded) until the first positive amount


@python_rule(F.pad)
def pad(a):
    if a.get("mode", "constant") == "constant":
        _pad_layout(a["input"], a["pad"])
    return _pad_shape(a["input"], a["pad"])


@register(torch.constant_pad_nd)
def constant_pad(input, pad, *args, **_):
    _pad_layout(input, pad)
    return _pad_shape(input, pad)


@register(NN.pad)
def pad_nn(input, pad, mode="constant", *args, **_):
    if mode == "constant":
        _pad_layout(input, pad)
    return _pad_shape(input, pad)


@register(*lookup(NN, *[f"{m}_pad{n}d" for m in ("reflection", "replication") for n in (1, 2, 3)]),
          *lookup(NN, "_pad_circular"))
def pad_c(input, pad, *args, **_):
    return _pad_shape(input, pad)


@register(F.one_hot)
def one_hot(tensor, num_classes=-1):
    # num_classes=-1 reads the data: the meta run fails first and the call is not traced
    return shape(tensor) + (num_classes,)


@register(F.pixel_shuffle)
def pixel_shuffle(input, upscale_factor):
    *b, c, h, w = shape(input)
    r = upscale_factor
    return tuple(b) + (c // (r * r), h * r, w * r)


@register(F.pixel_unshuffle)
def pixel_unshuffle(input, downscale_factor):
    *b, c, h, w = shape(input)
    r = downscale_factor
    return tuple(b) + (c * r * r, h // r, w // r)


# ------------------------------------------------------------------ unfold / fold (im2col / col2im)
def _im2col(input, kernel_size, dilation, padding, stride) -> tuple:
    x = shape(input)
    k, d, p, s = (_ntuple(v, 2) for v in (kernel_size, dilation, padding, stride))
    blocks = prod(_window(L, *args) for L, *args in zip(x[-2:], k, s, p, d))
    return x[:-3] + (x[-3] * k[0] * k[1], blocks)


def _col2im(input, output_size, kernel_size, dilation, padding, stride) -> tuple:
    x = shape(input)
    o, k, d, p, s = (_ntuple(v, 2) for v in (output_size, kernel_size, dilation, padding, stride))
    check_equal(x[-1], prod(_window(L, *args) for L, *args in zip(o, k, s, p, d)))  # the number of blocks
    return x[:-2] + (x[-2] // (k[0] * k[1]),) + o


@python_rule(F.unfold)
def unfold(a):
    return _im2col(a["input"], a["kernel_size"], a["dilation"], a["padding"], a["stride"])


@python_rule(F.fold)
def fold(a):
    return _col2im(a["input"], a["output_size"], a["kernel_size"], a["dilation"], a["padding"], a["stride"])


register(*lookup(NN, "im2col"))(_im2col)
register(*lookup(NN, "col2im"))(_col2im)


# ------------------------------------------------------------------ interpolation
def _scaled(L, scale: float):
    """floor(L * scale) as torch computes it (in double)."""
    r = Fraction(scale)  # the double's exact value
    if r.denominator <= 1024:  # L * scale is exact in double: floor is integer arithmetic
        return (L * r.numerator) // r.denominator
    return math.floor(L * scale)  # FloorToInt of a float expression


def _resized(input, size, scale_factors) -> tuple:
    x = shape(input)
    n = len(x) - 2
    if size is not None:
        return x[:2] + _ntuple(size, n, "size")
    if scale_factors is None:
        raise RuntimeError("either size or scale_factor should be defined")
    return x[:2] + tuple(_scaled(L, float(f)) for L, f in zip(x[2:], _ntuple(scale_factors, n, "scale_factor")))


@python_rule(F.interpolate)
def interpolate(a):
    return _resized(a["input"], a["size"], a["scale_factor"])


_UPSAMPLE = [f"upsample_{m}" for m in ("nearest1d", "nearest2d", "nearest3d", "linear1d", "bilinear2d",
                                       "bicubic2d", "trilinear3d")] + \
    [f"_upsample_{m}" for m in ("nearest_exact1d", "nearest_exact2d", "nearest_exact3d", "bilinear2d_aa",
                                "bicubic2d_aa")]


@register(*lookup(NN, *_UPSAMPLE))
def upsample(input, output_size=None, *args, scale_factors=None, **_):
    if output_size is None:  # the `.vec` overload: the scale factors are its last list argument
        scale_factors = next((x for x in args if isinstance(x, (list, tuple))), scale_factors)
    return _resized(input, output_size, scale_factors)


# ------------------------------------------------------------------ losses
def _reduce(out: tuple, reduction) -> tuple:
    if isinstance(reduction, int):  # the C functions take torch.nn._reduction's enum
        reduction = ("none", "mean", "sum")[reduction]
    return out if reduction == "none" else ()


def _legacy(a) -> str:
    if a.get("size_average") is not None or a.get("reduce") is not None:
        return _reduction.legacy_get_string(a.get("size_average"), a.get("reduce"))
    return a["reduction"]


def _class_loss(input, target) -> tuple:
    """Class-index targets have the input's shape without the class dim; probabilities its shape."""
    x, t = shape(input), shape(target)
    out = x[:1] + x[2:] if len(x) >= 2 else ()
    want = x if len(t) == len(x) and len(x) != len(out) else out
    if len(t) != len(want):
        raise RuntimeError(f"loss: target of shape {t} does not fit input of shape {x}")
    for a, b in zip(t, want):
        check_equal(a, b)
    return out


def _elementwise_loss(*tensors) -> tuple:
    return broadcast(*[shape(t) for t in tensors if t is not None])


def _same_size(input, target) -> tuple:
    x, t = shape(input), shape(target)
    if len(x) != len(t):
        raise ValueError(f"target size {t} must be the same as input size {x}")
    for a, b in zip(x, t):
        check_equal(a, b)
    return x


@python_rule(F.cross_entropy, F.nll_loss)
def class_loss(a):
    return _reduce(_class_loss(a["input"], a["target"]), _legacy(a))


@python_rule(*lookup(F, "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss"))
def elementwise_loss(a):
    return _reduce(_elementwise_loss(a["input"], a["target"]), _legacy(a))


@python_rule(F.kl_div)
def kl_div(a):
    red = _legacy(a)
    return () if red == "batchmean" else _reduce(_elementwise_loss(a["input"], a["target"]), red)


@python_rule(F.binary_cross_entropy, F.binary_cross_entropy_with_logits)
def bce(a):
    return _reduce(_same_size(a["input"], a["target"]), _legacy(a))


def _c_loss(kind: str, at: int):
    """A C loss whose `reduction` (an enum int) is positional argument `at`."""
    def rule(input, target, *args, **kwargs):
        reduction = args[at - 2] if len(args) > at - 2 else kwargs.get("reduction", 1)
        if kind == "class":
            return _reduce(_class_loss(input, target), reduction)
        weights = [t for t in args if isinstance(t, torch.Tensor)] + \
            [kwargs[k] for k in ("weight", "pos_weight") if kwargs.get(k) is not None]
        return _reduce(_elementwise_loss(input, target, *weights), reduction)
    return rule


for _name, (_kind, _at) in {
        "cross_entropy_loss": ("class", 3), "nll_loss": ("class", 3), "nll_loss_nd": ("class", 3),
        "nll_loss2d": ("class", 3), "mse_loss": ("elementwise", 2), "l1_loss": ("elementwise", 2),
        "smooth_l1_loss": ("elementwise", 2), "huber_loss": ("elementwise", 2),
        "soft_margin_loss": ("elementwise", 2), "binary_cross_entropy": ("elementwise", 3),
        "binary_cross_entropy_with_logits": ("elementwise", 4), "kl_div": ("elementwise", 2)}.items():
    register(*lookup(NN, _name), *lookup(torch, _name))(_c_loss(_kind, _at))
