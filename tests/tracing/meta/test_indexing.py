"""Tests for dynashape/tracing/meta/indexing.py: compiled (dynamic=True) vs eager over many shapes.

One compile must serve every shape of a case list (so a slice length that was
specialized, or an advanced-indexing shape put in the wrong place, fails the
oracle); where a rule guards, the recompile happens and results still match.
"""
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynashape as ds
from dynashape.tracing.meta import get_rule
from tests.oracle import check_vs_eager

T = torch.Tensor

# TODO(core): remove once tracer._meta_leaf maps slices (x[:n] with a symbolic n)


def random_shapes(ndim, count=3, seed=0, lo=3, hi=9):
    """`count` shapes of `ndim` dims, sizes in [lo, hi], distinct within a shape (no duck sizing)."""
    rng = random.Random(seed)
    return [tuple(rng.sample(range(lo, hi + 1), ndim)) for _ in range(count)]


def cases(ndim=3, count=3, seed=0):
    return [(torch.randn(*s),) for s in random_shapes(ndim, count, seed)]


def with_index(ndim, index_shapes, seed=0, count=3):
    """(x, idx...) cases: index tensors of varying shapes, values valid for every x."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k, s in enumerate(random_shapes(ndim, count, seed)):
        idx = [torch.randint(0, 3, shp(k), generator=g) for shp in index_shapes]
        out.append((torch.randn(*s), *idx))
    return out


def extra_guards(cf):
    """Shape guards other than the inputs' tensor checks and the `2 <= size` range guards."""
    return [g for g in cf.entries[0].guards if not g.startswith(("check_tensor", "2 <= ", "type("))
            and not g.startswith("torch.")]


def vec(k):  # index shapes that vary with the case number, none equal to a size
    return (k + 11,)


def setitem(fn):
    def run(x, *args):
        fn(x, *args)
        return x
    return run


def _set_slice(x):
    x[1:, ::2] = 0


def _set_through_index(x, i, v):
    x[:, i] = v


def _set_mask(x):
    x[x > 0] = 0


def _set_leading_ones(x, v):
    x[0] = v[None, None]


