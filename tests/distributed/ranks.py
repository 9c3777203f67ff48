"""What each rank runs in tests/distributed: eager and compiled copies of a model trained side by side.

Both copies start from the same weights and take the same steps on the same per-rank batches (batch
and sequence lengths differ per rank and per step); after every optimizer step their parameters
are compared (gathered in full under FSDP).
"""
from __future__ import annotations

import contextlib
import copy
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import dynashape as ds


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, h):
        return h + torch.nn.functional.gelu(self.fc(h))


class Net(torch.nn.Module):
    """A small MLP with residual blocks (the FSDP units); `skip=True` leaves the last block unused."""

    def __init__(self, d=16):
        super().__init__()
        self.inp = torch.nn.Linear(8, d)
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(3)])
        self.out = torch.nn.Linear(d, 4)

    def forward(self, x, skip=False):
        h = self.inp(x)
        for i, layer in enumerate(self.layers):
            if not (skip and i == len(self.layers) - 1):
                h = layer(h)
        return self.out(h)


def build(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return Net()
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def blocks(kind, model):
    return model.layers if kind == "mlp" else model.transformer.h


def batch(kind, rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if kind == "mlp":
        return torch.randn(3 + rank + step % 3, 8, generator=g)
    return torch.randint(0, 128, (1 + rank % 2, 5 + 2 * rank + step % 4), generator=g)


def loss_of(kind, model, b, skip):
    if kind == "mlp":
        return model(b, skip=skip).pow(2).mean() if skip else model(b).pow(2).mean()
    return model(input_ids=b, labels=b).loss


def wrap(kind, model, how, compiled, unused):
    """(the module to call, its parameters' owner, the compiled modules whose stats count)."""
    if how.startswith("ddp"):
        kw = {"find_unused_parameters": True} if unused else {}
        if not compiled:
            m = DDP(model, **kw)
            return m, m, []
        if how == "ddp_in_fn":  # a DDP module called inside a compiled function: a graph break
            ddp = DDP(model, **kw)

            @ds.compile
            def call(x, skip=False):
                return ddp(x, skip=skip) if skip else ddp(x)
            return call, ddp, [call]
        if how == "ddp_outer":
            m = ds.compile(DDP(model, **kw))
            return m, m, [m]
        inner = ds.compile(model)
        return DDP(inner, **kw), inner, [inner]
    from torch.distributed.fsdp import fully_shard
    counted = []
    layers = blocks(kind, model)
    for i in range(len(layers)):
        if compiled and how == "fsdp_layers":
            layers[i] = ds.compile(layers[i])
            counted.append(layers[i])
        fully_shard(layers[i])
    fully_shard(model)
    if compiled and how == "fsdp_root":
        m = ds.compile(model)
        return m, model, [m]
    return model, model, counted


def _full(owner):
    return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach() for p in owner.parameters()]


def train_all(rank, world, kind, specs):
    """`train` for each spec (how, keywords) in turn, in one process group."""
    return [train(rank, world, kind, how, **kw) for how, kw in specs]


def train(rank, world, kind, how, steps=10, accumulate=1, unused=False, collectives=True):
    """Train eager and compiled copies `steps` steps; the largest parameter difference after each."""
    warnings.simplefilter("ignore")
    ds.reset()
    ds.config.enable_compiler_collectives = collectives
    base = build(kind)
    runs = [wrap(kind, copy.deepcopy(base), how, compiled, unused) for compiled in (False, True)]
    opts = [torch.optim.SGD(owner.parameters(), lr=0.05) for _, owner, _ in runs]
    diffs = []
    for step in range(steps):
        skip = unused and step % 2 == 1
        for (model, owner, _), opt in zip(runs, opts):
            opt.zero_grad()
            for micro in range(accumulate):
                last = micro == accumulate - 1
                quiet = owner.no_sync() if hasattr(owner, "no_sync") and not last else contextlib.nullcontext()
                with quiet:
                    loss_of(kind, model, batch(kind, rank, step * accumulate + micro), skip).backward()
            opt.step()
        want, got = _full(runs[0][1]), _full(runs[1][1])
        diffs.append(max((a - b).abs().max().item() for a, b in zip(want, got)))
    counted = runs[1][2]
    return {"diffs": diffs, "compiles": sum(m.stats.compiles for m in counted),
            "graph_breaks": sorted({b for m in counted for b in m.stats.graph_breaks})}


def raise_on_rank(rank, world, bad_rank):
    """Rank `bad_rank` raises inside its compiled step; the others must fail within the timeout."""
    warnings.simplefilter("ignore")
    model = DDP(build("mlp"))
    cm = ds.compile(model)
    for step in range(3):
        x = batch("mlp", rank, step)
        if rank == bad_rank and step == 1:
            x = torch.randn(3, 5)  # a shape the first layer rejects: the program's own error
        cm(x).sum().backward()
        dist.barrier()
    return "finished"


def pgo_job(rank, world, cache_dir, steps=4):
    """A job with compiler collectives and a shared PGO profile: compile counts of a DDP model
    trained on batch sizes that change every step."""
    warnings.simplefilter("ignore")
    ds.reset()
    with ds.config.patch(job_id="fleet-test", pgo_dir=cache_dir, pgo=True, enable_compiler_collectives=True):
        model = ds.compile(DDP(build("mlp")))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(steps):
            loss = loss_of("mlp", model, batch("mlp", rank, step), False)
            opt.zero_grad()
            loss.backward()
            opt.step()
        ds.pgo.flush()
        return {"compiles": model.stats.compiles, "key": ds.pgo.current_key()}
