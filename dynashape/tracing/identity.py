"""A traced tensor's identity as the user's code asks for it: `id(x)`, `hash(x)`, a dict or set
keyed by the tensor (`memo[x] = ...`).

While tracing, `x` is a FakeTensor: its id is not the caller's tensor's, and a dict the user's code
keys by it would keep the stand-in (a FakeTensor in the user's dict) where eager keeps the tensor.
Neither can be recorded in a graph (the caller's tensor changes from call to call), so the call
runs eagerly, with the reason. Library code (torch's, transformers') hashing a tensor for its own
bookkeeping is left alone; so is `id()` of any other object.
"""
from __future__ import annotations

import builtins

from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .fake import FakeTensor

_ADVICE = ("What to do: key by something else (a name, an index), or keep the tensors in a list; or move "
           "the code out of the compiled function.")


def user_id(obj, /):
    """`id` as the user's code sees it while a trace runs (runtime/outer.py puts it in the globals of
    their modules whose code calls `id`)."""
    if isinstance(obj, FakeTensor):
        raise GraphBreak("id() of a traced tensor (the caller's tensor, whose id changes from call to call, "
                         "exists when the compiled code runs)", user_location(), _ADVICE)
    return builtins.id(obj)


def refuse_user_hash() -> None:
    """A traced tensor hashed by the user's code (FakeTensor.__hash__ asks): `hash(x)`, `memo[x] = ...`,
    `x in seen`."""
    raise GraphBreak("a traced tensor hashed by the function (`hash(x)`, a dict or set keyed by the tensor): "
                     "the key would be a stand-in of the trace, not the caller's tensor", user_location(), _ADVICE)
