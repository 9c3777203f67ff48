"""Walking the nested argument structures torch calls take (lists, tuples, dicts)."""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch: our own answers are plain, faster
import torch


def leaves(obj) -> list:
    """Every non-container value inside nested lists, tuples and dicts, in order."""
    out: list = []
    _collect(obj, out)
    return out


def _collect(obj, out: list) -> None:
    if isinstance(obj, (list, tuple)):
        for o in obj:
            t = type(o)
            if t in _NOT_CONTAINERS:  # (most arguments: answered without isinstance)
                out.append(o)
            elif isinstance(o, (list, tuple, dict)):
                _collect(o, out)
            else:
                out.append(o)
    elif isinstance(obj, dict):
        if obj:
            _collect(list(obj.values()), out)
    else:
        out.append(obj)


def sizes_as_tuples(obj):
    """A torch.Size argument of an op (`F.layer_norm(h, h.shape[-2:])`) as the tuple of its sizes:
    every torch op takes a tuple where it takes a Size, and a backend then reads the elements
    where it decides dims instead of a graph value it would have to resolve."""
    if isinstance(obj, torch.Size):
        return tuple(obj)
    t = type(obj)
    if t is list or t is tuple:
        return t([sizes_as_tuples(o) for o in obj])
    if t is dict:
        return {k: sizes_as_tuples(v) for k, v in obj.items()}
    return obj


def map_leaves(obj, fn):
    """Map `fn` over the leaves of nested lists/tuples/dicts (keeping torch.Size and namedtuples)."""
    t = type(obj)
    if t is tuple or t is list:  # (the common case first)
        return t([map_leaves(o, fn) if isinstance(o, _CONTAINERS) else fn(o) for o in obj])
    if isinstance(obj, torch.Size):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        items = [map_leaves(o, fn) if isinstance(o, _CONTAINERS) else fn(o) for o in obj]
        if hasattr(obj, "_fields"):
            return type(obj)(*items)
        return type(obj)(items)
    if isinstance(obj, dict):
        return {k: map_leaves(v, fn) if isinstance(v, _CONTAINERS) else fn(v) for k, v in obj.items()}
    return fn(obj)


_CONTAINERS = (list, tuple, dict)  # a torch.Size is a tuple: map_leaves hands it to fn whole
_NOT_CONTAINERS = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device})  # exact types


def wrap_tensors(out, wrap, path):
    """`wrap(tensor, path)` for each tensor of an op's result (a tensor or nested lists/tuples)."""
    if isinstance(out, torch.Tensor):
        return wrap(out, path)
    if isinstance(out, (list, tuple)):
        items = [wrap_tensors(o, wrap, path + (i,)) for i, o in enumerate(out)]
        if type(out) in (list, tuple):
            return type(out)(items)
        return type(out)(items)  # torch.return_types structseq take a sequence
    return out
