"""Export of data-dependent sizes: views and slices of `tolist()`/`item()` values, bincount with a
data-dependent minlength, direct `torch.ops.aten` calls, nonzero_static, and the bounds of
data-dependent sizes in `range_constraints` (dynashape/tracing/meta/views.py, indexing.py, aten.py,
tracing/datadep.py, export/export.py). Oracle: the exported program (and after save/load) vs eager."""
import pytest
import torch

import dynashape as ds
from dynashape import Dim
from tests.export.common import check_vs_eager, roundtrip


def view_of_two_values(x, n):
    a, b = n.tolist()
    return x[: a * b].view(a, b) * 2


def reshape_to_a_value(x, n):
    (b,) = n.tolist()
    return x.reshape(b) + 1


def expand_by_half_a_value(x, n):
    (u,) = n.tolist()
    return torch.ones(1, 1, 1).expand(2, u // 2, 3) * x.sum()


def slice_to_an_item(x, n):
    return x[: n.item()] * 3


CASES = {
    "view(u0, u1)": (view_of_two_values, (torch.randn(24), torch.tensor([3, 4])),
                     [(torch.randn(24), torch.tensor([2, 5])), (torch.randn(24), torch.tensor([0, 7])),
                      (torch.randn(24), torch.tensor([1, 1]))]),
    "reshape(u0)": (reshape_to_a_value, (torch.randn(6), torch.tensor([6])), [(torch.randn(6), torch.tensor([6]))]),
    "expand(2, u0 // 2, 3)": (expand_by_half_a_value, (torch.randn(3), torch.tensor([8])),
                              [(torch.randn(3), torch.tensor([1])), (torch.randn(3), torch.tensor([5]))]),
    "x[:u0]": (slice_to_an_item, (torch.randn(8, 2), torch.tensor(3)),
               [(torch.randn(8, 2), torch.tensor(0)), (torch.randn(8, 2), torch.tensor(8))]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_and_slices_of_data_dependent_sizes_export(name):
    fn, args, extra = CASES[name]
    ep = ds.export(fn, args)
    check_vs_eager(ep, fn, args, n=0, extra=extra, roundtrip_too=False)  # TODO: tolist cannot be saved yet


def test_a_negative_data_dependent_size_is_refused_at_run_time_not_taken_as_minus_one():
    ep = ds.export(reshape_to_a_value, (torch.randn(6), torch.tensor([6])))
    with pytest.raises(RuntimeError, match=">= 0|must"):
        ep(torch.randn(6), torch.tensor([-1]))


def test_bincount_with_a_data_dependent_minlength_exports():
    def f(x):
        return torch.bincount(x, minlength=x.max().item())
    ep = ds.export(f, (torch.tensor([1, 2, 3, 3]),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert "minlength=u0" in str(ep.graph)
    check_vs_eager(ep, f, (torch.tensor([1, 2, 3, 3]),), n=0,
                   extra=[(torch.tensor([0, 9, 2]),), (torch.tensor([7, 7]),), (torch.tensor([0, 0, 1, 4, 4]),)])


def test_nonzero_static_keeps_the_input_dynamic():
    def f(x):
        return torch.nonzero_static(x, size=4) + x.size(0)
    ep = ds.export(f, (torch.tensor([1., 0, 2, 0, 3]),), dynamic_shapes={"x": {0: Dim("n", max=32)}})
    assert list(ep.range_constraints.values()) == [(2, 32)]
    check_vs_eager(ep, f, (torch.tensor([1., 0, 2, 0, 3]),), n=4)


@pytest.mark.parametrize("name,fn", [
    ("aten.slice.Tensor", lambda x: torch.ops.aten.slice.Tensor(x, 0, 1, x.size(0)) * 2),
    ("aten.slice default end", lambda x: torch.ops.aten.slice.Tensor(x, 1, 0, 9223372036854775807, 2)),
    ("aten.mul.Tensor", lambda x: torch.ops.aten.mul.Tensor(x, 2)),
    ("aten.add packet", lambda x: torch.ops.aten.add(x, x)),
    ("aten.view", lambda x: torch.ops.aten.view.default(x, [-1])),
    ("aten.sum.dim_IntList", lambda x: torch.ops.aten.sum.dim_IntList(x, [1], True)),
    ("aten.transpose", lambda x: torch.ops.aten.transpose.int(x, 0, 1).contiguous()),
], ids=lambda v: v if isinstance(v, str) else "")
def test_direct_aten_calls_keep_sizes_dynamic(name, fn):
    x = torch.randn(5, 6)
    ep = ds.export(fn, (x,), dynamic_shapes={"x": {0: Dim("a", max=64), 1: Dim("b", max=64)}})
    assert set(ep.range_constraints.values()) == {(2, 64)}  # nothing specialized
    check_vs_eager(ep, fn, (x,), n=4)


def test_range_constraints_list_the_bounds_of_data_dependent_sizes():
    def f(x, m):
        return x.nonzero(), x.masked_select(m)
    args = (torch.tensor([[1., 0], [2, 0]]), torch.tensor([[True, False], [True, True]]))
    ep = ds.export(f, args)
    ranges = ep.range_constraints
    assert sorted(v for k, v in ranges.items() if k.startswith("u")) == [(0, 4), (0, 4)]
    assert roundtrip(ep).range_constraints == ranges
    check_vs_eager(ep, f, args, n=0, extra=[(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.bool))])


def test_builtin_max_and_min_of_a_data_dependent_value_become_symbolic():
    def f(x):
        return torch.zeros(max(x.sum().item(), 1024)), min([x.size(0), x[0].item(), 7])
    ep = ds.export(f, (torch.tensor([3, 4]),))
    assert "Max(1024, u0)" in str(ep.graph)
    for x in (torch.tensor([3, 4]), torch.tensor([1000, 40]), torch.tensor([-5, 2])):
        (got, m), (want, n) = ep(x), f(x)
        assert torch.equal(got, want) and m == n


def test_builtin_max_is_itself_again_after_the_trace():
    import builtins
    ds.export(lambda x: x * max(x.size(0), 3), (torch.randn(4),))
    assert builtins.max.__module__ == "builtins" and max(2, 5) == 5
