"""The fleet: what many processes and runs share. PGO profiles (local and Redis), compiler
collectives, and the DDP/FSDP wrappers. It installs its hooks into the runtime (runtime/registry.py)."""
from __future__ import annotations

import sys

from .. import runtime as _runtime
from ..runtime.registry import register_fleet
from . import collectives, pgo, pgo_profile, pgo_store, redis_store, wrappers

register_fleet(seed=pgo.seed, sync=collectives.sync, agree=collectives.agree, record=pgo.record, inner=wrappers.inner,
               opaque_reason=wrappers.opaque_reason, advice=wrappers.ADVICE)

# their old homes (dynashape.runtime.pgo & co, before the fleet had a room): code that imports them there still works
for _name, _mod in (("pgo", pgo), ("pgo_profile", pgo_profile), ("pgo_store", pgo_store),
                    ("redis_store", redis_store), ("collectives", collectives)):
    sys.modules.setdefault(f"{_runtime.__name__}.{_name}", _mod)
    setattr(_runtime, _name, _mod)
