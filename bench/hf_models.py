"""Tiny random Hugging Face models compiled with dynashape: graphs, graph breaks, compiles and steady
per-call time against eager, over 11 (batch, length) shapes with attention masks (tests/models/hf.py).

    python bench/hf_models.py [names...]

Skips (exit 0) when transformers is not installed."""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    from tests.models.hf import SHAPES, inputs, make, steady  # noqa: E402
except BaseException as e:  # pytest.skip when transformers is missing
    print(f"skipped: {e}")
    sys.exit(0)

import torch  # noqa: E402

import dynashape as ds  # noqa: E402

ds.config.pgo = False
ALL = ["gpt2", "llama", "qwen2", "mistral", "bert", "distilbert", "t5", "vit", "whisper"]


def main(names):
    torch.set_num_threads(1)
    print(f"{'model':11} {'graphs':>6} {'breaks':>6} {'compiles':>8} {'compile s':>9} {'eager ms':>9} "
          f"{'compiled ms':>11} {'ratio':>6}")
    for name in names:
        m = make(name).eval()
        cm = ds.compile(m)
        t0 = time.perf_counter()
        with torch.no_grad():
            for b, t in SHAPES:
                cm(**inputs(name, b, t))
            first = time.perf_counter() - t0
            kw = inputs(name, 4, 32)
            e = steady(m, kw, reps=7)
            c = steady(cm, kw, reps=7)
        graphs = sum(1 for en in cm.entries if en.graph is not None)
        print(f"{name:11} {graphs:6d} {len(cm.stats.graph_breaks):6d} {cm.stats.compiles:8d} {first:9.2f} "
              f"{e * 1e3:9.2f} {c * 1e3:11.2f} {c / e:6.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ALL)
