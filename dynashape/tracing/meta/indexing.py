"""Indexing ops: `x[...]`, `x[...] = v`, gather/scatter and the index_* family.

`x[idx]` follows torch's order: basic indexing first (ints select, slices
narrow, None/True insert a dim), then the integer index tensors broadcast
together and replace the dims they index: in place when those dims are
adjacent, at the front otherwise (numpy's rule). A slice's length is clamped
as Python does; the comparisons are decided with `bool()`, so only the ones not
statically known add guards (`x[1:]`, `x[:-1]`, `x[::2]` add none).
Boolean masks read data: the meta run raises, and the tracer breaks the graph.

>>> x[:n]        # (s0,) with an int n -> (n,), guards n >= 0 and n <= s0
"""
from __future__ import annotations

import operator

import sympy
import torch

from ...symbolic.errors import DataDependentError
from ...symbolic.symtypes import SymBase, sym_max, sym_min
from .common import assert_at_runtime, broadcast, check_equal, in_bounds, is_one, is_tensor, norm_dim, prod, shape
from .registry import lookup, register

T = torch.Tensor
_MASK_DTYPES = (torch.bool, torch.uint8)


# ------------------------------------------------------------------ slices
def _decide(cond):
    """`bool(cond)` (a guard when symbolic); None when it depends on data."""
    try:
        return bool(cond)
    except DataDependentError:
        return None


_MAX_CLAMP_OPS = 8  # a data-dependent bound past this many operations is not clamped symbolically


