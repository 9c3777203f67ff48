"""Stances against torch.compiler.set_stance on the same calls (issue 22): fail_on_recompile raises
exactly where torch.compile would compile (we may compile less: sizes 0 and 1 share the dynamic
graph), eager_on_recompile runs what compiled entries accept and eager otherwise, and set_stance works
as a call, a context manager and a decorator."""
import pytest
import torch

import dynashape as ds
from tests.runtime.test_policy import Repeats


def _mul(x):
    return x * 2


def _scaled(x, s):
    return x * s


def _grad(x):
    return x * x


def _no_grad(cf, x):
    with torch.no_grad():
        return cf(x)


R = torch.randn
# name: (fn, warm-up calls, the call made under the stance); a call is (cf, mark) -> result, where
# mark(t, dim) is ds.mark_dynamic or torch._dynamo.mark_dynamic
SCENARIOS = {
    "a new size of a dim that is already dynamic": (
        _mul, [lambda cf, mark: cf(R(3)), lambda cf, mark: cf(R(4))], lambda cf, mark: cf(R(9))),
    "a new size of a mark_dynamic'd input": (
        _mul, [lambda cf, mark: cf(_marked(R(3), mark))], lambda cf, mark: cf(_marked(R(6), mark))),
    "an unmarked new size after a marked compile": (
        _mul, [lambda cf, mark: cf(_marked(R(3), mark))], lambda cf, mark: cf(R(8))),
    "a float argument that is already a symbol": (
        _scaled, [lambda cf, mark: cf(R(3), 0.5), lambda cf, mark: cf(R(3), 1.5)], lambda cf, mark: cf(R(3), 2.5)),
    "an int argument that is already dynamic": (
        _scaled, [lambda cf, mark: cf(R(3), 2), lambda cf, mark: cf(R(3), 3)], lambda cf, mark: cf(R(3), 7)),
    "no_grad after both grad modes compiled": (
        _grad, [lambda cf, mark: cf(R(3, requires_grad=True)), lambda cf, mark: _no_grad(cf, R(3, requires_grad=True))],
        lambda cf, mark: (cf(R(3, requires_grad=True)), _no_grad(cf, R(3, requires_grad=True)))),
    "a new size of a static dim": (_mul, [lambda cf, mark: cf(R(3))], lambda cf, mark: cf(R(4))),
    "another rank": (_mul, [lambda cf, mark: cf(R(3)), lambda cf, mark: cf(R(4))], lambda cf, mark: cf(R(3, 3))),
    "another dtype": (_mul, [lambda cf, mark: cf(R(3))], lambda cf, mark: cf(R(3, dtype=torch.float64))),
    "no_grad never compiled": (
        _grad, [lambda cf, mark: cf(R(3, requires_grad=True))], lambda cf, mark: _no_grad(cf, R(3, requires_grad=True))),
    "requires_grad changes": (_grad, [lambda cf, mark: cf(R(3))], lambda cf, mark: cf(R(3, requires_grad=True))),
    "a first compile": (_mul, [], lambda cf, mark: cf(R(3))),
}


def _marked(t, mark):
    mark(t, 0)
    return t


def _torch_raises(fn, warm, probe) -> bool:
    import torch._dynamo
    torch._dynamo.reset()
    cf = torch.compile(fn, backend="eager")
    for call in warm:
        call(cf, torch._dynamo.mark_dynamic)
    try:
        with torch.compiler.set_stance("fail_on_recompile"):
            probe(cf, torch._dynamo.mark_dynamic)
        return False
    except RuntimeError as e:
        assert "fail_on_recompile" in str(e)
        return True
    finally:
        torch._dynamo.reset()


def _our_raises(fn, warm, probe):
    cf = ds.compile(fn, backend="eager")
    for call in warm:
        call(cf, ds.mark_dynamic)
    compiles = cf.stats.compiles
    try:
        with ds.set_stance("fail_on_recompile"):
            probe(cf, ds.mark_dynamic)
        assert cf.stats.compiles == compiles
        return None
    except ds.RecompileError as e:
        assert cf.stats.compiles == compiles
        return e


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fail_on_recompile_raises_where_torch_compile_would_compile(name):
    fn, warm, probe = SCENARIOS[name]
    theirs = _torch_raises(fn, warm, probe)
    ours = _our_raises(fn, warm, probe)
    assert (ours is not None) == theirs, (name, ours)
    if ours is not None:  # which function, where, and why
        assert f"{fn.__name__} (test_stance.py:" in str(ours) and "'fail_on_recompile'" in str(ours)
        assert ours.reasons


