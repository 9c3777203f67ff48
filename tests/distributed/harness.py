"""Real gloo process groups for tests: spawned ranks, each run under a deadline.

    results = run_ranks(2, ranks.train, "mlp", "ddp_outer", timeout=120)

runs `ranks.train(rank, world, "mlp", "ddp_outer")` in 2 fresh processes joined in a gloo group
on loopback and returns what each returned (JSON). A rank that raises fails the test with its
traceback; ranks still running at the deadline are killed and the test fails as a hang, naming them.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import tempfile
import time
import traceback

import torch.multiprocessing as mp

PG_TIMEOUT = 30  # seconds a collective may wait for a missing rank before gloo raises


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world, port, out, args, env):
    os.environ.update(env)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # ranks share the machine's cores
    result = {"rank": rank}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        result["result"] = fn(rank, world, *args)
    except BaseException as e:  # noqa: BLE001  reported to the parent, which fails the test
        result["error"] = "".join(traceback.format_exception(e))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    try:
        if "error" not in result:
            dist.destroy_process_group()
    finally:
        os._exit(0)  # skip the interpreter's teardown (seconds per spawned rank)


def run_ranks(world: int, fn, *args, timeout: float = 180, env: dict | None = None, allow_errors=False) -> list:
    """fn(rank, world, *args) on `world` gloo ranks; its return values by rank. allow_errors: return
    {"error": traceback} for a rank that raised instead of failing."""
    ctx = mp.get_context("spawn")
    out = tempfile.mkdtemp(prefix="ds-ranks-")
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, out, args, dict(env or {})), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    if hung:
        raise AssertionError(f"hang: ranks {hung} of {world} still running after {timeout:.0f} s ({fn.__name__}{args})")
    results = []
    for r in range(world):
        path = os.path.join(out, f"rank{r}.json")
        if not os.path.exists(path):
            raise AssertionError(f"rank {r} died without a result (exit code {procs[r].exitcode})")
        with open(path) as f:
            res = json.load(f)
        if "error" in res and not allow_errors:
            raise AssertionError(f"rank {r} raised:\n{res['error']}")
        results.append(res.get("result", res))
    return results
