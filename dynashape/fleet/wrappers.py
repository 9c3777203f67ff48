"""Wrappers whose call does work outside tensor ops: DDP, FSDP1, fully_shard (FSDP2) units.

A trace records tensor ops; Python that talks to C++ state (DDP's reducer preparing the gradient
all-reduce, FSDP gathering and resharding parameters) would run once, at trace time, and never
again, so the compiled model would train silently wrong. So:

- `ds.compile(DDP(model))` / `ds.compile(FSDP(model))` (FSDP1) compiles the wrapped model's forward
  and runs the wrapper's own call eagerly around it (`inner`; runtime/wrappers.py swaps it in);
- inside a trace, calling a DDP, FSDP1 or `fully_shard` unit is a graph break (`opaque_reason`):
  the function runs eagerly, for the reason shown by `ds.explain`. Compile what such a unit wraps
  (`fully_shard(ds.compile(layer))`, `DDP(ds.compile(model))`) instead.

The backward is eager's autograd graph over the same torch calls, so DDP's bucket hooks fire
(and their all-reduces start) as each bucket's gradients are ready, as in eager.
"""
from __future__ import annotations

import sys

import torch


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