def test_fail_on_recompile_says_why_once_per_reason():
    e = _our_raises(*SCENARIOS["another rank"])
    assert str(e).count("rank mismatch") == 1 and e.reasons == ["tensor 'x' rank mismatch. expected 1, actual 2"]


def test_a_size_that_becomes_1_needs_no_recompile_where_torch_compile_needs_one():
    # sizes 0 and 1 share the dynamic graph (README: Controlling dynamism): fewer compiles, so no error
    warm, probe = [lambda cf, mark: cf(R(3)), lambda cf, mark: cf(R(4))], lambda cf, mark: cf(R(1))
    assert _torch_raises(_mul, warm, probe)
    assert _our_raises(_mul, warm, probe) is None


def test_module_attribute_change_fails_as_in_torch_compile():
    m = Repeats()
    cm = ds.compile(m, backend="eager")
    cm(R(2, 3))
    m.k = 3
    with ds.set_stance("fail_on_recompile"), pytest.raises(ds.RecompileError, match=r"L\['self'\].k == 2 failed"):
        cm(R(2, 3))


def _graphs(run) -> tuple:
    """(our compiles, torch.compile's graphs) for `run(cf, stance)` on both."""
    import torch._dynamo
    torch._dynamo.reset()
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    ours = ds.compile(_mul, backend="eager")
    run(ours, ds.set_stance)
    run(torch.compile(_mul, backend=counting), torch.compiler.set_stance)
    torch._dynamo.reset()
    return ours.stats.compiles, n[0]


def test_eager_on_recompile_runs_accepted_calls_compiled_and_others_eagerly():
    def run(cf, set_stance):
        with set_stance("eager_on_recompile"):
            torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 2.0))  # a first call: eager
        cf(R(3))
        with set_stance("eager_on_recompile"):
            for n in (3, 5, 7):  # 3 hits the entry; 5 and 7 would recompile: eager
                x = R(n)
                torch.testing.assert_close(cf(x), x * 2)
        cf(R(5))  # the default stance compiles again
    assert _graphs(run) == (2, 2)


def test_eager_on_recompile_does_not_trace_a_new_path():
    def branch(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    cf = ds.compile(branch, backend="eager")
    cf(torch.ones(3))
    with ds.set_stance("eager_on_recompile"):
        torch.testing.assert_close(cf(-torch.ones(3)), branch(-torch.ones(3)))
    assert cf.stats.paths <= 1 and cf.stats.side_exits == 1


def test_set_stance_is_a_call_a_context_manager_and_a_decorator():
    from dynashape.runtime.stance import current
    cf = ds.compile(_mul, backend="eager")
    with ds.set_stance("force_eager"):
        assert current() == "force_eager"
        with ds.set_stance("default"):
            cf(R(3))
        assert current() == "force_eager"
        cf(R(4))
    assert current() == "default" and cf.stats.compiles == 1

    @ds.set_stance("force_eager")
    def run():
        assert current() == "force_eager"
        return cf(R(5, 5))
    assert current() == "default"
    run()
    assert current() == "default" and cf.stats.compiles == 1
    ds.set_stance("fail_on_recompile")
    try:
        assert current() == "fail_on_recompile"
        with pytest.raises(ds.RecompileError):
            cf(R(6, 6))
    finally:
        ds.set_stance("default")


def test_set_stance_inside_a_compiled_function_runs_it_eagerly():
    # the trace would change the stance once, at trace time (torch.compile refuses it there)
    def f(x):
        with ds.set_stance("force_eager"):
            return x * 2
    cf = ds.compile(f, backend="eager")
    torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 2.0))
    assert "ds.set_stance inside a compiled function" in cf.stats.graph_breaks[0]
    with pytest.raises(ds.GraphBreakError, match="set_stance inside a compiled function"):
        ds.compile(f, fullgraph=True)(torch.ones(3))


def test_a_fused_regions_backward_is_not_held_to_the_users_stance():
    # its generated backward is compiled at the first backward: not a compile of the user's
    cf = ds.compile(lambda x: (x * 2).relu().sum(), backend="fused")
    x = R(8, requires_grad=True)
    y = cf(x)
    with ds.set_stance("fail_on_recompile"):
        y.backward()
    torch.testing.assert_close(x.grad, 2.0 * (x > 0))
