"""Tests for dynashape/tracing/meta/reductions.py: compiled (dynamic=True) vs eager over many shapes.

Each case list is drawn so that one compile must serve every shape: a rule that
specialized a size, or computed a wrong symbolic shape, fails the oracle.
"""
import random
import zlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynashape.tracing.meta import get_rule
from tests.oracle import check_vs_eager, no_equality_guards, tensors, with_shapes

T = torch.Tensor


def random_shapes(ndim, count=4, seed=0):
    """`count` tensors' shapes of `ndim` dims, sizes in [2, 9], distinct within a shape (no duck sizing)."""
    rng = random.Random(seed)
    return [tuple(rng.sample(range(2, 10), ndim)) for _ in range(count)]


def cases(ndim=3, count=4, seed=0):
    return [(torch.randn(*s),) for s in random_shapes(ndim, count, seed)]


REDUCTIONS = {
    "sum over one dim": lambda x: x.sum(1),
    "sum over a tuple with keepdim": lambda x: torch.sum(x, (0, -1), keepdim=True),
    "sum over a list with a dtype": lambda x: x.sum([2, 0], dtype=torch.float64),
    "sum of everything": lambda x: torch.sum(x),
    "sum over an empty list reduces everything": lambda x: x.sum([]),
    "mean over a negative dim": lambda x: x.mean(-2),
    "mean with keepdim by keyword": lambda x: torch.mean(x, dim=1, keepdim=True),
    "nansum": lambda x: x.nansum(0),
    "nanmean with keepdim": lambda x: torch.nanmean(x, (1, 2), True),
    "amax over a tuple": lambda x: x.amax((0, 2)),
    "amin with keepdim": lambda x: torch.amin(x, -1, keepdim=True),
    "prod over a dim": lambda x: x.prod(1),
    "prod of everything": lambda x: torch.prod(x, dtype=torch.float64),
    "argmax of everything": lambda x: x.argmax(),
    "argmax of everything with keepdim": lambda x: torch.argmax(x, keepdim=True),
    "argmin over a dim with keepdim": lambda x: x.argmin(2, True),
    "logsumexp over a tuple": lambda x: torch.logsumexp(x, (0, 1)),
    "special logsumexp": lambda x: torch.special.logsumexp(x, -1, keepdim=True),
    "all over a dim": lambda x: (x > 0).all(1),
    "any of everything": lambda x: torch.any(x > 0),
    "all over a tuple with keepdim": lambda x: torch.all(x > 0, (0, 2), keepdim=True),
    "count_nonzero over a tuple": lambda x: torch.count_nonzero(x > 0, (0, 1)),
    "count_nonzero of everything": lambda x: (x > 0).count_nonzero(),
    "var with positional unbiased and keepdim": lambda x: x.var(1, True, True),
    "var of everything, unbiased positional": lambda x: torch.var(x, False),
    "var with correction": lambda x: x.var((0, 2), correction=0),
    "std over a dim": lambda x: torch.std(x, -1),
    "std with keepdim": lambda x: x.std(dim=0, keepdim=True),
    "var_mean over a tuple": lambda x: torch.var_mean(x, (0, 2), correction=0),
    "std_mean with keepdim": lambda x: torch.std_mean(x, 1, keepdim=True),
    "aminmax over a dim": lambda x: torch.aminmax(x, dim=0),
    "aminmax of everything": lambda x: x.aminmax(),
    "quantile with a vector q": lambda x: torch.quantile(x, torch.tensor([0.25, 0.5, 0.9]), dim=1),
    "quantile with a float q and keepdim": lambda x: x.quantile(0.5, dim=-1, keepdim=True),
}

VALUES_INDICES = {
    "max of everything": lambda x: x.max(),
    "max over a dim": lambda x: x.max(1),
    "max with keepdim by keyword": lambda x: torch.max(x, dim=-1, keepdim=True),
    "min over a dim": lambda x: torch.min(x, 0),
    "min of everything": lambda x: torch.min(x),
    "median of everything": lambda x: x.median(),
    "median over a dim": lambda x: torch.median(x, 1, keepdim=True),
    "nanmedian over a dim": lambda x: x.nanmedian(-1),
    "mode over the last dim": lambda x: x.mode(),
    "mode over a dim with keepdim": lambda x: torch.mode(x, 0, True),
    "kthvalue": lambda x: x.kthvalue(2, 1),
    "kthvalue with keepdim": lambda x: torch.kthvalue(x, 1, dim=0, keepdim=True),
}

