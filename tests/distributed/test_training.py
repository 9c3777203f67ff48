"""Compiled models trained under DDP and FSDP2 on real gloo groups equal eager DDP/FSDP2 after every step.

Batch and sequence lengths differ per rank and per step; compiler collectives are on, so every
rank compiles the same graphs (the counts are printed and compared). Every run is under a deadline
that fails it as a hang.
"""
import pytest
import torch.distributed as dist

from . import ranks
from .harness import run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

MLP = [("ddp_outer", {}), ("ddp_inner", {}), ("fsdp_layers", {}), ("fsdp_root", {}), ("ddp_in_fn", {}),
       ("ddp_outer", {"accumulate": 2}), ("ddp_inner", {"accumulate": 2}),
       ("ddp_outer", {"unused": True}), ("ddp_inner", {"unused": True})]
GPT2 = [("ddp_outer", {}), ("ddp_inner", {}), ("fsdp_layers", {})]
TOLERANCE = 1e-6


def _label(how, kw):
    return how + "".join(f" {k}={v}" for k, v in kw.items())


def _check(results, specs, world):
    for i, (how, kw) in enumerate(specs):
        per_rank = [r[i] for r in results]
        compiles = [r["compiles"] for r in per_rank]
        print(f"{world} ranks, {_label(how, kw)}: compiles per rank {compiles}, "
              f"max parameter difference {max(max(r['diffs']) for r in per_rank):.1e}")
        for rank, r in enumerate(per_rank):
            bad = [(step, d) for step, d in enumerate(r["diffs"]) if not d <= TOLERANCE]
            assert not bad, f"{_label(how, kw)}: rank {rank} parameters differ from eager at (step, diff) {bad}"
        assert len(set(compiles)) == 1, f"{_label(how, kw)}: ranks compiled different counts {compiles}"
        breaks = per_rank[0]["graph_breaks"]
        if how in ("fsdp_root", "ddp_in_fn"):  # the wrapper is called inside the trace: eager, with the reason
            assert breaks and "outside tensor ops" in breaks[0], breaks
            assert compiles[0] == 0
        else:
            assert not breaks and compiles[0] >= 1


@pytest.fixture(scope="module")
def mlp_two_ranks():
    return run_ranks(2, ranks.train_all, "mlp", MLP, timeout=300)


@pytest.mark.parametrize("i", range(len(MLP)), ids=[_label(*s) for s in MLP])
def test_mlp_on_two_ranks_trains_as_eager(mlp_two_ranks, i):
    _check([[r[i]] for r in mlp_two_ranks], [MLP[i]], 2)


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_mlp_on_four_ranks_trains_as_eager():
    specs = [("ddp_outer", {}), ("fsdp_layers", {})]
    _check(run_ranks(4, ranks.train_all, "mlp", specs, timeout=300), specs, 4)


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_tiny_gpt2_on_two_ranks_trains_as_eager():
    pytest.importorskip("transformers")
    _check(run_ranks(2, ranks.train_all, "gpt2", GPT2, timeout=300), GPT2, 2)


def test_a_rank_that_raises_fails_the_others_instead_of_hanging():
    results = run_ranks(2, ranks.raise_on_rank, 1, timeout=120, allow_errors=True)
    assert "mat1 and mat2 shapes cannot be multiplied" in results[1]["error"]  # the program's own error
    assert "error" in results[0]  # gloo saw its peer go: an error, within the deadline
