"""Small programs that the trace and report tests run under DYNASHAPE_TRACE."""
import importlib.util
import os

import torch

import dynashape as ds


def _demo():
    """examples/demo.py, whose model and graph break the trace tests run (it is not a package)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "examples", "demo.py")
    spec = importlib.util.spec_from_file_location("dynashape_demo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_DEMO = _demo()
TinyModel = _DEMO.TinyModel  # the demo's model: Linear, ReLU, LayerNorm, a branch on a size, softmax
clip_positive = _DEMO.clip_if_positive  # the demo's graph break: `if x.sum() > 0:`


def branchy(x):
    y = x * 2
    if x.size(0) > 6:  # a guard on a size, from this line
        y = y + 1
    return y.sum()


def run_demo_like():
    """The demo's model over varying shapes, a branch on a size and a graph break."""
    torch.manual_seed(0)
    model = ds.compile(TinyModel().eval())
    for batch, seq in [(2, 8), (3, 8), (5, 12), (7, 20)]:
        model(torch.randn(batch, seq, 16))
    f = ds.compile(branchy)
    for n in (2, 3, 8):
        f(torch.randn(n, 4))
    ds.compile(clip_positive)(torch.randn(5))
    return model, f