def _clamp(i, n):
    """A slice bound as Python clamps it into [0, n]. A data-dependent bound of unknown sign gets
    the exact formula for either sign: `neg` is 1 when i < 0 and 0 otherwise (i // (|i| + 1))."""
    negative = _decide(i < 0)
    if negative is None:
        if isinstance(i, SymBase) and sympy.count_ops(i.node.expr) > _MAX_CLAMP_OPS:
            # the exact formula nests Min/Max/Abs in what is already one: sympy takes minutes on it
            raise DataDependentError(
                f"Could not decide whether the slice bound `{i.node.env.describe(i.node.expr)}` is negative: it "
                f"depends on data, and its exact formula grows too large.\nWhat to do: state its sign with "
                f"`dynashape.check(bound >= 0)` before this line.", i.node.expr, None)
        neg = -(i // (abs(i) + 1))
        return sym_min(sym_max(i + n * neg, 0), n)
    if negative:
        i = i + n
        below = _decide(i < 0)
        return 0 if below else i if below is not None else sym_max(i, 0)
    over = _decide(i > n)
    return n if over else i if over is not None else sym_min(i, n)


def slice_length(n, start, stop, step=1):
    """len(range(n)[start:stop:step]) for step > 0, as an expression of the sizes."""
    step = 1 if step is None else step
    if not bool(step > 0):
        raise ValueError("slice step must be positive")
    start = 0 if start is None else _clamp(start, n)
    stop = n if stop is None else _clamp(stop, n)
    span = stop - start
    ordered = _decide(span >= 0)  # span == 0 needs no case of its own: the formula gives 0
    if ordered is None:
        span = sym_max(span, 0)
    elif not ordered:
        return 0
    return span if isinstance(step, int) and step == 1 else (span + step - 1) // step


# ------------------------------------------------------------------ x[idx]
class _Mask:
    """A boolean mask index: its count of selected elements is data."""


def _as_tuple(idx):
    if isinstance(idx, tuple):
        return idx
    if isinstance(idx, list) and len(idx) < 32 and any(
            is_tensor(i) or isinstance(i, (list, tuple, slice)) or i is None or i is Ellipsis for i in idx):
        return tuple(idx)  # legacy: a short list holding slices or sequences is a tuple of indices
    return (idx,)


def _nested_shape(seq):
    """Shape and leaf type of a nested list used as an index tensor."""
    out = []
    while isinstance(seq, (list, tuple)):
        out.append(len(seq))
        seq = seq[0] if seq else 0
    return tuple(out), isinstance(seq, bool)


def _consumes(item) -> int:
    """How many of self's dims an index item uses up."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if is_tensor(item) and item.dtype in _MASK_DTYPES:
        return max(len(shape(item)), 1)
    return 1


def indexed_shape(self, idx):
    """The shape of `self[idx]`, or None when a boolean mask makes it data-dependent."""
    sizes = shape(self)
    items = _as_tuple(idx)
    ell = len(sizes) - sum(_consumes(i) for i in items)
    out, adv, d = [], [], 0  # adv: (position in out, index shape)
    for item in items:
        if item is None:
            out.append(1)
        elif item is Ellipsis:
            out.extend(sizes[d:d + ell])
            d += ell
        elif isinstance(item, bool):  # torch: unsqueeze, then index the new dim by [0] or []
            adv.append((len(out), (1,) if item else (0,)))
            out.append(1)
        elif isinstance(item, slice):
            out.append(slice_length(sizes[d], item.start, item.stop, item.step))
            d += 1
        elif is_tensor(item):
            if item.dtype in _MASK_DTYPES:
                return None
            if not shape(item):  # a 0-d integer tensor selects, as an int would
                d += 1
                continue
            adv.append((len(out), shape(item)))
            out.append(sizes[d])
            d += 1
        elif isinstance(item, (list, tuple)):
            s, is_bool = _nested_shape(item)
            if is_bool:
                return None
            adv.append((len(out), s))
            out.append(sizes[d])
            d += 1
        else:
            if not isinstance(item, SymBase):
                operator.index(item)  # an int-like: select
            if not in_bounds(item, sizes[d]):
                raise IndexError(f"index {item} is out of bounds for dimension {d} with size {sizes[d]}")
            d += 1
    out.extend(sizes[d:])
    if not adv:
        return tuple(out)
    pos = [p for p, _ in adv]
    b = list(broadcast(*[s for _, s in adv]))
    if pos == list(range(pos[0], pos[0] + len(pos))):  # adjacent: the broadcast shape takes their place
        return tuple(out[:pos[0]] + b + out[pos[-1] + 1:])
    return tuple(b + [s for i, s in enumerate(out) if i not in pos])


def _check_fits(target, value_shape) -> None:
    """`value` must broadcast to `target` (the op's in-place output)."""
    v = list(value_shape)
    while len(v) > len(target) and (one := is_one(v[0])) is not False:
        if one is None:  # eager fails unless it is 1
            assert_at_runtime(v[0] == 1, f"a value of shape {tuple(value_shape)} cannot be assigned to "
                                         f"an indexing result of shape {tuple(target)}")
        v.pop(0)  # torch drops the value's leading 1s
    b = broadcast(tuple(target), tuple(v))
    if len(b) != len(target):
        raise RuntimeError(f"shape mismatch: value of shape {tuple(value_shape)} cannot be broadcast "
                           f"to indexing result of shape {tuple(target)}")
    for x, y in zip(b, target):
        check_equal(x, y)


@register(T.__getitem__)
def getitem(self, idx):
    out = indexed_shape(self, idx)
    if out is None:  # the meta run reads the mask's data and raises first
        raise NotImplementedError("indexing with a boolean mask depends on data")
    return out


@register(T.__setitem__)
def setitem(self, idx, value):
    target = indexed_shape(self, idx)
    if target is not None and is_tensor(value):  # with a mask, the op checks the count at run time
        _check_fits(target, shape(value))
    return []  # in place: self keeps its shape, and the call returns None


# ------------------------------------------------------------------ gather / scatter / index_*
@register(*lookup(torch, "index_select"), *lookup(T, "index_select"))
def index_select(input, dim, index):
    sizes = shape(input)
    if not sizes:
        return ()
    d = norm_dim(dim, len(sizes))
    return sizes[:d] + (prod(shape(index)),) + sizes[d + 1:]


@register(*lookup(torch, "gather", "take"), *lookup(T, "gather", "take"))
def gather(input, *args, **kwargs):
    index = kwargs.get("index", next((a for a in args if is_tensor(a)), None))
    return shape(index)


@register(*lookup(torch, "take_along_dim"), *lookup(T, "take_along_dim"))
def take_along_dim(input, indices, dim=None):
    if dim is None:
        return (prod(shape(indices)),)
    sizes = list(shape(input))
    d = norm_dim(dim, len(sizes))
    sizes[d] = shape(indices)[d]
    return broadcast(tuple(sizes), shape(indices))


def _self_shape(input, *args, **kwargs):
    return shape(input)


SAME_AS_SELF = """scatter scatter_add scatter_reduce index_add index_copy index_fill index_reduce index_put
put""".split()
register(*lookup(torch, *SAME_AS_SELF), *lookup(T, *SAME_AS_SELF),
         *lookup(T, *[n + "_" for n in SAME_AS_SELF + ["masked_scatter"]]))(_self_shape)


@register(*lookup(torch, "masked_scatter"), *lookup(T, "masked_scatter"))
def masked_scatter(input, mask, source):
    return broadcast(shape(input), shape(mask))  # out of place, self and mask broadcast