ONE_COMPILE = {
    # slices
    "x[1:] drops the first row": (lambda x: x[1:], cases()),
    "x[:-1] drops the last row": (lambda x: x[:-1], cases()),
    "x[::2] keeps every other row": (lambda x: x[::2], cases()),
    "a slice with both bounds and a step": (lambda x: x[1:-1:3], cases()),
    "slices on several dims": (lambda x: x[:, 1:, ::2], cases()),
    "x[-3:] keeps the last three": (lambda x: x[-3:], cases()),
    "x[:3] keeps the first three": (lambda x: x[:3], cases()),
    "a bound past the end clamps": (lambda x: (x[:100], x[-100:], x[2:100:2]), cases()),
    "Ellipsis fills the middle": (lambda x: (x[..., 0], x[...], x[1, ..., 1:], x[..., None]), cases()),
    "None inserts dims": (lambda x: x[None, :, None], cases()),
    "an empty tuple returns the whole tensor": (lambda x: x[()], cases()),
    # ints and bools
    "ints select": (lambda x: (x[0], x[-1, :, 1]), cases()),
    "an int argument selects": (lambda x, i: x[i], [(torch.randn(*s), k) for s, k in (((4, 3), 2), ((6, 5), -4))]),
    "True inserts a dim and False an empty one": (lambda x: (x[True], x[False], x[None, True, 1:]), cases()),
    # advanced indexing
    "an index tensor replaces the dim": (lambda x, i: x[i], with_index(3, [vec])),
    "index tensors broadcast together": (lambda x, i, j: x[i, j], with_index(3, [lambda k: (k + 11, 1), vec])),
    "an index tensor on an inner dim stays in place": (lambda x, i: x[:, i], with_index(3, [vec])),
    "adjacent index tensors stay in place": (lambda x, i, j: x[:, i, j], with_index(3, [vec, vec])),
    "non-adjacent index tensors go to the front": (lambda x, i, j: x[i, :, j], with_index(3, [vec, vec])),
    "an int before an index tensor selects first": (lambda x, i: x[0, :, i], with_index(3, [vec])),
    "a 2-d index tensor": (lambda x, i: x[1:, i], with_index(3, [lambda k: (2, k + 11)])),
    "an index tensor with None and Ellipsis": (lambda x, i: x[i, None, ..., 0], with_index(3, [vec])),
    "True with an index tensor": (lambda x, i: x[True, i], with_index(3, [vec])),
    "a list of ints indexes like a tensor": (lambda x: (x[[0, 2]], x[:, [1, 1, 0]]), cases()),
    "a tuple of lists": (lambda x: x[[0, 1], [1, 0]], cases()),
    # x[...] = v
    "setting a slice": (setitem(_set_slice), cases()),
    "setting through an index tensor broadcasts the value": (
        setitem(_set_through_index),
        [(torch.randn(n, 5), torch.tensor([0, 2]), torch.randn(n, 1)) for n in (3, 6, 8)]),
    "setting through a boolean mask": (setitem(_set_mask), cases()),
    "a value with extra leading ones": (setitem(_set_leading_ones),
                                        [(torch.randn(n, 4), torch.randn(4)) for n in (3, 6)]),
    # gather / scatter / index_*
    "index_select": (lambda x, i: x.index_select(1, i), with_index(3, [vec])),
    "torch.index_select with a 0-d index": (lambda x, i: torch.index_select(x, 0, i[0]), with_index(2, [vec])),
    "gather takes the index's shape": (lambda x, i: torch.gather(x, 1, i),
                                       [(torch.randn(n, 4), torch.randint(0, 4, (n, k))) for n, k in ((3, 5), (6, 2))]),
    "scatter keeps self's shape": (
        lambda x, i: (x.scatter(1, i, torch.ones(i.shape)), torch.scatter(x, 1, i, 2.0),
                      x.scatter_add(1, i, torch.ones(i.shape)), x.scatter_reduce(1, i, torch.ones(i.shape), "amax"),
                      x.clone().scatter_(1, i, 3.0), x.clone().scatter_add_(1, i, torch.ones(i.shape))),
        [(torch.randn(n, 6), torch.randint(0, 6, (n, k))) for n, k in ((3, 5), (7, 2))]),
    "index_add, index_copy and index_fill keep self's shape": (
        lambda x, i: (x.index_add(0, i, torch.ones(i.shape[0], x.shape[1])), torch.index_fill(x, 1, i, -1.0),
                      x.index_copy(0, i[:1], x[:1]), x.clone().index_add_(0, i, torch.ones(i.shape[0], x.shape[1])),
                      x.clone().index_fill_(1, i, 2.0)),
        with_index(2, [vec])),
    "masked_scatter broadcasts self and mask": (
        lambda x, m: (x.masked_scatter(m, torch.arange(60.0)), x.clone().masked_scatter_(m, torch.arange(60.0))),
        [(torch.randn(n, 4), torch.rand(1, 4) > 0.5) for n in (3, 6)]),
    "take_along_dim with and without a dim": (
        lambda x, i: (torch.take_along_dim(x, i, 1), x.take_along_dim(i)),
        [(torch.randn(n, 4), torch.randint(0, 4, (1, k))) for n, k in ((3, 5), (6, 2))]),
    "take and put_": (lambda x, i: (torch.take(x, i), x.clone().put_(i, torch.ones(i.shape))),
                      with_index(2, [vec])),
    "index_put": (lambda x, i: (x.index_put((i,), torch.tensor(1.0)), x.clone().index_put_((i, i), torch.ones(1))),
                  with_index(2, [vec])),
}


@pytest.mark.parametrize("name", list(ONE_COMPILE))
def test_indexing_op_serves_every_shape_with_one_compile(name):
    fn, cs = ONE_COMPILE[name]
    check_vs_eager(fn, cs, compiles=1)


def test_common_slices_add_no_guards():
    cf = check_vs_eager(lambda x: (x[1:], x[:-1], x[::2], x[1:-1], x[:, 1::3]), cases(), compiles=1)
    assert extra_guards(cf) == []


def test_advanced_indexing_adds_no_guards():
    cf = check_vs_eager(lambda x, i: (x[i], x[:, i], x[0, :, i], x[i, None, 1:]), with_index(3, [vec]), compiles=1)
    assert extra_guards(cf) == [], extra_guards(cf)


def test_a_negative_start_recompiles_when_the_dim_is_too_short():
    cf = check_vs_eager(lambda x: x[-3:] * 2, [(torch.randn(n),) for n in (5, 7, 2, 4)], compiles=2)
    assert any("3 <= L['x'].size()[0]" in g for g in cf.entries[1].guards)


