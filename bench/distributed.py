"""Tiny GPT-2 trained under DDP on 2 gloo ranks: time per step, eager vs torch.compile vs ours.

    python bench/distributed.py            # starts itself under torchrun (2 ranks)
    python bench/distributed.py --steps 30 --ranks 2

Each rank trains three copies of the model (eager DDP, torch.compile(DDP), ds.compile(DDP)), a
step of each in turn (interleaved, so machine noise hits them alike), on per-rank batches (rank r:
batch 2, sequence 48 + 8r). Printed: the median step time of each after warm-up, the ratios, and
the overlap: the share of the all-reduce time that ran while backward was still computing
(a DDP comm hook stamps when each gradient bucket is ready and when its all-reduce is done; the
bucket_cap_mb=1 gives several buckets; torch.compile requires the first, 1 MB, to be the smallest). The floor: the share of a step in matmul and
attention kernels, which stay torch calls, printed from one profiled eager step.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dynashape as ds  # noqa: E402


def model():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=2048, n_positions=128, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


class Overlap:
    """A DDP comm hook (gloo all-reduce, averaged as DDP's default) that stamps each bucket."""

    def __init__(self):
        self.events = []  # (bucket ready, all-reduce done) per bucket of this step

    def hook(self, state, bucket):
        ready = time.perf_counter()
        buf = bucket.buffer()
        buf.div_(dist.get_world_size())
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            self.events.append((ready, time.perf_counter()))
            return f.value()[0]
        return fut.then(done)

    def step_overlap(self):
        """(seconds some all-reduce ran while backward still computed, seconds some all-reduce ran):
        backward computes until the last bucket is ready; intervals are merged, not summed."""
        ev, self.events = self.events, []
        if not ev:
            return 0.0, 0.0
        last_ready = max(r for r, _ in ev)
        return _union([(r, min(e, last_ready)) for r, e in ev]), _union(ev)


def _union(intervals) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def run(args):
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    ids = torch.randint(0, 2048, (2, 48 + 8 * rank), generator=torch.Generator().manual_seed(rank))
    variants = {}
    for name in ("eager", "torch.compile", "ours"):
        ov = Overlap()
        ddp = DDP(model(), bucket_cap_mb=1)
        ddp.register_comm_hook(None, ov.hook)
        fn = {"eager": ddp, "torch.compile": torch.compile(ddp), "ours": ds.compile(ddp)}[name]
        variants[name] = (fn, torch.optim.SGD(ddp.parameters(), lr=0.01), ov, [], [])
    for step in range(args.warmup + args.steps):
        for name, (fn, opt, ov, times, overlaps) in variants.items():
            dist.barrier()
            t0 = time.perf_counter()
            loss = fn(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            inside, total = ov.step_overlap()
            if step >= args.warmup:
                times.append(t1 - t0)
                overlaps.append((inside, total))
    floor = matmul_share(variants["eager"][0], ids)
    if rank == 0:
        med = {n: statistics.median(v[3]) for n, v in variants.items()}
        print(f"tiny GPT-2 (4 layers, d=128) DDP on {dist.get_world_size()} gloo ranks, rank 0 batch {tuple(ids.shape)}, "
              f"{args.steps} steps after {args.warmup} warm-up, median ms/step:")
        for n, v in variants.items():
            inside = sum(i for i, _ in v[4])
            total = sum(t for _, t in v[4])
            print(f"  {n:14s} {med[n] * 1e3:8.2f} ms   all-reduce overlapped with backward: "
                  f"{inside / total if total else 0:.0%} of {total / len(v[4]) * 1e3:.2f} ms/step in all-reduce")
        print(f"  ours/eager {med['ours'] / med['eager']:.3f}   ours/torch.compile {med['ours'] / med['torch.compile']:.3f}"
              f"   (floor: matmul/attention kernels are {floor:.0%} of an eager step's kernel time)")
        print(f"  compiles: ours {variants['ours'][0].stats.compiles}")
    dist.destroy_process_group()


def matmul_share(fn, ids) -> float:
    """The share of one eager training step's kernel (self) CPU time in matmul-like kernels, which stay
    torch calls in every compiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(input_ids=ids, labels=ids).loss.backward()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    mm = sum(e.self_cpu_time_total for e in ev if any(k in e.key for k in ("mm", "addmm", "bmm", "matmul",
                                                                              "linear", "attention", "baddbmm")))
    return mm / total if total else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    if "RANK" not in os.environ:  # start ourselves under torchrun
        import socket
        from torch.distributed.run import main as torchrun
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torchrun(["--nproc-per-node", str(args.ranks), "--master-port", str(port), os.path.abspath(__file__)]
                 + sys.argv[1:])
        return
    run(args)


if __name__ == "__main__":
    main()
