"""The differential suite (tests/test_differential.py) again, every program compiled with
backend='fused': the same oracle (compiled vs eager on every shape, one graph, no fallback)."""
import pytest

import dynashape as ds
from dynashape.backends import fused
from tests.test_differential import *  # noqa: F401,F403 - the same tests, collected here
from tests.test_differential import _seeded  # noqa: F401 - autouse; `import *` leaves out `_` names: the same data

_real_compile = ds.compile
_seen = {"fused_entries": 0}


@pytest.fixture(autouse=True)
def _fused_backend(monkeypatch):
    def compile_fused(fn=None, **kw):
        kw.setdefault("backend", "fused")
        return _real_compile(fn, **kw)
    monkeypatch.setattr(ds, "compile", compile_fused)
    yield


def test_zz_the_suite_ran_kernels():
    """Kernels are loaded (not only eager fallbacks) and none failed to build while the suite ran. (Under
    pytest-xdist this test may run on a worker before any other here: it runs a kernel of its own.)"""
    import torch

    from dynashape.backends.fused import triton_run  # DYNASHAPE_TEST_TRITON=cpu: Triton kernels instead of C++

    def ran():
        return fused.counters["compiles"] + fused.counters["disk_hits"] + fused.counters["memory_hits"] \
            + triton_run.counters["launches"]

    before = ran()
    cf = ds.compile(lambda x: (x * 2).sin() + 1, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(5)), (torch.ones(5) * 2).sin() + 1)
    assert ran() > before
    assert fused.counters["failures"] == 0
