"""The fleet: what many processes and runs share. PGO profiles (local and Redis), compiler
collectives, and the DDP/FSDP wrappers. It installs its hooks into the runtime (runtime/registry.py)."""
from __future__ import annotations

from ..runtime.registry import register_fleet
from . import collectives, pgo, wrappers

register_fleet(seed=pgo.seed, sync=collectives.sync, agree=collectives.agree, record=pgo.record, inner=wrappers.inner,
               opaque_reason=wrappers.opaque_reason, advice=wrappers.ADVICE)
