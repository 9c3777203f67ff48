"""The differential suite (tests/test_differential.py) again, every region a Triton kernel: in Triton's
interpreter on CPU tensors here (TRITON_INTERPRET=1, set by tests/conftest.py), on the GPU's compiler
where there is one. The same oracle: compiled vs eager on every shape, one graph, no fallback."""
import pytest

import dynashape as ds

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[gpu]'): the Triton kernels go untested")

from dynashape.backends.fused import triton_run  # noqa: E402
from tests.test_differential import *  # noqa: F401,F403,E402 - the same tests, collected here
from tests.test_differential import _seeded  # noqa: F401,E402 - autouse; `import *` leaves out `_` names

_real_compile = ds.compile
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in the interpreter: lanes masked off


@pytest.fixture(autouse=True)
def _triton_kernels(monkeypatch):
    def compile_fused(fn=None, **kw):
        kw.setdefault("backend", "fused")
        return _real_compile(fn, **kw)
    monkeypatch.setattr(ds, "compile", compile_fused)
    with ds.config.patch(triton="cpu"):
        yield


def test_zz_the_suite_ran_triton_kernels():
    """Triton kernels are launched (not only eager fallbacks): one of its own, since under pytest-xdist this
    test may run on a worker before any other here."""
    import torch
    before = triton_run.counters["launches"]
    cf = ds.compile(lambda x: (x * 2).sin() + 1, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(5)), (torch.ones(5) * 2).sin() + 1)
    assert triton_run.counters["launches"] > before
