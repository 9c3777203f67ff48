"""A trace made for dynamic sizes >= 2 taking size 1 (symbolic/widen.py, runtime/dispatch.widen_for).

The oracle is eager PyTorch: every program runs compiled with `dynamic=True` over size sequences
that go from >= 2 to 1 and back, and must give eager's results (or raise eager's error); whether
the graph was reused for size 1 or traced again is checked separately, on programs where the
answer is known.
"""
import warnings

import pytest
import sympy
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.symbolic import LocalSource, ShapeEnv, SizeSource
from dynashape.symbolic.widen import widened


def _branch(x):
    return x * 2 if x.size(0) != 1 else x - 1


def _batch_norm(x):
    return F.batch_norm(x, None, None, training=True)


PROGRAMS = {  # name: (fn, make inputs of the size n, reuses the graph at 1)
    "pointwise": (lambda x: (x * 2).relu().sum(0), lambda n: (torch.randn(n, 4),), True),
    "matmul": (lambda x, w: torch.tanh(x @ w) + 1, lambda n: (torch.randn(n, 3, 4), torch.randn(4, 6)), True),
    "softmax_dim0": (lambda x: torch.softmax(x, 0) * x.mean(0), lambda n: (torch.randn(n, 4),), True),
    "view": (lambda x: x.view(-1) + x.reshape(x.size(0), 2, 2).sum(-1).repeat_interleave(2, 0).view(-1),
             lambda n: (torch.randn(n, 4),), True),
    "cat": (lambda x: torch.cat([x, x * 2], 0).cumsum(0), lambda n: (torch.randn(n, 3),), True),
    "duck": (lambda x, y: x + y, lambda n: (torch.randn(n, 4), torch.randn(n, 4)), True),
    "broadcast_static_one": (lambda x, y: x * y, lambda n: (torch.randn(n, 4), torch.randn(1, 4)), True),
    "transpose_contiguous": (lambda x: x.t().contiguous().view(-1) * 3, lambda n: (torch.randn(n, 3),), True),
    # the trace decided something that size 1 decides otherwise: traced again
    "branch": (_branch, lambda n: (torch.randn(n, 4),), False),
    "squeeze": (lambda x: x.squeeze(0) + 1, lambda n: (torch.randn(n, 4),), False),
    "slice": (lambda x: x[1:] * 2, lambda n: (torch.randn(n, 4),), None),
    "topk": (lambda x: x.topk(2, dim=0).values, lambda n: (torch.randn(n, 4),), None),  # raises at run time
    "batch_norm": (_batch_norm, lambda n: (torch.randn(n, 3),), None),  # F.batch_norm raises at run time
    "std": (lambda x: x.std(0), lambda n: (torch.randn(n, 4),), None),
}


def _run(fn, args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args), None
    except Exception as e:  # noqa: BLE001 - eager's error is the expected result
        return None, type(e)


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_size_one_after_a_dynamic_trace_gives_eagers_results(name, backend):
    fn, make, reuses = PROGRAMS[name]
    cf = ds.compile(fn, dynamic=True, backend=backend)
    torch.manual_seed(0)
    for n in (5, 1, 3, 1, 2):
        args = make(n)
        want, want_err = _run(fn, args)
        got, got_err = _run(cf, args)
        assert got_err is want_err, (name, n, got_err, want_err)
        if want_err is None:
            torch.testing.assert_close(got, want, equal_nan=True, msg=f"{name} at size {n}")
    if reuses is True:
        assert (cf.stats.compiles, cf.stats.widened) == (1, 1), cf.stats
    elif reuses is False:
        assert cf.stats.widened == 0 and cf.stats.compiles == 2, cf.stats


def test_the_reused_graph_guards_start_at_one_and_say_so_at_zero():
    f = lambda x: x.relu() + 1  # noqa: E731
    cf = ds.compile(f, dynamic=True, backend="eager")
    cf(torch.randn(4, 3))
    assert "2 <= L['x'].size()[0]" in cf.entries[0].guards
    x = torch.randn(1, 3)
    torch.testing.assert_close(cf(x), f(x))
    assert "1 <= L['x'].size()[0]" in cf.entries[0].guards and len(cf.entries) == 1
    x = torch.randn(0, 3)
    torch.testing.assert_close(cf(x), f(x))
    assert len(cf.entries) == 2
    assert "size 0 is specialized" in cf.stats.recompile_reasons[0]


def test_torchs_behaviour_on_request():
    with ds.config.patch(reuse_graph_for_size_one=False):
        cf = ds.compile(lambda x: x.relu() + 1, dynamic=True, backend="eager")
        cf(torch.randn(4, 3))
        cf(torch.randn(1, 3))
    assert (cf.stats.compiles, cf.stats.widened) == (2, 0)


def test_an_entry_whose_other_guards_fail_is_not_widened():
    cf = ds.compile(lambda x, y: x + y, dynamic=True, backend="eager")
    cf(torch.randn(5, 4), torch.randn(5, 4))  # one symbol for both (duck sizing)
    x, y = torch.randn(1, 4), torch.randn(3, 4)  # x is 1, but the sizes differ: eager broadcasts
    torch.testing.assert_close(cf(x, y), x + y)
    assert cf.stats.widened == 0 and cf.stats.compiles == 2


def _env_with(fn):
    env = ShapeEnv()
    s = env.symint(7, SizeSource(LocalSource("x"), 0))
    fn(env, s)
    return env, s.node.expr


def test_widened_decides_every_static_decision_again():
    env, s0 = _env_with(lambda env, s: env.static_value(sympy.Ne(s.node.expr, 1)))
    assert env.decisions and widened(env, s0, 1)[0] is None  # s0 != 1 was known only from s0 >= 2
    env, s0 = _env_with(lambda env, s: env.static_value(s.node.expr >= 1))
    assert widened(env, s0, 1)[0] is not None
    env, s0 = _env_with(lambda env, s: bool(s > 3))  # a guard: s0 > 3 rules 1 out (the guards say so)
    new, _ = widened(env, s0, 1)
    assert new is not None and new.var_to_range[s0].lo == 4


def test_facts_that_are_not_guards_keep_the_recompile():
    env, s0 = _env_with(lambda env, s: env.bound(s.node.expr))
    assert widened(env, s0, 1)[0] is None
    env, s0 = _env_with(lambda env, s: env.expect_true(s.node.expr < 100))
    assert widened(env, s0, 1)[0] is None


def test_marked_dims_widen_unless_the_user_declared_them_from_two_up():
    f = lambda x: x.relu() + 1  # noqa: E731
    for kw, reused in (({}, True), ({"min": 2}, False)):
        cf = ds.compile(f, backend="eager")
        x = torch.randn(4, 3)
        ds.mark_dynamic(x, 0, **kw)
        cf(x)
        torch.testing.assert_close(cf(torch.ones(1, 3)), f(torch.ones(1, 3)))
        assert cf.stats.widened == int(reused), (kw, cf.stats)


def test_the_recompile_reason_says_what_the_trace_decided():
    cf = ds.compile(_branch, dynamic=True, backend="eager")
    cf(torch.randn(5, 4))
    x = torch.randn(1, 4)
    torch.testing.assert_close(cf(x), _branch(x))
    (reason,) = cf.stats.recompile_reasons
    assert "the graph cannot take 1: its trace took x.size(0) != 1 to be True" in reason, reason
    assert "compiled without 0/1 specialization" in reason  # and the size is size-oblivious from now on
