"""Reductions, scans, normalizations over a dim, and sorting.

A reduction drops (or, with `keepdim`, sets to 1) the dims it reduces; `dim`
is an int, a tuple/list, or None (all dims). None of these ops branch on a
size, so the rules add no guards: the reduced dims simply leave the shape.
Scans and softmax keep the input's shape; `topk` puts `k` (maybe a SymInt) at
its dim. Ops returning (values, indices) give two shapes.

    x: f32[s0, s1]    x.sum(1) -> f32[s0]    x.max(0, keepdim=True) -> (f32[1, s1], i64[1, s1])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...symbolic.symtypes import sym_max
from .common import broadcast, check_equal, is_tensor, norm_dim, norm_dims, shape
from .registry import lookup, register

T = torch.Tensor
_ABSENT = object()


def reduced(sizes, dim, keepdim=False, empty="all") -> tuple:
    """`sizes` with `dim` reduced. An empty dim list means all dims ("all"), no dims ("none"),
    or all dims kept as 1 ("ones", logsumexp's quirk), depending on the op (as torch's meta kernels)."""
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        if empty == "none":
            return tuple(sizes)
        if empty == "ones":
            return (1,) * len(sizes)
        dim = None
    gone = set(norm_dims(dim, len(sizes)))
    if keepdim:
        return tuple(1 if i in gone else s for i, s in enumerate(sizes))
    return tuple(s for i, s in enumerate(sizes) if i not in gone)


def _arg(args, kwargs, i, name, default=None):
    """The op's argument `name`, passed by keyword or at position `i` of `args` (after the input)."""
    if name in kwargs:
        return kwargs[name]
    return args[i] if len(args) > i else default


def _input(args, kwargs):
    """Split off the input tensor, which torch.X(input=...) may pass by keyword."""
    if args:
        return args[0], args[1:]
    return kwargs.get("input", kwargs.get("self")), ()


# ------------------------------------------------------------------ plain reductions
def _reduction(empty):
    def rule(*args, **kwargs):
        x, args = _input(args, kwargs)
        dim, keepdim = _arg(args, kwargs, 0, "dim"), _arg(args, kwargs, 1, "keepdim", False)
        return reduced(shape(x), dim, bool(keepdim), empty)
    return rule


ALL_WHEN_EMPTY = "sum mean amax amin prod argmax argmin".split()
NONE_WHEN_EMPTY = "nansum nanmean all any".split()

register(*lookup(torch, *ALL_WHEN_EMPTY), *lookup(T, *ALL_WHEN_EMPTY))(_reduction("all"))
register(*lookup(torch, *NONE_WHEN_EMPTY), *lookup(T, *NONE_WHEN_EMPTY))(_reduction("none"))
register(torch.logsumexp, T.logsumexp, *lookup(torch.special, "logsumexp"))(_reduction("ones"))


@register(torch.count_nonzero, T.count_nonzero)
def count_nonzero(x, dim=None):
    return reduced(shape(x), dim)


@register(*lookup(torch, "aminmax"), *lookup(T, "aminmax"))
def aminmax(x, *, dim=None, keepdim=False):
    out = reduced(shape(x), dim, keepdim)
    return [out, out]


# ------------------------------------------------------------------ max / min: three ops in one name
@register(torch.max, torch.min, T.max, T.min)
def max_min(*args, **kwargs):
    """max(x) -> 0-d; max(x, dim, keepdim) -> (values, indices); max(x, other) -> broadcast."""
    x, args = _input(args, kwargs)
    first = _arg(args, kwargs, 0, "other", _ABSENT)
    if is_tensor(first):
        return broadcast(shape(x), shape(first))
    dim = _arg(args, kwargs, 0, "dim")
    if dim is None:
        return ()
    out = reduced(shape(x), dim, bool(_arg(args, kwargs, 1, "keepdim", False)))
    return [out, out]


@register(torch.median, torch.nanmedian, T.median, T.nanmedian)
def median(*args, **kwargs):
    """median(x) -> 0-d; median(x, dim, keepdim) -> (values, indices)."""
    x, args = _input(args, kwargs)
    dim = _arg(args, kwargs, 0, "dim")
    if dim is None:
        return ()
    out = reduced(shape(x), dim, bool(_arg(args, kwargs, 1, "keepdim", False)))
    return [out, out]


@register(torch.mode, T.mode)
def mode(x, dim=-1, keepdim=False):
    out = reduced(shape(x), dim, keepdim)
    return [out, out]


@register(torch.kthvalue, T.kthvalue)
def kthvalue(x, k, dim=-1, keepdim=False):
    out = reduced(shape(x), dim, keepdim)
    return [out, out]


