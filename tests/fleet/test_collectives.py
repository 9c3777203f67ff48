"""Compiler collectives: 2 and 3 gloo ranks on loopback that see different batch sizes."""
import datetime
import json
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dynashape as ds
from dynashape.fleet.collectives import CompilerCollectiveError

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def double(x):
    return x * 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(rank, sizes, collectives):
    with ds.config.patch(enable_compiler_collectives=collectives):
        cf = ds.compile(double)
        for n in sizes:
            x = torch.randn(n, 3)
            torch.testing.assert_close(cf(x), x * 2)
    return {"compiles": cf.stats.compiles, "dynamic": cf.entries[0].dynamic_sources,
            "reasons": cf.stats.recompile_reasons}


def _worker(rank, world, port, outdir, sizes, alone_sizes):
    os.environ["DYNASHAPE_COLLECTIVES_TIMEOUT"] = "2"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    out = {}
    try:
        with ds.config.patch(pgo=False):  # only what the ranks tell each other, no profile
            out["without"] = _run(rank, sizes[rank], False)
            out["with"] = _run(rank, sizes[rank], True)
            if alone_sizes:
                out["alone"] = _run(rank, alone_sizes[rank], True)
                # last: a timed-out exchange leaves the collectives' group unusable
                try:  # rank 0 calls once more than the others
                    _run(rank, [4] * (3 if rank == 0 else 2), True)
                    out["error"] = None
                except CompilerCollectiveError as e:
                    out["error"] = str(e)
        dist.barrier()
    finally:
        with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
        dist.destroy_process_group()
    os._exit(0)  # done: skip the interpreter teardown, which takes seconds in a spawned rank


def _spawn(tmp_path, sizes, alone_sizes=None):
    world = len(sizes)
    mp.spawn(_worker, args=(world, _free_port(), str(tmp_path), sizes, alone_sizes), nprocs=world, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    # then rank 0 sees a new size at the third call, while rank 1 would hit its cache
    return _spawn(tmp_path_factory.mktemp("two_ranks"), [[5, 8, 6], [6, 6, 6]], [[4, 4, 8], [4, 4, 4]])


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    return _spawn(tmp_path_factory.mktemp("three_ranks"), [[5, 8, 6], [6, 6, 3], [7, 7, 7]])


@pytest.mark.parametrize("world", ["two_ranks", "three_ranks"])
def test_ranks_compile_the_same_graphs_with_collectives_and_diverge_without(world, request):
    results = request.getfixturevalue(world)
    without = [r["without"]["compiles"] for r in results]
    assert len(set(without)) > 1, without  # each rank recompiles on its own schedule
    assert [r["with"]["compiles"] for r in results] == [1] * len(results)
    dyn = [sorted(r["with"]["dynamic"]) for r in results]
    assert dyn == [["L['x'].size()[0]"]] * len(results)
    why = results[0]["with"]["dynamic"]["L['x'].size()[0]"]
    assert why.startswith("compiler collective: ranks saw 5 on rank 0, 6 on rank 1"), why


def test_a_rank_that_would_recompile_alone_makes_every_rank_recompile_together(two_ranks):
    # rank 0 sees a new size at its third call, rank 1 the same size again: both compile
    alone = [r["alone"] for r in two_ranks]
    assert [a["compiles"] for a in alone] == [2, 2]
    assert all(a["dynamic"] == {"L['x'].size()[0]": a["dynamic"]["L['x'].size()[0]"]} for a in alone), alone
    assert "another rank recompiles this call" in alone[1]["reasons"][-1], alone[1]["reasons"]
    assert "size mismatch" in alone[0]["reasons"][-1] or "L['x']" in alone[0]["reasons"][-1], alone[0]["reasons"]


def test_a_rank_that_skips_a_call_makes_the_others_fail_with_a_clear_error(two_ranks):
    assert two_ranks[1]["error"] is None
    err = two_ranks[0]["error"]
    assert err is not None and "not every rank called it within 2s" in err, err
    assert "double" in err


def test_collectives_are_a_no_op_without_torch_distributed():
    with ds.config.patch(enable_compiler_collectives=True):
        cf = ds.compile(double)
        for n in (5, 8, 6):
            cf(torch.randn(n, 3))
    assert cf.stats.compiles == 2
