"""The tracer records what the program does, not what happened to be true of the example."""
import pytest
import torch

import dynashape as ds

from tests.oracle import check_vs_eager


def _contiguous_then_mutate(x):
    y = x.contiguous()
    y.mul_(2)  # changes x only when x was already contiguous
    return x.sum(), y


@pytest.mark.parametrize("fn", [
    _contiguous_then_mutate,
    lambda x: x.contiguous().view(-1),
    lambda x: x.float().add_(1).sum() + x.sum(),
    lambda x: x.type_as(x).mul_(3).sum() + x.sum(),
    lambda x: x.to(torch.float32).mul_(2).sum() + x.sum(),
])
@pytest.mark.parametrize("dynamic", [None, True, False])
def test_ops_that_returned_their_input_on_the_example_are_replayed(fn, dynamic):
    cases = [(torch.ones(3, 4),), (torch.ones(4, 3).t(),), (torch.ones(5, 3),), (torch.ones(3, 5).t(),),
             (torch.ones(3, 4, dtype=torch.float64),)]
    check_vs_eager(fn, cases, dynamic=dynamic, allow_fallback=True)


def test_to_another_device_is_recorded():
    cf = ds.compile(lambda x: x.to("meta"))
    assert cf(torch.ones(2)).device.type == "meta"
