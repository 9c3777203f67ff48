"""Guards on which tensor inputs are one object (issue 10, item 8)."""
import pytest
import torch

import dynashape as ds

from tests.oracle import check_vs_eager


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_an_entry_traced_with_one_tensor_twice_is_not_reused_for_two(dynamic):
    def f(x, y):
        return x + y * 2
    cf = ds.compile(f, dynamic=dynamic)
    a, b = torch.ones(3), torch.zeros(3)
    torch.testing.assert_close(cf(a, a), f(a, a))
    torch.testing.assert_close(cf(a, b), f(a, b))
    assert any("is L['x']" in g for g in cf.entries[-1].guards)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_mutating_function_recompiles_when_inputs_become_aliases(dynamic):
    def f(x, y):
        x.add_(1)
        return y * 2
    a, b = torch.ones(4), torch.zeros(4)
    cases = [(a, b), (a, a), (b, a)]
    cf = ds.compile(f, dynamic=dynamic)
    for x, y in cases:
        x1, y1 = (x.clone(), y.clone()) if x is not y else (x.clone(),) * 2
        x2, y2 = (x.clone(), y.clone()) if x is not y else (x.clone(),) * 2
        torch.testing.assert_close(cf(x2, y2), f(x1, y1))
        torch.testing.assert_close(x2, x1)
    assert cf.stats.compiles == 2
    assert "same tensor" in " ".join(cf.stats.recompile_reasons) or "different tensors" in " ".join(
        cf.stats.recompile_reasons)


def test_overlapping_views_of_a_mutated_input_run_eagerly():
    def f(x, y):
        x.mul_(2)
        return y + 1
    base = torch.arange(6.0)
    cf = ds.compile(f)
    want_base = torch.arange(6.0)
    want = f(want_base[:4], want_base[2:])
    got = cf(base[:4], base[2:])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(base, want_base)
    assert cf.stats.graph_breaks and "share memory" in cf.stats.graph_breaks[0]
    # distinct tensors of the same shapes are then compiled
    check_vs_eager(f, [(torch.ones(4), torch.ones(4)), (torch.ones(4), torch.zeros(4))], dynamic=None)
