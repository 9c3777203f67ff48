"""The guard extension (guards/native.py) loads on a thread of its own: a compile made while it
loads (a C build the first time in a cache folder) does not wait for it, its guards check module
state in Python meanwhile, and their stand-ins are replaced by the extension's objects once it is
loaded. Oracle: the compiled module against the module run eagerly, before and after the swap,
and after changes the swapped-in watcher must see."""
import threading

import pytest
import torch
from torch import nn

import dynashape as ds
from dynashape.guards import native


@pytest.fixture
def slow_extension(monkeypatch):
    """The extension as if it were being built: its load waits for the event the test sets."""
    mod = native.extension()
    if mod is None:
        pytest.skip(f"no guard extension here: {native.why_not()}")
    gate = threading.Event()

    def load():
        assert gate.wait(30), "the test never let the load finish"
        return mod

    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setattr(native, "_loading", [])
    monkeypatch.setattr(native, "_upgrades", [])
    monkeypatch.setattr(native, "_load", load)
    ds.reset()
    yield gate
    gate.set()
    for t in list(native._loading):
        t.join(30)
    ds.reset()


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x).relu() * self.scale


def _same(cm, model, x):
    with torch.no_grad():
        torch.testing.assert_close(cm(x), model(x))


def _finish(gate):
    gate.set()
    for t in list(native._loading):
        t.join(30)
    assert "module" in native._state


def test_a_compile_made_while_the_extension_loads_does_not_wait_and_gets_it_when_loaded(slow_extension):
    torch.manual_seed(0)
    model = Scaled()
    cm = ds.compile(model, dynamic=True)
    for n in (3, 5):  # compiled, then reused, while the load is held back: nothing waited for it
        _same(cm, model, torch.randn(n, 4))
    assert "module" not in native._state and cm.stats.compiles == 1
    ns = cm.entries[0].guard_set.ns
    assert type(ns["_mw"]) is native.Unwatched
    assert type(ns["_pinned_same"]) is native.Checked
    model.scale = 3.0  # seen by the Python checks
    _same(cm, model, torch.randn(4, 4))
    _finish(slow_extension)
    for entry in cm.entries:  # swapped in, in each entry's namespace
        ns = entry.guard_set.ns
        assert type(ns["_mw"]).__name__ == "Watch" and type(ns["_pinned_same"]).__name__ == "Same"
    compiles = cm.stats.compiles
    _same(cm, model, torch.randn(6, 4))
    _same(cm, model, torch.randn(2, 4))
    assert cm.stats.compiles == compiles
    # what the extension's objects must see, after the swap
    model.scale = 0.5
    _same(cm, model, torch.randn(3, 4))
    model.lin.weight.requires_grad_(False)
    _same(cm, model, torch.randn(3, 4))
    model.lin = nn.Linear(4, 4)
    _same(cm, model, torch.randn(3, 4))


def test_a_guard_copied_for_wider_ranges_is_upgraded_too(slow_extension):
    ns = {}
    native.watch([{}], (), ns=ns, key="_mw")
    copy = dict(ns)
    native.adopt(copy)
    _finish(slow_extension)
    assert type(ns["_mw"]).__name__ == "Watch" and type(copy["_mw"]).__name__ == "Watch"
    assert ns["_mw"] is not copy["_mw"]  # each guard commits its own tags


def test_without_the_extension_the_python_checks_stay(monkeypatch):
    monkeypatch.setattr(native, "_state", {"error": "turned off by the test"})
    ds.reset()
    torch.manual_seed(0)
    model = Scaled()
    cm = ds.compile(model, dynamic=True)
    _same(cm, model, torch.randn(3, 4))
    ns = cm.entries[0].guard_set.ns
    assert type(ns["_mw"]) is native.Unwatched and "_pinned_same" not in ns
    assert "list(map(_rg_shape, _pinned)) != _pinned_state" in cm.entries[0].guard_set.source
    model.lin.weight.requires_grad_(False)
    _same(cm, model, torch.randn(3, 4))
    ds.reset()
