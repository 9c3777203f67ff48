"""What a caller wraps a compiled call in: the trace never shows its stand-ins to the caller's hooks
or modes, and the call does what eager does under them (a hunt by hand, eleventh session)."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

import dynashape as ds

lin = torch.nn.Linear(4, 4)


def f(x):
    return (lin(x).sin() * x).sum()


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_the_caller_s_saved_tensors_hooks_see_real_tensors_only(backend):
    """A pack hook around the call (activation offloading) was called by the trace's meta ops with
    FakeTensors; `save_on_cpu()` around the call never compiled ("Cannot copy out of meta tensor")."""
    cf = ds.compile(f, backend=backend)
    for n in (3, 5, 7):
        seen, grads = [], []
        for fn in (f, cf):
            torch.manual_seed(n)
            x = torch.randn(n, 4, requires_grad=True)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
                y = fn(x)
            y.backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[1], grads[0])
        assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in seen), {type(t) for t in seen}
        with torch.autograd.graph.save_on_cpu():
            x = torch.randn(n, 4, requires_grad=True)
            cf(x).backward()
    assert not cf.stats.graph_breaks, cf.stats.graph_breaks


class _Log(TorchFunctionMode):
    def __init__(self, swap=False):
        super().__init__()
        self.args, self.swap = [], swap

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.args += [a for a in args if isinstance(a, torch.Tensor)]
        if self.swap and func is torch.Tensor.sin:  # a mode that changes what a call does
            func = torch.Tensor.cos
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_a_call_under_the_caller_s_torch_function_mode_runs_as_eager_does(backend):
    """The trace ran under the caller's mode, which got 65 FakeTensors; and a warm entry ran its graph
    (fused kernels the mode never sees) where the mode changes what a call does."""
    cf = ds.compile(f, backend=backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), f(x))  # a warm entry
    for swap in (False, True):
        with _Log(swap) as le:
            want = f(x)
        with _Log(swap) as lc:
            got = cf(x)
        torch.testing.assert_close(got, want)
        assert [type(a) for a in lc.args] == [type(a) for a in le.args]
    assert any("TorchFunctionMode" in b for b in cf.stats.graph_breaks)
    torch.testing.assert_close(cf(x), f(x))
    assert cf.stats.compiles == 1
