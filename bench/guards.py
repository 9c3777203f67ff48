"""Dispatch cost with many cache entries, and the cost of a function past its recompile limit.

Prints, side by side in one run: per-call time of a tiny function when the matching
entry is the oldest / newest of 1, 8, 64 and 512 static entries, and per-call time of
misses after the recompile limit (it then runs eagerly) vs eager itself. Medians of 5.
"""
from __future__ import annotations

import statistics
import time
import warnings

import torch

import dynashape as ds

ds.config.pgo = False
torch.set_num_threads(1)
warnings.filterwarnings("ignore")


def f(x):
    return (x * 2 + 1)[: x.size(0) // 2 + 1].sum(0)


def per_call_us(fn, *args, n=2000, repeat=5):
    for _ in range(50):
        fn(*args)
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn(*args)
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main():
    eager = per_call_us(f, torch.randn(1, 4))
    print(f"eager: {eager:.1f} us/call")
    base = None
    print(f"{'entries':>8} {'oldest us':>10} {'newest us':>10} {'oldest / 1 entry':>17}")
    with ds.config.patch(recompile_limit=10000):
        for N in (1, 8, 64, 512):
            cf = ds.compile(f, dynamic=False)
            for n in range(1, N + 1):
                cf(torch.randn(n, 4))
            oldest = per_call_us(cf, torch.randn(1, 4))
            newest = per_call_us(cf, torch.randn(N, 4))
            base = base or oldest
            print(f"{N:>8} {oldest:>10.1f} {newest:>10.1f} {oldest / base:>17.2f}")

    cf = ds.compile(f, dynamic=False)  # recompile_limit = 8: then every new shape runs eagerly
    for n in range(1, 12):
        cf(torch.randn(n, 4))
    x = torch.randn(100, 4)
    past, eager = per_call_us(cf, x), per_call_us(f, x)
    print(f"past the limit: {past:.1f} us/call vs eager {eager:.1f} us/call: {past / eager:.2f}x "
          f"({past - eager:.1f} us over eager); recompile reasons kept: {len(cf.stats.recompile_reasons)}")


if __name__ == "__main__":
    main()
