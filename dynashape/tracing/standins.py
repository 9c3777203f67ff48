"""Meta tensors standing in for traced values: the plain sizes a meta kernel runs on, and whether
its results fit the shapes an op's symbolic rule gives (a data-dependent size's stand-in is chosen
once; a later fact may pin the size to another value)."""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch

import torch

from ..symbolic.symtypes import SymBase
from .symint import meta_value
from .tree import leaves


def meta_leaf(x):
    """An argument as a meta kernel takes it: symbolic values as their example values."""
    if isinstance(x, SymBase):
        return meta_value(x)
    if isinstance(x, torch.Size):
        return torch.Size([meta_value(v) for v in x])
    if isinstance(x, slice):  # x[:n] with a symbolic n: torch's parser needs plain ints
        return slice(meta_leaf(x.start), meta_leaf(x.stop), meta_leaf(x.step))
    return x


def tensors_in(obj):
    for x in leaves(obj):
        if isinstance(x, torch.Tensor):
            yield x


def misfit(out, shapes):
    """The first (rule's shape, meta tensor) pair whose sizes on the example differ; None if all fit."""
    if isinstance(shapes, tuple):
        shapes = [shapes]
    for s, t in zip(shapes, tensors_in(out)):
        if tuple(meta_value(x) if isinstance(x, SymBase) else x for x in s) != tuple(t.shape):
            return s, t
    return None
