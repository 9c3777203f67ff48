"""Varying batch sizes: total wall time and number of compiles over a stream of calls.

The 8-layer MLP (Linear(32, 32) + ReLU, x8) is called 60 times with batch
sizes drawn uniformly from 1..64 (fixed seed; the same inputs, made before
timing, for everyone), under `torch.no_grad()`. Contestants: eager; ours with
`dynamic=True` and with the default `dynamic=None` (automatic dynamic);
`torch.compile` with the default dynamic and with `dynamic=True`, on torch's
eager backend wrapped to count the graphs it is given (it returns
`gm.forward`, like `backend="eager"`). Each run starts cold (a fresh
`ds.compile` object after `ds.reset()`, `torch._dynamo.reset()` and a fresh
`torch.compile` object), so the total includes every compile. Each contestant
is run once first, unmeasured, so one-time imports are not counted. REPEATS
rounds, the contestants in a rotating order; prints medians, the compile
counts, and the ratios ours/eager and ours/torch. For information it also
times a second, warm pass over the same 60 inputs with the same compiled
object (no compile may happen there), i.e. the steady state without compiles.

Batch size 1 is specialized (0/1 specialization) on both sides, so a stream
containing it costs one extra graph even with `dynamic=True`. Target: ours
(dynamic=True) within 1.5x of eager in total, and faster than torch.compile.
"""
from __future__ import annotations

import gc
import random
import statistics
import sys
import time

import torch
from torch import nn

import dynashape as ds

N_CALLS, MAX_BATCH, SEED, REPEATS = 60, 64, 0, 5


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(32, 32), nn.ReLU())])


def inputs():
    rng = random.Random(SEED)
    sizes = [rng.randint(1, MAX_BATCH) for _ in range(N_CALLS)]
    g = torch.Generator().manual_seed(SEED)
    return sizes, [torch.randn(b, 32, generator=g) for b in sizes]


class Counting:
    """torch's eager backend, counting the graphs it compiles."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def run_eager(model, xs):
    return model, (lambda: 0), None


def run_ours(dynamic):
    def make(model, xs):
        ds.reset()
        cf = ds.compile(model, dynamic=dynamic)
        return cf, (lambda: cf.stats.compiles), cf
    return make


def run_torch(dynamic):
    def make(model, xs):
        torch._dynamo.reset()
        counter = Counting()
        tc = torch.compile(model, backend=counter, dynamic=dynamic)
        return tc, (lambda: counter.graphs), None
    return make


CONTESTANTS = {
    "eager": run_eager,
    "ours dynamic=True": run_ours(True),
    "ours dynamic=None": run_ours(None),
    "torch dynamic=None": run_torch(None),
    "torch dynamic=True": run_torch(True),
}


def one_run(make, model, xs, refs, check):
    """(cold total, warm total, compiles, ours' stats or None)."""
    fn, compiles, cf = make(model, xs)
    gc.collect()
    t0 = time.perf_counter()
    outs = [fn(xs[0])]
    first = time.perf_counter() - t0
    outs += [fn(x) for x in xs[1:]]
    cold = time.perf_counter() - t0
    n = compiles()
    t0 = time.perf_counter()
    for x in xs:
        fn(x)
    warm = time.perf_counter() - t0
    assert compiles() == n, f"compiled again on the warm pass ({n} -> {compiles()})"
    if check:
        for y, ref in zip(outs, refs):
            torch.testing.assert_close(y, ref)
    stats = None
    if cf is not None:  # copy now: ds.reset() in the next ours run clears every compiled object's stats
        st = cf.stats
        stats = dict(reasons=list(st.recompile_reasons), breaks=list(st.graph_breaks),
                     fallbacks=list(getattr(st, "fallbacks", [])))
    return cold, warm, n, stats, first


def main():
    ds.config.pgo = False  # cold compiles: torch.compile has no profile to start from either
    torch.set_num_threads(1)
    model = make_mlp()
    sizes, xs = inputs()
    print(f"varying_shapes: mlp8, {N_CALLS} calls, batch sizes 1..{MAX_BATCH} (seed {SEED}; "
          f"{len(set(sizes))} distinct, batch 1 {'occurs' if 1 in sizes else 'does not occur'}), "
          f"median of {REPEATS}, torch {torch.__version__}, 1 thread, no_grad")
    names = list(CONTESTANTS)
    times = {k: [] for k in names}
    warm = {k: [] for k in names}
    compiles = {k: set() for k in names}
    last = {}
    with torch.no_grad():
        refs = [model(x) for x in xs]
        firsts = {k: [] for k in names}
        for k in names:  # warm-up, unmeasured, checks results against eager
            one_run(CONTESTANTS[k], model, xs, refs, check=True)
        for r in range(REPEATS):
            order = names[r % len(names):] + names[:r % len(names)]
            for k in order:
                cold, w, n, stats, first = one_run(CONTESTANTS[k], model, xs, refs, check=False)
                times[k].append(cold)
                firsts[k].append(first)
                warm[k].append(w)
                compiles[k].add(n)
                if stats is not None:
                    last[k] = stats
    med = {k: statistics.median(v) for k, v in times.items()}
    med_warm = {k: statistics.median(v) for k, v in warm.items()}
    print(f"  {'contestant':20s} {'total ms':>9s} {'per call us':>12s} {'compiles':>9s} {'warm pass ms':>13s}"
          f" {'first call ms':>14s}   runs (ms)")
    for k in names:
        n = "/".join(str(c) for c in sorted(compiles[k]))
        print(f"  {k:20s} {med[k] * 1e3:9.1f} {med[k] / N_CALLS * 1e6:12.1f} {n:>9s} {med_warm[k] * 1e3:13.1f}"
              f" {statistics.median(firsts[k]) * 1e3:14.2f}   " + " ".join(f"{t * 1e3:.1f}" for t in times[k]))
    for k, st in last.items():
        if st["breaks"] or st["fallbacks"]:
            print(f"  WARNING {k}: graph breaks {st['breaks']}, fallbacks {st['fallbacks']}")
        print(f"  {k} recompile reasons: {st['reasons']}")
    ok = True
    for k in ("ours dynamic=True", "ours dynamic=None"):
        r_eager = med[k] / med["eager"]
        r_t = {t: med[k] / med[t] for t in ("torch dynamic=None", "torch dynamic=True")}
        met = r_eager <= 1.5 and all(v < 1 for v in r_t.values())
        if k == "ours dynamic=True":
            ok = met
        print(f"  {k}: ours/eager {r_eager:.3f}, ours/torch(dynamic=None) {r_t['torch dynamic=None']:.3f}, "
              f"ours/torch(dynamic=True) {r_t['torch dynamic=True']:.3f}"
              f"  (target <= 1.5 and < 1: {'met' if met else 'NOT met'}); warm pass ours/eager "
              f"{med_warm[k] / med_warm['eager']:.3f}")
    print(f"  target (ours dynamic=True): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
