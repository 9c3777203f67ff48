"""What a compiled module's call runs besides its compiled forward: hooks, and a wrapper's own call.

A module's hooks (its own, and the global ones) run eagerly around its compiled forward, as
`nn.Module.__call__` runs them (`has_hooks`), also where `fully_shard` registered them on a
compiled module (`own_hooks`). A wrapper whose call does work outside tensor ops (DDP's reducer:
fleet/wrappers.py says which) runs its own call eagerly with the compiled forward swapped in for
the forward of the model it holds (`ForwardSwap`).
"""
from __future__ import annotations

import torch
from torch.nn.modules import module as _nn_module

from ..guards.module_epoch import GLOBAL_HOOKS, HOOKS


def has_hooks(m: torch.nn.Module) -> bool:
    """Whether `m(...)` runs anything besides `m.forward` (its hooks or global module hooks)."""
    return own_hooks(m) or any(getattr(_nn_module, k, None) for k in GLOBAL_HOOKS)


def own_hooks(m: torch.nn.Module) -> bool:
    """Whether hooks are registered on `m` itself."""
    d = m.__dict__
    return any(d.get(k) for k in HOOKS)


class ForwardSwap:
    """`with ForwardSwap(m, fn): wrapper(...)`: `m.forward` is `fn` for the call (an instance
    attribute over the class's forward, removed after), so the wrapper's own `__call__` (hooks,
    DDP's bookkeeping) runs eagerly around the compiled forward. Another thread calling `m` meanwhile
    gets either forward: both compute the same."""

    __slots__ = ("m", "fn", "had", "old")

    def __init__(self, m, fn):
        self.m, self.fn = m, fn

    def __enter__(self):
        d = self.m.__dict__
        self.had, self.old = "forward" in d, d.get("forward")
        d["forward"] = self.fn

    def __exit__(self, *exc):
        d = self.m.__dict__
        if self.had:
            d["forward"] = self.old
        else:
            d.pop("forward", None)
