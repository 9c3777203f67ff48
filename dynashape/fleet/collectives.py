"""Compiler collectives: at every compile, the ranks of a job agree on what is dynamic.

With `torch.distributed` initialized and `config.enable_compiler_collectives=True`, each compile
starts with an all-gather of what this rank sees (the sizes and ints of the inputs, and what its
frame state already made dynamic). A size is then dynamic on *every* rank if it differs across
ranks or has varied over time on any rank, so the ranks compile the same graphs in the same
order instead of each recompiling alone later.

The exchange runs on a gloo group of its own, created with a timeout (env
`DYNASHAPE_COLLECTIVES_TIMEOUT`, seconds, default 300): a compile that some ranks reach and
others do not fails with `CompilerCollectiveError` after that long, instead of hanging.

    import torch.distributed as dist, dynashape as ds
    dist.init_process_group("gloo")            # or nccl: the exchange uses its own gloo group
    ds.config.enable_compiler_collectives = True
    f = ds.compile(model)                      # rank 0 sees batch 5, rank 1 batch 6:
    f(x)                                       # both compile once, with the batch dim dynamic
"""
from __future__ import annotations

import datetime
import os

import torch

from ..runtime.config import config
from .pgo_profile import atom_at, dynamic_parts, merge_entry, observe

TIMEOUT_ENV = "DYNASHAPE_COLLECTIVES_TIMEOUT"
DEFAULT_TIMEOUT = 300.0  # seconds


class CompilerCollectiveError(RuntimeError):
    """Ranks did not meet at the same compile (one skipped it, or compiled something else)."""


_GROUP: list = [None, None]  # [the default group it was made for, our gloo group with the timeout]


def timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)


def _dist():
    if not config.enable_compiler_collectives:
        return None
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def _group(dist):
    world = dist.group.WORLD
    if _GROUP[0] is not world:
        # Every rank makes this group at its first compile; like the all-gather, it times out.
        _GROUP[:] = [world, dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout()))]
    return _GROUP[1]


def sync(cf, L: dict) -> None:
    """Before a compile: all-gather the observations of every rank; mark dynamic what varies."""
    dist = _dist()
    if dist is None:
        return
    fs = cf.frame_state
    decide = cf.dynamic is None and config.automatic_dynamic_shapes
    if decide:
        fs.update(L)  # fold in this call now (make_policy would, just after us) so the others see it
    obs = list(observe(L))
    rank, what = dist.get_rank(), f"{cf.__name__} ({cf._where()})"
    mine = {"rank": rank, "what": what, "n": len(cf.entries) + 1,
            "obs": {src.name(): e for src, e in obs}, "dynamic": sorted(s.name() for s in fs.dynamic)}
    everyone = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(everyone, mine, group=_group(dist))
    except Exception as e:  # gloo reports a timeout or a closed peer as RuntimeError/DistError
        raise CompilerCollectiveError(
            f"dynashape: compiler collective failed on rank {rank} at compile #{mine['n']} of {what}: "
            f"not every rank reached this compile within {timeout():g}s. With "
            f"config.enable_compiler_collectives=True every rank must compile the same functions in the "
            f"same order; a rank whose inputs hit its cache (or that took another branch) skips the compile "
            f"and leaves the others waiting. Make the varying sizes dynamic on every rank (ds.mark_dynamic "
            f"or DYNASHAPE_DYNAMIC_SOURCES) or turn compiler collectives off; {TIMEOUT_ENV} sets the "
            f"timeout. Underlying error: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    if len({(o["what"], o["n"]) for o in everyone}) > 1:
        raise CompilerCollectiveError(
            "dynashape: ranks met at different compiles (compiler collectives need every rank to compile "
            "the same functions in the same order): "
            + "; ".join(f"rank {o['rank']} compiles {o['what']} for the #{o['n']} time" for o in everyone))
    if decide:
        _decide(fs, obs, everyone)


def agree(cf, missed: bool) -> bool:
    """On every call of a compiled function: whether any rank missed its cache. Then all compile
    (the ones that hit too), so the all-gather at the compile finds every rank, and the ranks keep
    the same graphs. One all-reduce of an int on the collectives' group per call."""
    dist = _dist()
    if dist is None:
        return missed
    flag = torch.tensor([int(missed)])
    try:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_group(dist))
    except Exception as e:
        raise CompilerCollectiveError(
            f"dynashape: compiler collective failed on rank {dist.get_rank()} at a call of {cf.__name__} "
            f"({cf._where()}): not every rank called it within {timeout():g}s. With "
            f"config.enable_compiler_collectives=True every rank must call the same compiled functions in "
            f"the same order. Underlying error: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    return bool(flag.item())


def _decide(fs, obs, everyone) -> None:
    dynamic_somewhere = {}
    for o in everyone:
        for name in o["dynamic"]:
            dynamic_somewhere.setdefault(name, []).append(o["rank"])
    for src, now in obs:
        theirs = [(o["rank"], o["obs"].get(src.name())) for o in everyone]
        merged = now
        for _, e in theirs:
            merged = merge_entry(merged, e)
        varying = set(dynamic_parts(src, merged, now))
        for part in dynamic_parts(src, {"kind": "any"}, now):
            if part in fs.dynamic:
                continue
            if part in varying:
                seen = ", ".join(f"{atom_at(e, part)} on rank {r}" for r, e in theirs if e is not None)
                fs.why[part] = f"compiler collective: ranks saw {seen}"
            elif part.name() in dynamic_somewhere:
                ranks = ", ".join(str(r) for r in dynamic_somewhere[part.name()])
                fs.why[part] = f"compiler collective: dynamic on rank {ranks}"
            else:
                continue
            fs.dynamic.add(part)
