"""The real-value run of speculation (tracing/speculate.py) on graphs whose nodes take symbolic
arguments (`x.view(x.size(0), -1)`, `x / x.size(1)`, `x.new_full((x.size(0),), ...)`) before a
branch on data. Evaluating such an argument once ran the graph on from the middle of a node, which
reached the nodes that read it before it had a value: `KeyError: %view` (`%div`, `%mul`,
`%new_full`), and the call ran eagerly ("could not trace"). Found by the fuzzer (findings.md, T5).
Oracle: eager, over shapes with sizes 0 and 1, under automatic and explicit dynamic shapes."""
import pytest
import torch

import dynashape as ds


def view_then_int_of_sum(x):
    v0 = x.view(x.size(0), -1)
    return v0 * int((v0 > 0).sum())


def division_by_a_size_then_int_of_sum(x):
    v0 = x / (x.size(1) + 1)
    return v0 * int((v0 > 0).sum())


def product_with_a_size_then_branch(x):
    v0 = x * x.size(0)
    if (v0 > 0).any():
        return v0 + 1
    return v0 - 1


def new_full_then_int_of_sum(x):
    v0 = x.new_full((x.size(0), x.size(1) + 1), 0.5)
    v1 = torch.cat([x, v0], 1)
    return v1 * int((v1 > 0).sum())


def new_full_then_branch_on_item(x):
    v0 = x.new_full((x.size(1),), -1.0) + x.sum(0)
    if v0.sum().item() > 0:
        return v0 * 2
    return v0


def reshape_twice_then_branch(x):
    v0 = x.reshape(x.size(1), x.size(0))
    v1 = v0.reshape(-1, x.size(0) * x.size(1) + 1 - 1) if x.numel() else v0
    if v1.sum() > 0:
        return v1.exp()
    return v1.abs()


PROGRAMS = [view_then_int_of_sum, division_by_a_size_then_int_of_sum, product_with_a_size_then_branch,
            new_full_then_int_of_sum, new_full_then_branch_on_item,
            reshape_twice_then_branch]
SHAPES = [(0, 0), (3, 1), (1, 1), (2, 5), (0, 3), (4, 2), (1, 4)]


def _eager(fn, x):
    try:
        return fn(x), None
    except Exception as e:  # noqa: BLE001  (view of an empty tensor with -1 is eager's own error)
        return None, type(e)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_nodes_with_symbolic_arguments_before_a_data_branch_compile_and_match_eager(fn, dynamic):
    cf = ds.compile(fn, dynamic=dynamic)
    torch.manual_seed(0)
    for shape in SHAPES:
        for sign in (1.0, -1.0):  # both sides of the branch
            x = torch.randn(shape).abs() * sign
            want, err = _eager(fn, x)
            if err is not None:
                with pytest.raises(err):
                    cf(x)
                continue
            torch.testing.assert_close(cf(x), want, equal_nan=True)
    assert cf.stats.compiles >= 1 and not cf.stats.fallbacks, cf.stats
    # an int of data takes many values: past config.speculation_paths the rest run eagerly, by design
    assert not any("could not trace" in r for r in cf.stats.graph_breaks), cf.stats.graph_breaks


def test_the_fuzzer_program_compiles_on_its_second_call_after_an_empty_first():
    cf = ds.compile(view_then_int_of_sum)
    with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements"):
        cf(torch.randn(0, 0))
    x = torch.randn(3, 1)
    torch.testing.assert_close(cf(x), view_then_int_of_sum(x))
    assert cf.stats.compiles >= 1 and not cf.stats.graph_breaks and not cf.stats.fallbacks


def test_a_node_that_raised_in_the_real_value_run_raises_again_rather_than_a_key_error():
    from dynashape.ir.graph import Graph
    from dynashape.tracing.speculate import RealValues

    def boom(t):
        raise ValueError("boom")
    g = Graph()
    x = g.input(None, None, "x", value=torch.ones(2))
    y = g.call(boom, (x,), {}, None)
    real = RealValues(g, {})
    for _ in range(2):
        with pytest.raises(ValueError, match="boom"):
            real.value(y)
