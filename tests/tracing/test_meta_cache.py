"""The meta run of each op (tracing/meta_cache.py): in-place ops under autograd."""
import pytest
import torch

import dynashape as ds


def test_inplace_relu_on_an_intermediate_traces_and_gives_eagers_gradients():
    lin = torch.nn.Linear(4, 4)
    relu = torch.nn.ReLU(inplace=True)

    def step(x):
        return (relu(lin(x) * 2) * x).sum()

    x = torch.randn(3, 4)
    step(x).backward()
    want = (lin.weight.grad.clone(), lin.bias.grad.clone())
    lin.zero_grad()
    cf = ds.compile(step)
    cf(x).backward()
    torch.testing.assert_close(lin.weight.grad, want[0])
    torch.testing.assert_close(lin.bias.grad, want[1])
    assert cf.stats.graph_breaks == [] and cf.stats.compiles == 1


def test_ops_below_autograd_are_served_by_the_cache_and_keep_eagers_history():
    # a call on tensors that require grad runs under autograd (its grad_fn is eager's); the aten ops
    # autograd hands down (addmm's Python meta kernel) come from the cache on a second compile
    from dynashape.tracing import meta_cache

    def f(x, w, b):
        y = torch.nn.functional.linear(x, w, b)
        return y, y.grad_fn.name(), y.relu().sum(-1)
    meta_cache._cache.clear()
    x, w, b = torch.randn(5, 3), torch.randn(4, 3, requires_grad=True), torch.randn(4, requires_grad=True)
    for _ in range(2):
        ds.reset()
        got = ds.compile(f, dynamic=True)(x, w, b)
        want = f(x, w, b)
        assert got[1] == want[1] == "AddmmBackward0"
        torch.testing.assert_close(got[0], want[0])
        (g,) = torch.autograd.grad(got[2].sum(), w)
        torch.testing.assert_close(g, torch.autograd.grad(want[2].sum(), w)[0])
    below = [k for k in meta_cache._cache if k[0] == "below autograd"]
    assert any("addmm" in str(k[1]) for k in below), below


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_a_retrace_under_another_default_dtype_is_not_served_the_first_traces_shapes(backend):
    # the cache key had no default dtype: the retrace's torch.zeros(n) was float32, so a branch on its
    # dtype took the first trace's side and the fused kernel typed the float64 factory as float32
    def f(h):
        z = torch.zeros(h.shape[-1])
        return (h * 2 if z.dtype == torch.float64 else h * 3) + torch.ones(h.shape[-1]) * 0.5, z.element_size()
    ds.reset()
    with ds.config.patch(fused_sync=True):
        cf = ds.compile(f, backend=backend)
        old = torch.get_default_dtype()
        for dt in (torch.float32, torch.float64, torch.float32, torch.float64):
            torch.set_default_dtype(dt)
            try:
                x = torch.randn(3, 4)
                (got, gs), (want, ws) = cf(x), f(x)
            finally:
                torch.set_default_dtype(old)
            assert got.dtype == want.dtype and gs == ws
            torch.testing.assert_close(got, want)
