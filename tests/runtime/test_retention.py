"""A compile keeps nothing of the caller's alive that eager lets go: after the call, a tensor only
the call (or a global the function rebinds) held is freed, as in eager. A weak container, a
`weakref.finalize` or the process's memory tells the difference (found by the state fuzzer,
seed 25112986: a WeakSet kept a rebound global tensor)."""
import gc
import weakref

import pytest
import torch

import dynashape as ds

lin = torch.nn.Linear(4, 4)
GT = torch.randn(5)


def _rebinds(x):
    global GT
    t = lin(x) * GT.shape[0]
    GT = GT * 0.5 + t.mean()
    return t


def _speculates(x):
    y = lin(x)
    if y.sum() > 0:  # a data-dependent branch: the trace runs the call's real values (speculation)
        return y * 2
    return y - 1


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_a_global_the_function_rebinds_is_freed_after_the_first_call(backend):
    """The trace's fakes of parameters that require grad are held by autograd nodes, out of the
    collector's sight: each fake held the tracer, and the tracer the first call's tensors."""
    cf = ds.compile(_rebinds, backend=backend)
    old = weakref.ref(GT)
    cf(torch.randn(3, 4))
    gc.collect()
    assert old() is None


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_a_speculated_call_s_input_is_freed_after_it_returns(backend):
    """The speculation's evaluation of an input's source ran under a namespace of ours, which the
    trace took for another module's globals: the entry's guards kept it, and the call's locals in it."""
    cf = ds.compile(_speculates, backend=backend)
    x = torch.randn(3, 4)
    r = weakref.ref(x)
    cf(x)
    del x
    gc.collect()
    assert r() is None
    assert cf.stats.compiles == 1
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), _speculates(x))
