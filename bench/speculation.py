"""Data-dependent branches compiled by speculation: a training loop of 200 steps whose step skips
a NaN batch (`if torch.isnan(loss)`) and returns early when the batch loss is already low
(`if loss < LOW`), so the step takes one of three paths decided on data.

Side by side in one run: eager, ours (default), torch.compile default (Inductor) and with
dynamic=True. Total time of the loop, compiles included (cold: each run in a fresh cache, Inductor's
on-disk caches disabled),
medians over --repeats runs; compiles and graph breaks counted. Losses are checked against eager.

    python bench/speculation.py [--repeats 3] [--steps 200]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import dynashape as ds

BATCH, FEATURES, CLASSES = 32, 64, 10
LOW = 2.3  # about the loss of a fresh classifier: the early return is taken on roughly half the batches


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.GELU(), torch.nn.Linear(128, CLASSES))

    def forward(self, x):
        return self.net(x)


def step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    if torch.isnan(loss):  # a bad batch: skip the update
        return loss, False
    if loss < LOW:  # low enough: no weight penalty this step
        return loss, True
    penalty = sum(p.pow(2).sum() for p in model.parameters())
    return loss + 1e-4 * penalty, True


def batches(steps):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(steps):
        x = torch.randn(BATCH, FEATURES, generator=g)
        if i % 37 == 36:
            x[0, 0] = float("nan")
        out.append((x, torch.randint(0, CLASSES, (BATCH,), generator=g)))
    return out


def train(step_fn, data):
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    t0 = time.perf_counter()
    for x, y in data:
        loss, ok = step_fn(model, x, y)
        if ok:
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return time.perf_counter() - t0, losses


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args(argv)
    ds.config.pgo = False  # cold compiles: torch.compile starts without a profile too
    import torch._dynamo
    import torch._inductor.config as inductor_config

    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    inductor_config.force_disable_caches = True  # cold: no FX-graph or kernel cache from an earlier run
    torch.set_num_threads(1)
    data = batches(a.steps)
    results: dict = {}

    def run(name, make):
        times = []
        for _ in range(a.repeats):
            fn, info = make()
            t, losses = train(fn, data)
            times.append(t)
            results[name] = (times, info(), losses)

    run("eager", lambda: (step, lambda: ""))

    def ours():
        ds.reset()
        cf = ds.compile(step)
        return cf, lambda: (f"{cf.stats.compiles} compiles, {cf.stats.paths} paths, {cf.stats.side_exits} side exits, "
                            f"{len(cf.stats.graph_breaks)} graph breaks (eager calls)")
    run("dynashape", ours)
    for name, dyn in (("torch.compile (inductor)", None), ("torch.compile (inductor, dynamic=True)", True)):
        def tc(dyn=dyn):
            torch._dynamo.reset()
            counters = torch._dynamo.utils.counters
            counters.clear()
            fn = torch.compile(step, dynamic=dyn)
            return fn, lambda: (f"{counters['stats']['unique_graphs']} graphs compiled, "
                                f"{sum(counters['graph_break'].values())} graph breaks")
        run(name, tc)

    ref = results["eager"][2]
    eager_t = statistics.median(results["eager"][0])
    print(f"speculation: {a.steps} training steps (MLP {FEATURES}-128-{CLASSES}, batch {BATCH}), NaN check + "
          f"early return; median of {a.repeats} cold runs, 1 thread")
    print(f"  {'':40s} {'total s':>8s} {'/eager':>7s}  losses==eager  notes")
    for name, (times, info, losses) in results.items():
        t = statistics.median(times)
        same = all((a_ != a_ and b != b) or abs(a_ - b) < 1e-4 for a_, b in zip(losses, ref))
        print(f"  {name:40s} {t:8.2f} {t / eager_t:7.2f}  {str(same):13s}  {info}")
    ours_t = statistics.median(results["dynashape"][0])
    best_tc = min(statistics.median(results[k][0]) for k in results if k.startswith("torch.compile"))
    print(f"  ours / best torch.compile: {ours_t / best_tc:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