# ------------------------------------------------------------------ var / std and their means
def _var_dims(args, kwargs):
    """(dim, keepdim) of var(x, dim, unbiased, keepdim) / var(x, unbiased) / var(x, dim, *, correction)."""
    if args and isinstance(args[0], bool):  # var(x, unbiased): a full reduction
        return None, bool(kwargs.get("keepdim", False))
    return _arg(args, kwargs, 0, "dim"), bool(_arg(args, kwargs, 2, "keepdim", False))


@register(torch.var, torch.std, T.var, T.std)
def var_std(*args, **kwargs):
    x, args = _input(args, kwargs)
    return reduced(shape(x), *_var_dims(args, kwargs))


@register(torch.var_mean, torch.std_mean)
def var_std_mean(*args, **kwargs):
    x, args = _input(args, kwargs)
    out = reduced(shape(x), *_var_dims(args, kwargs))
    return [out, out]


@register(*lookup(torch, "quantile", "nanquantile"), *lookup(T, "quantile", "nanquantile"))
def quantile(x, q, dim=None, keepdim=False, **kwargs):
    """A 1-d `q` adds a leading dim of its length."""
    out = reduced(shape(x), dim, keepdim)
    return tuple(shape(q)) + out if is_tensor(q) else out


# ------------------------------------------------------------------ norms (Python functions in torch)
@register(torch.norm, T.norm, *lookup(torch.linalg, "vector_norm"))
def norm(x, p=None, dim=None, keepdim=False, *args, **kwargs):
    """torch.norm(x, p, dim, keepdim), Tensor.norm, linalg.vector_norm(x, ord, dim, keepdim)."""
    return reduced(shape(x), dim, bool(keepdim))


@register(*lookup(T, "sum_to_size"))
def sum_to_size(x, *size):
    size = size[0] if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
    return tuple(size)


# ------------------------------------------------------------------ same shape as the input
def _same(x, *args, **kwargs):
    return shape(x)


def _same_twice(x, *args, **kwargs):
    return [shape(x), shape(x)]


SCANS = "cumsum cumprod logcumsumexp".split()
SOFTMAX = "softmax log_softmax _softmax _log_softmax".split()

register(*lookup(torch, *SCANS), *lookup(T, *SCANS), *lookup(T, "cumsum_", "cumprod_"),
         *lookup(torch, *SOFTMAX), *lookup(T, *SOFTMAX),
         *lookup(torch.special, "softmax", "log_softmax"),
         *lookup(F, "softmax", "log_softmax", "softmin"),
         *lookup(torch, "argsort", "msort"), *lookup(T, "argsort", "msort"))(_same)
register(*lookup(torch, "cummax", "cummin", "sort"), *lookup(T, "cummax", "cummin", "sort"))(_same_twice)


@register(torch.topk, T.topk)
def topk(x, k, dim=-1, largest=True, sorted=True, **kwargs):
    """(values, indices) with `k` at `dim`; a 0-d input stays 0-d."""
    sizes = list(shape(x))
    if sizes:
        sizes[norm_dim(dim, len(sizes))] = k
    return [tuple(sizes), tuple(sizes)]



@register(*lookup(torch, "cosine_similarity"), *lookup(F, "cosine_similarity"))
def _cosine_similarity(x1, x2, dim=1, eps=1e-8):
    out = list(broadcast(shape(x1), shape(x2)))
    del out[norm_dim(dim, len(out))]
    return tuple(out)


@register(*lookup(torch, "pairwise_distance"), *lookup(F, "pairwise_distance"))
def _pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    out = list(broadcast(shape(x1), shape(x2)))
    if not out:
        return ()
    if keepdim:
        out[-1] = 1
    else:
        del out[-1]
    return tuple(out)


@register(*lookup(torch, "diff"), *lookup(T, "diff"))
def diff(x, n=1, dim=-1, prepend=None, append=None):
    """`x` with `prepend`/`append` joined at `dim` and `n` differences taken there: that dim is
    max(total - n, 0); the others must match the input's (as eager checks)."""
    sizes = list(shape(x))
    if not sizes:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if int(n) < 0:
        raise RuntimeError(f"order must be non-negative but got {int(n)}")
    d = norm_dim(dim, len(sizes))
    total = sizes[d]
    for extra in (prepend, append):
        if not is_tensor(extra):  # None (a scalar is eager's TypeError, from the meta kernel)
            continue
        es = shape(extra)
        if len(es) != len(sizes):
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        for i, (a, b) in enumerate(zip(sizes, es)):
            if i != d:
                check_equal(a, b)
        total = total + es[d]
    sizes[d] = total - int(n) if int(n) == 0 else sym_max(total - int(n), 0)
    return tuple(sizes)
