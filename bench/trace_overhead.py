"""What the structured compile trace (DYNASHAPE_TRACE) costs a compile.

Cold-compile time of three small models with tracing off and on, in one
process: the 8-layer MLP (Linear(32, 32) + ReLU, x8) on (4, 32), the demo's
TinyModel (Linear -> ReLU -> LayerNorm, a branch on a size, Linear, softmax) on
(5, 7, 16), and a pre-norm transformer block (bench/compile_latency.py's) on
(2, 16, 64); `ds.compile(model, dynamic=True)` after `ds.reset()`, PGO off.
Each round measures off then on (or on then off, alternating), REPEATS rounds
after one unmeasured warm-up of each; prints the medians and on/off - 1 (the
budget is 5%). With tracing off every hook is one flag check; on, a compile
queues ~15 records (stack, symbols, guards, graph, code, guard list, metrics)
and a writer thread formats and writes them after the compile returns. Here the
thread is held back and the queue is written by an explicit flush after each
timed compile, so "write" is the formatting and writing itself, off the
compile's path but still CPU time the process spends; "hooks" is the time the
compile spent inside the trace hooks (queueing), the part of "on - off" that is
not noise. Percentages are of the median compile with tracing off.
"""
from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

import dynashape as ds
from dynashape.logs import trace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_latency import Block  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from demo import TinyModel  # noqa: E402

REPEATS = 5


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(32, 32), nn.ReLU())])
    yield "mlp8", mlp, torch.randn(4, 32)
    yield "demo TinyModel", TinyModel().eval(), torch.randn(5, 7, 16)
    yield "transformer block", Block().eval(), torch.randn(2, 16, 64)


HOOKS = [0.0]  # time spent in the writer's hooks during the current compile


def timed_hooks():
    call = trace.Writer.__call__

    def timed(self, kind, *args):
        t = time.perf_counter()
        call(self, kind, *args)
        HOOKS[0] += time.perf_counter() - t
    trace.Writer.__call__ = timed


def compile_time(model, x, trace_dir, writes=None, hooks=None) -> float:
    ds.reset()
    gc.collect()
    with ds.config.patch(trace_dir=trace_dir):
        f = ds.compile(model, dynamic=True)
        HOOKS[0] = 0.0
        t = time.perf_counter()
        f(x)
        dt = time.perf_counter() - t
        if trace_dir:
            t = time.perf_counter()
            trace.writer().flush()
            if writes is not None:
                writes.append(time.perf_counter() - t)
                hooks.append(HOOKS[0])
    assert f.stats.compiles == 1 and not f.stats.graph_breaks
    return dt


def main():
    torch.set_num_threads(1)
    ds.config.pgo = False
    trace.Writer.soon = lambda self: None  # hold the writer thread back: flush() writes, timed apart
    timed_hooks()
    print(f"median of {REPEATS}, ms; compile = the first call; write = formatting and writing the records")
    with tempfile.TemporaryDirectory() as d:
        for name, model, x in models():
            compile_time(model, x, "")
            compile_time(model, x, d)
            off, on, writes, hooks = [], [], [], []
            for r in range(REPEATS):
                for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    if mode == "off":
                        off.append(compile_time(model, x, ""))
                    else:
                        on.append(compile_time(model, x, d, writes, hooks))
            moff, mon = statistics.median(off), statistics.median(on)
            mw, mh = statistics.median(writes), statistics.median(hooks)
            print(f"{name:18s} compile off {moff * 1e3:6.2f}  on {mon * 1e3:6.2f} ({100 * (mon / moff - 1):+5.1f}%)"
                  f"   hooks {mh * 1e3:4.2f} ({100 * mh / moff:3.1f}%)   write {mw * 1e3:4.2f} ({100 * mw / moff:4.1f}%)")
        size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))
        print(f"trace written: {size / 1024:.0f} KiB for {len(list(models())) * (2 * REPEATS + 1)} compiles")


if __name__ == "__main__":
    main()
