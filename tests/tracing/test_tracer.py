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


@pytest.mark.meta_device
def test_to_another_device_is_recorded():
    cf = ds.compile(lambda x: x.to("meta"))
    assert cf(torch.ones(2)).device.type == "meta"


def test_storage_offset_of_an_input_is_guarded():
    def f(x):
        return x * x.storage_offset()
    cf = ds.compile(f)
    base = torch.arange(10.0)
    for lo in (2, 4, 4, 0):
        torch.testing.assert_close(cf(base[lo:lo + 4]), f(base[lo:lo + 4]))
    assert cf.stats.compiles == 3


def test_storage_offset_of_a_computed_tensor_runs_eagerly():
    def f(x):
        return x * x[1:].storage_offset()
    cf = ds.compile(f)
    torch.testing.assert_close(cf(torch.ones(4)), f(torch.ones(4)))
    assert cf.stats.graph_breaks


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("fn", [
    lambda x: x.stride(),
    lambda x: x.unsqueeze(0).stride(),
    lambda x: x[:, ::2].stride(),
    lambda x: x.t().contiguous().stride(),
    lambda x: x.is_contiguous(),
])
def test_strides_equal_eager_on_every_layout(fn, dynamic):
    cases = [(torch.zeros(1, 5),), (torch.zeros(1, 99)[:, :5],), (torch.zeros(3, 5),), (torch.zeros(4, 7),),
             (torch.zeros(4, 9),), (torch.zeros(7, 4).t(),), (torch.zeros(0, 5),), (torch.zeros(2, 8)[:, :5],)]
    cf = ds.compile(fn, dynamic=dynamic)
    for (x,) in cases:
        assert cf(x) == fn(x), x.shape


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_torch_size_arguments_and_results_keep_their_type(dynamic):
    cf = ds.compile(lambda x, s: (x.reshape(s), x.shape, x.reshape(s).size()), dynamic=dynamic)
    for n, s in [(6, (2, 3)), (12, (4, 3)), (12, (4, 3)), (20, (5, 4))]:
        x, size = torch.ones(n), torch.Size(s)
        got = cf(x, size)
        assert type(got[1]) is torch.Size and type(got[2]) is torch.Size
        assert got[1] == x.shape and got[2] == size and got[0].shape == size


def test_bit_operations_on_sizes_stay_symbolic():
    def f(x, k):
        n = x.size(0)
        return x * (n & 1) + (n >> 1) + (n | k) + (n ^ 3) + (n << 2) + (7 & n)
    cf = check_vs_eager(f, [(torch.ones(n), k) for n, k in [(4, 2), (5, 9), (7, 0), (8, -3), (9, 2)]])
    assert cf.stats.compiles == 1


@pytest.mark.parametrize("fn", [
    lambda x: x[..., -1:].stride(),
    lambda x: x[:, :2].stride(),
    lambda x: x[:, :2].is_contiguous(),
    lambda x: x.transpose(0, 1).stride(),
    lambda x: (x + 1).stride(),
])
def test_a_views_strides_follow_its_base_on_every_shape(fn):
    cf = ds.compile(fn)
    for shape in [(0, 0, 0), (2, 2, 1), (2, 2, 2), (3, 2, 5), (3, 4, 5), (3, 4, 1)]:
        x = torch.zeros(shape)
        assert cf(x) == fn(x), shape


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_strides_of_empty_reduction_results_equal_eager_or_run_eagerly(dynamic):
    fn = lambda y: (y.prod(-2, keepdim=True).stride(), y.sum(-1, keepdim=True).is_contiguous())  # noqa: E731
    cf = ds.compile(fn, dynamic=dynamic)
    for shape in [(0, 0, 0), (2, 3, 4), (0, 2, 0), (3, 1, 2), (4, 3, 2)]:
        y = torch.randn(shape)
        assert cf(y) == fn(y), shape


def test_a_view_of_an_empty_reduction_reads_strides_like_eager():
    fn = lambda y: y.prod(-2, keepdim=True).movedim(0, -1).stride()  # noqa: E731
    cf = ds.compile(fn)
    for shape in [(0, 0, 0), (2, 3, 4), (3, 4, 5)]:
        y = torch.randn(shape)
        assert cf(y) == fn(y), shape
