"""Training steps: eager PyTorch vs torch.compile (Inductor) vs ours (backend="fused" with
`ds.config.fused_autograd=True`: regions under autograd run their kernels and generated backwards),
side by side.

A step is `zero_grad(set_to_none=True); loss = f(...); loss.backward()`, with the loss computed
inside the compiled function. Contestants run interleaved one step at a time in a rotating order
(every contestant sees the same background load: the machine is shared), after warm-up (ours
with `fused_sync=True`, so its forward and backward kernels are in; Inductor compiled, its
compile time printed). Printed per workload, at 1 and 2 threads: median ms per step, ratios,
the share of eager's step spent in calls no compiler replaces (matmul, attention, embedding:
the floor), the peak memory a step allocates (the allocator's allocations and frees recorded
by `torch.profiler` with profile_memory=True, summed in time order) and the gradients' error
against the same step in float64 eager (max |g - g64| / max |g64| over every gradient).

Then a varying-shape sequence: 60 training steps of the pointwise chain and of the transformer
block with batch and sequence length drawn at random, total wall time from a cold start,
compiles included, ours vs Inductor (dynamic=True).

    python bench/train.py [--threads 1,2] [--no-inductor] [--no-hf] [--no-sequences] [--only TEXT]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dynashape as ds  # noqa: E402
from bench.fused import Block, chain, interleaved, ln_relu  # noqa: E402

SEED = 0
FLOOR_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash",
             "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::embedding_dense_backward",
             "aten::index_select", "aten::embedding")  # the kernels; wrappers (linear, matmul) not counted


class Workload:
    """A loss function `fn(*args)` over leaves (inputs that require grad and module parameters)."""

    def __init__(self, name, fn, args, params=()):
        self.name, self.fn, self.args, self.params = name, fn, args, list(params)

    def leaves(self):
        return [a for a in self.args if isinstance(a, torch.Tensor) and a.requires_grad] + self.params

    def step(self, f):
        for t in self.leaves():
            t.grad = None
        loss = f(*self.args)
        loss.backward()
        return loss


def workloads(hf: bool) -> list[Workload]:
    torch.manual_seed(SEED)

    def req(*shape):
        return torch.randn(*shape, requires_grad=True)

    r1, r2, r3 = torch.randn(64, 4096), torch.randn(256, 1024), torch.randn(4, 64, 128)  # fixed loss weights

    w = [Workload("pointwise chain + mean/std, 64x4096", lambda x, a, b: (chain(x, a, b) * r1).mean(),
                  (req(64, 4096), req(4096), req(4096))),
         Workload("layer_norm(x).relu() + x, 256x1024", lambda x: (ln_relu(x) * r2).mean(), (req(256, 1024),)),
         Workload("cross-entropy 64x32000", lambda x, t: F.cross_entropy(x, t),
                  (req(64, 32000), torch.randint(0, 32000, (64,))))]
    blk = Block()
    w.append(Workload("transformer block 4x64x128", lambda x: (blk(x) * r3).mean(), (torch.randn(4, 64, 128),),
                      blk.parameters()))
    if hf:
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
            m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
            ids = torch.randint(0, 1000, (4, 64))
            w.append(Workload("tiny HF GPT-2 LM (2 layers, 128), 4x64", lambda i: m(input_ids=i, labels=i).loss,
                              (ids,), m.parameters()))
        except Exception as e:  # noqa: BLE001
            print(f"(tiny HF GPT-2 skipped: {e})")
    return w


# ---------------------------------------------------------------------------- measures
def peak_bytes(w: Workload, f) -> int:
    """The most memory one step holds at once beyond what was allocated before it."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as p:
        w.step(f)
    mem = sorted((e.start_ns(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    cur = peak = 0
    for _, b in mem:
        cur += b
        peak = max(peak, cur)
    return peak


def floor_share(w: Workload, step_s: float) -> float:
    """The share of eager's median step (`step_s`) spent in matmul/attention/embedding kernels,
    forward and backward (their own time under the profiler, per step)."""
    for _ in range(2):
        w.step(w.fn)
    n = 5
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(n):
            w.step(w.fn)
    floor = sum(e.self_cpu_time_total for e in p.key_averages() if any(e.key.startswith(k) for k in FLOOR_OPS))
    return min(1.0, floor / 1e6 / n / step_s)


def grad_error(w: Workload, f) -> float:
    """max |g - g64| / max |g64| over the leaves' gradients, g64 from the same step in float64."""
    w.step(f)
    got = [t.grad.detach().clone() for t in w.leaves()]
    ref = _float64_grads(w)
    num = max(float((g.double() - r).abs().max()) for g, r in zip(got, ref))
    den = max(float(r.abs().max()) for r in ref)
    return num / den


def _float64_grads(w: Workload) -> list:
    """The same step in float64 eager: the parameters cast in place for it, then restored."""
    kept = [p.data for p in w.params]
    args = tuple(a.detach().double().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor)
                 and a.is_floating_point() else a for a in w.args)
    w64 = Workload(w.name, w.fn, args, w.params)
    default = torch.get_default_dtype()
    try:
        for p in w.params:
            p.data = p.data.double()
        torch.set_default_dtype(torch.float64)
        w64.step(w.fn)
        return [t.grad.detach().clone() for t in w64.leaves()]
    finally:
        torch.set_default_dtype(default)
        for p, d in zip(w.params, kept):
            p.data, p.grad = d, None


def contestants(w: Workload, inductor: bool) -> dict:
    ds.reset()
    out = {"eager": w.fn}
    with ds.config.patch(fused_sync=True, fused_autograd=True):
        f = ds.compile(w.fn, dynamic=True, backend="fused")
        for _ in range(2):
            w.step(f)  # forward kernels, then the backward's (compiled at the first backward)
    out["ours"] = f
    if inductor:
        torch._dynamo.reset()
        ind = torch.compile(w.fn, dynamic=True)
        t0 = time.perf_counter()
        w.step(ind)
        out["inductor"] = ind
        out["_inductor_compile_s"] = time.perf_counter() - t0
    return out


def steady(w: Workload, inductor: bool) -> dict:
    cs = contestants(w, inductor)
    comp = cs.pop("_inductor_compile_s", None)
    losses = {k: float(w.step(f).detach()) for k, f in cs.items()}
    for k, v in losses.items():
        assert abs(v - losses["eager"]) <= 1e-5 * max(1.0, abs(losses["eager"])), (k, v, losses["eager"])
    times = interleaved({k: (lambda f=f: w.step(f)) for k, f in cs.items()})
    res = {k: statistics.median(v) for k, v in times.items()}
    res["_peak"] = {k: peak_bytes(w, f) for k, f in cs.items()}
    res["_err"] = {k: grad_error(w, f) for k, f in cs.items()}
    res["_compile"] = comp
    return res


def sequences(inductor: bool) -> list:
    """60 training steps with random shapes, from cold: total seconds per contestant."""
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    a, b = torch.randn(4096, requires_grad=True), torch.randn(4096, requires_grad=True)
    seq1 = [(torch.randn(rng.randint(8, 64), 4096, requires_grad=True), a, b) for _ in range(60)]
    blk = Block()
    seq2 = [(torch.randn(rng.randint(1, 8), rng.randint(8, 128), 128),) for _ in range(60)]
    rows = []
    for label, fn, seq, params in (
            ("pointwise chain, 60 steps, rows 8-64", lambda x, a, b: chain(x, a, b).square().mean(), seq1, [a, b]),
            ("transformer block, 60 steps, batch 1-8, seq 8-128", lambda x: blk(x).square().mean(), seq2,
             list(blk.parameters()))):
        res = {}
        makers = {"eager": lambda: fn, "ours": lambda: ds.compile(fn, dynamic=True, backend="fused")}
        if inductor:
            makers["inductor"] = lambda: torch.compile(fn, dynamic=True)
        for k, make in makers.items():
            ds.reset()
            torch._dynamo.reset()
            # cold for both: a fresh kernel directory for ours, no FX-graph/AOT/kernel caches for Inductor
            # (a warm Inductor cache from an earlier run made its total 10x smaller: not a compile)
            import torch._inductor.config as ind_config
            with ds.config.patch(fused_cache_dir=_fresh_dir(), fused_autograd=True), \
                    ind_config.patch(force_disable_caches=True):
                t0 = time.perf_counter()
                f = make()
                for args in seq:
                    for p in params + [x for x in args if x.requires_grad]:
                        p.grad = None
                    f(*args).backward()
                res[k] = time.perf_counter() - t0
        rows.append((label, res))
    return rows


def _fresh_dir() -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="ds-train-bench-")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--no-sequences", action="store_true")
    ap.add_argument("--only", default="", help="run the workloads whose name contains this text")
    opts = ap.parse_args(argv)
    inductor = not opts.no_inductor
    print(f"# training steps: torch {torch.__version__}, {os.cpu_count()} cores")
    for th in [int(t) for t in opts.threads.split(",")]:
        torch.set_num_threads(th)
        print(f"\n## {th} thread(s): median ms per step (forward + loss + backward), ratios")
        print("| workload | eager ms | ours/eager | inductor/eager | **ours/inductor** | floor (matmul &c. share) "
              "| peak MB eager / ours / inductor | grad error eager / ours / inductor |")
        print("|---|---|---|---|---|---|---|---|")
        for w in workloads(not opts.no_hf):
            if opts.only not in w.name:
                continue
            r = steady(w, inductor)
            e, o, i = r["eager"], r["ours"], r.get("inductor", float("nan"))
            pk, er = r["_peak"], r["_err"]
            mb = " / ".join(f"{pk[k] / 2**20:.1f}" if k in pk else "-" for k in ("eager", "ours", "inductor"))
            es = " / ".join(f"{er[k]:.1e}" if k in er else "-" for k in ("eager", "ours", "inductor"))
            print(f"| {w.name} | {e * 1e3:.3f} | {o / e:.2f} | {i / e:.2f} | **{o / i:.2f}** | "
                  f"{floor_share(w, e):.0%} | {mb} | {es} |", flush=True)
    if not opts.no_sequences:
        torch.set_num_threads(1)
        print("\n## varying shapes, 1 thread: 60 training steps from cold, compiles included (s)")
        print("| sequence | eager | ours | inductor | **ours/inductor** |")
        print("|---|---|---|---|---|")
        for label, r in sequences(inductor):
            i = r.get("inductor", float("nan"))
            print(f"| {label} | {r['eager']:.2f} | {r['ours']:.2f} | {i:.2f} | **{r['ours'] / i:.3f}** |", flush=True)


if __name__ == "__main__":
    main()
