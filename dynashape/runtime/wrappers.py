"""Modules whose call does work outside tensor ops: what is compiled, and what runs eagerly.

A trace records tensor ops; Python that talks to C++ state (DDP's reducer preparing the gradient
all-reduce, FSDP gathering and resharding parameters) would run once, at trace time, and never
again, so the compiled model would train silently wrong. So:

- `ds.compile(DDP(model))` / `ds.compile(FSDP(model))` (FSDP1) compiles the wrapped model's forward
  and runs the wrapper's own `__call__` eagerly around it (`inner`);
- a module's hooks (its own, and the global ones) run eagerly around its compiled forward, as
  `nn.Module.__call__` runs them (`has_hooks`), also where `fully_shard` registered them on a
  compiled module;
- inside a trace, calling a DDP, FSDP1 or `fully_shard` unit is a graph break (`opaque_reason`):
  the function runs eagerly, for the reason shown by `ds.explain`. Compile what such a unit wraps
  (`fully_shard(ds.compile(layer))`, `DDP(ds.compile(model))`) instead.
"""
from __future__ import annotations

import sys

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


def _ddp_types() -> tuple:
    from torch.nn.parallel import DistributedDataParallel
    types_ = [DistributedDataParallel]
    fsdp1 = sys.modules.get("torch.distributed.fsdp.fully_sharded_data_parallel")
    if fsdp1 is not None:
        types_.append(fsdp1.FullyShardedDataParallel)
    return tuple(types_)


def _fsdp2_type():
    for name in ("torch.distributed.fsdp._fully_shard._fully_shard", "torch.distributed._composable.fsdp.fully_shard"):
        mod = sys.modules.get(name)  # loaded if the program used fully_shard
        if mod is not None and hasattr(mod, "FSDPModule"):
            return mod.FSDPModule
    return None


def inner(mod: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward is compiled: the model a DDP/FSDP1 wrapper holds, else `mod`."""
    while isinstance(mod, _ddp_types()):
        mod = mod.module
    return mod


def opaque_reason(mod: torch.nn.Module) -> str | None:
    """Why a call of `mod` inside a trace cannot be recorded as tensor ops (None: it can)."""
    if isinstance(mod, _ddp_types()):
        return (f"{type(mod).__name__} inside a compiled function: its forward prepares the gradient "
                f"synchronization outside tensor ops")
    fsdp2 = _fsdp2_type()
    if fsdp2 is not None and isinstance(mod, fsdp2):
        return ("a fully_shard (FSDP2) unit inside a compiled function: its hooks gather and reshard "
                "parameters with collectives outside tensor ops")
    return None


ADVICE = ("The function runs eagerly (exact). To compile it, compile what the wrapper holds: "
          "DDP(ds.compile(model)), ds.compile(DDP(model)), or fully_shard(ds.compile(layer)) per layer.")


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
