"""The meta run of each op (tracing/meta_cache.py): in-place ops under autograd."""
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
