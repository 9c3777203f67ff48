"""Tensor inputs the trace saw distinct stay distinct: a function may compare them (`x is y`,
`{x, y}`, `id(x)`, a dict keyed by them), so the entry compiled for f(a, b) is not reused for
f(a, a) even when nothing is written in place."""
import pytest
import torch

import dynashape as ds


def f_is(x, y):
    if x is y:
        return x * 3
    return x + y


def f_set(x, y):
    return x * len({id(x), id(y)})


def f_is_not_in_list(x, ys):
    return sum(t * i for i, t in enumerate(ys) if t is not x)


@pytest.mark.parametrize("fn", [f_is, f_set])
@pytest.mark.parametrize("dynamic", [None, True, False])
def test_an_entry_for_distinct_tensors_is_not_reused_for_one_tensor_twice(fn, dynamic):
    cf = ds.compile(fn, dynamic=dynamic, backend="eager")
    for n, same in [(3, False), (3, False), (3, True), (5, True), (5, False)]:
        a, b = torch.randn(n, 4), torch.randn(n, 4)
        args = (a, a) if same else (a, b)
        torch.testing.assert_close(cf(*args), fn(*args))


def test_a_list_item_that_is_another_argument_is_seen():
    cf = ds.compile(f_is_not_in_list, backend="eager")
    for alias in (False, False, True):
        x, ys = torch.randn(3, 4), [torch.randn(3, 4), torch.randn(3, 4)]
        if alias:
            ys[1] = x
        torch.testing.assert_close(cf(x, ys), f_is_not_in_list(x, ys))


def test_the_recompile_says_the_tensors_were_distinct():
    cf = ds.compile(f_is, backend="eager")
    a, b = torch.randn(3), torch.randn(3)
    cf(a, b)
    cf(a, a)
    assert cf.stats.compiles == 2
    assert "different tensors" in cf.stats.recompile_reasons[0]