NORMS = {
    "Tensor.norm over a dim": lambda x: x.norm(dim=1),
    "torch.norm of everything": lambda x: torch.norm(x),
    "torch.norm p=1 over a tuple with keepdim": lambda x: torch.norm(x, 1, (0, 1), True),
    "torch.norm fro over two dims": lambda x: torch.norm(x, "fro", dim=(1, 2)),
    "linalg.vector_norm positional": lambda x: torch.linalg.vector_norm(x, 2, -1),
    "linalg.vector_norm inf with keepdim": lambda x: torch.linalg.vector_norm(x, float("inf"), (0, 2), True),
}

SAME_SHAPE = {
    "cumsum": lambda x: x.cumsum(1),
    "cumsum with a dtype": lambda x: torch.cumsum(x, -1, dtype=torch.float64),
    "cumsum in place": lambda x: x.clone().cumsum_(0),
    "cumprod": lambda x: torch.cumprod(x, 0),
    "logcumsumexp": lambda x: x.logcumsumexp(2),
    "cummax": lambda x: torch.cummax(x, 1),
    "cummin": lambda x: x.cummin(-1),
    "softmax": lambda x: torch.softmax(x, -1),
    "Tensor.softmax": lambda x: x.softmax(1),
    "F.softmax with a dtype": lambda x: F.softmax(x, dim=0, dtype=torch.float64),
    "F.log_softmax": lambda x: F.log_softmax(x, 1),
    "F.softmin": lambda x: F.softmin(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, 2),
    "Tensor.log_softmax": lambda x: x.log_softmax(-1),
    "torch._softmax": lambda x: torch._softmax(x, 1, False),
    "special.softmax": lambda x: torch.special.softmax(x, 0),
    "special.log_softmax": lambda x: torch.special.log_softmax(x, 0),
    "sort": lambda x: x.sort(),
    "sort descending over a dim": lambda x: torch.sort(x, dim=0, descending=True),
    "stable sort": lambda x: torch.sort(x, stable=True, dim=1),
    "argsort": lambda x: x.argsort(1),
    "argsort descending": lambda x: torch.argsort(x, dim=-1, descending=True),
    "msort": lambda x: torch.msort(x),
}

DIFFS = {  # the differencing dim shrinks by n (never below 0); prepend/append join it first
    "diff": lambda x: torch.diff(x),
    "Tensor.diff twice over a dim": lambda x: x.diff(2, 0),
    "diff with prepend": lambda x: torch.diff(x, dim=-1, prepend=x[..., :1] - 1),
    "diff with prepend and append": lambda x: torch.diff(x, 3, 1, x[:, :2], x),
}

ALL = {**REDUCTIONS, **VALUES_INDICES, **NORMS, **SAME_SHAPE, **DIFFS}


@pytest.mark.parametrize("name", list(ALL))
def test_rule_matches_eager_and_one_compile_serves_every_shape(name):
    cf = check_vs_eager(with_shapes(ALL[name]), cases(seed=zlib.crc32(name.encode())), compiles=1)
    assert no_equality_guards(cf) == []


@pytest.mark.parametrize("name", ["sum over one dim", "max over a dim", "torch.norm of everything", "sort"])
def test_rules_also_serve_two_and_four_dim_inputs(name):
    for ndim in (2, 4):
        check_vs_eager(with_shapes(ALL[name]), cases(ndim, count=3), compiles=1)


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPS = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin, "var": torch.var,
       "std": torch.std, "logsumexp": torch.logsumexp, "nansum": torch.nansum}


@SETTINGS
@given(op=st.sampled_from(sorted(OPS)), ndim=st.integers(1, 4), data=st.data(), keepdim=st.booleans(),
       seed=st.integers(0, 10**6))