def test_a_stop_past_a_static_bound_recompiles():
    check_vs_eager(lambda x: x[:4], [(torch.randn(n),) for n in (5, 9, 3, 2)], compiles=2)


def test_a_boolean_mask_is_captured_with_a_data_dependent_size():
    cf = ds.compile(lambda x: x[x > 0] * 2, dynamic=True, fullgraph=True)
    for n in (6, 9):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cf(x), x[x > 0] * 2)
    assert cf.stats.compiles == 1 and not cf.stats.graph_breaks
    with ds.config.patch(capture_dynamic_output_shape_ops=False):
        cf = ds.compile(lambda x: x[x > 0] * 2, dynamic=True)
        x = torch.randn(6, 3)
        torch.testing.assert_close(cf(x), x[x > 0] * 2)
        assert cf.stats.graph_breaks


def test_setting_a_value_that_does_not_broadcast_raises_like_eager():
    cf = ds.compile(lambda x, v: x.__setitem__(slice(1, None), v), dynamic=True)
    cf(torch.randn(4, 3), torch.randn(3))
    with pytest.raises(RuntimeError):
        cf(torch.randn(4, 3), torch.randn(2))


def test_a_slice_by_an_int_argument_serves_every_value():
    cf = check_vs_eager(lambda x, n: (x[:n], x[n:], x[-n:]),
                        [(torch.randn(*s), k) for s, k in (((6, 4), 3), ((7, 5), 2), ((9, 5), 9))], compiles=1)
    assert "L['x'].size()[0] - L['n'] >= 0" in cf.entries[0].guards


def test_a_slice_by_an_int_argument_past_the_end_recompiles():
    check_vs_eager(lambda x, n: x[:n], [(torch.randn(6), 3), (torch.randn(6), 5), (torch.randn(4), 7)], compiles=2)


def test_a_slice_by_a_size_expression():
    cf = check_vs_eager(lambda x, y: (x[: x.shape[0] // 2], x[y.shape[0]:], x[:, : y.shape[0]]),
                        [(torch.randn(n, n + 3), torch.randn(n - 1)) for n in (4, 6, 9)], compiles=1)
    assert all("==" not in g for g in extra_guards(cf))


def test_setting_a_slice_by_an_int_argument():
    check_vs_eager(setitem(lambda x, n: x.__setitem__(slice(None, n), 1.0)),
                   [(torch.randn(6, 2), 3), (torch.randn(8, 3), 5)], compiles=1)


bound = st.one_of(st.none(), st.integers(-12, 12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bound, bound, st.one_of(st.none(), st.integers(1, 4)), st.lists(st.integers(2, 12), min_size=3, max_size=3))
def test_static_slices_clamp_like_python(start, stop, step, sizes):
    """Any slice with static bounds, over three dynamic sizes: guards may recompile, results must match."""
    cf = check_vs_eager(lambda x: x[start:stop:step] + 1, [(torch.randn(n),) for n in sizes])
    assert cf.stats.compiles <= len(set(sizes))


ALIASES = [T.__getitem__, T.__setitem__, torch.index_select, T.index_select, torch.gather, T.gather,
           torch.take, T.take, torch.take_along_dim, T.take_along_dim, torch.scatter, T.scatter, T.scatter_,
           torch.scatter_add, T.scatter_add, T.scatter_add_, torch.scatter_reduce, T.scatter_reduce,
           T.scatter_reduce_, torch.index_add, T.index_add, T.index_add_, torch.index_copy, T.index_copy,
           T.index_copy_, torch.index_fill, T.index_fill, T.index_fill_, torch.index_put, T.index_put,
           T.index_put_, torch.masked_scatter, T.masked_scatter, T.masked_scatter_, T.put_]


def test_every_alias_has_a_rule():
    missing = [f for f in ALIASES if get_rule(f) is None]
    assert not missing, missing


def test_slice_bounds_from_data_of_either_sign_follow_python():
    def f(y):
        v = torch.where(y > 0)[0].float()
        return v[v.size(0) // 1: v.size(0) - 1], v[: v.size(0) - 2], v[v.size(0) - 3:]
    cases = [(torch.tensor(t),) for t in ([1., -1, 2, 3], [-1., -1, -1, -1], [1., -1, -1, -1], [1., 1, 1, 1])]
    check_vs_eager(f, cases, dynamic=True)