def test_reducing_any_dims_with_any_keepdim_matches_eager(op, ndim, data, keepdim, seed):
    dims = data.draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim,
                              unique_by=lambda d: d % ndim))
    dim = dims[0] if len(dims) == 1 and data.draw(st.booleans()) else tuple(dims)
    fn = with_shapes(lambda x: OPS[op](x, dim, keepdim=keepdim))
    check_vs_eager(fn, cases(ndim, count=3, seed=seed), compiles=1)


def test_reduced_shape_is_printed_symbolically():
    cf = check_vs_eager(with_shapes(lambda x: x.sum(1)), cases(count=2), compiles=1)
    assert "f32[s0, s2] = torch.Tensor.sum(%x, 1)" in str(cf.entries[0].graph)


def test_binary_max_and_min_broadcast_like_maximum():
    rng = random.Random(1)
    shapes = [tuple(rng.sample(range(2, 10), 2)) for _ in range(4)]
    args = [(torch.randn(a, b), torch.randn(b)) for a, b in shapes]
    fn = with_shapes(lambda x, y: (torch.max(x, y), x.min(y), torch.max(x, other=y)))
    check_vs_eager(fn, args, compiles=1)


def test_topk_with_a_constant_k_replaces_the_dim_by_k():
    check_vs_eager(with_shapes(lambda x: x.topk(2, dim=1)), cases(), compiles=1)
    check_vs_eager(with_shapes(lambda x: torch.topk(x, 1, 0, largest=False)), cases(seed=3), compiles=1)


def test_topk_with_a_symbolic_k_keeps_k_symbolic():
    cf = check_vs_eager(with_shapes(lambda x: torch.topk(x, x.size(2) - 1, 2)), cases(seed=5), compiles=1)
    assert "s2 - 1" in str(cf.entries[0].graph)
    assert no_equality_guards(cf) == []


def test_topk_with_an_int_argument_k_compiles_once():
    args = [(torch.randn(9, 8), k) for k in (2, 3, 5)]
    check_vs_eager(with_shapes(lambda x, k: x.topk(k)), args, compiles=1)


@pytest.mark.filterwarnings("ignore:Implicit dimension choice")
def test_legacy_softmax_without_dim_keeps_the_shape():
    check_vs_eager(with_shapes(lambda x: (F.softmax(x), F.log_softmax(x))), cases(), compiles=1)


def test_sum_to_size_takes_the_given_symbolic_size():
    check_vs_eager(with_shapes(lambda x: x.sum_to_size(x.size(0), 1, x.size(2))), cases(), compiles=1)


def test_reductions_of_a_zero_dim_tensor_stay_zero_dim():
    args = [(torch.tensor(v),) for v in (1.0, 2.0)]
    fn = with_shapes(lambda x: (x.sum(0), x.max(0, True), x.amax(-1), x.cumsum(0), x.topk(1)))
    check_vs_eager(fn, args)


def test_every_alias_has_a_rule():
    aliases = [torch.sum, T.sum, torch.mean, T.mean, torch.nansum, torch.nanmean, torch.amax, T.amin,
               torch.max, T.max, torch.min, T.min, torch.argmax, T.argmin, torch.prod, torch.var, T.std,
               torch.var_mean, torch.std_mean, torch.norm, T.norm, torch.linalg.vector_norm, torch.logsumexp,
               torch.special.logsumexp, torch.all, T.any, torch.count_nonzero, torch.median, torch.mode,
               torch.kthvalue, torch.cumsum, T.cumsum_, torch.cumprod, T.cumprod_, torch.cummax, T.cummin,
               torch.logcumsumexp, torch.softmax, T.softmax, F.softmax, torch._softmax, torch.log_softmax,
               T.log_softmax, F.log_softmax, torch._log_softmax, torch.special.softmax,
               torch.special.log_softmax, torch.topk, T.topk, torch.sort, T.sort, torch.argsort, T.argsort, torch.diff, T.diff]
    assert [a for a in aliases if get_rule(a) is None] == []
