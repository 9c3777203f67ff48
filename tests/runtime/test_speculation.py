"""Branches on tensor data compile: the branch a call takes is guarded inside the graph, a side exit
traces the other path, and the entry grows a trace tree. Oracle: eager, over many random data values."""
import io
import random
import re

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds


def differential(fn, make, calls=40, **opts):
    cf = ds.compile(fn, **opts)
    for i in range(calls):
        args = make(i)
        torch.testing.assert_close(cf(*args), fn(*args), equal_nan=True)
    return cf


def any_branch(x):
    if (x > 1).any():
        return x.clamp(max=1)
    return x * 3


def item_branch(x, c):
    if x.sum().item() > c:
        return x + 1
    return x - 1


def nan_check(x, w):
    loss = (x @ w).pow(2).mean()
    if torch.isnan(loss):
        return torch.zeros_like(w)
    return loss * w


def nested(x):
    if x.mean() > 0:
        if x.max() > 1.5:
            return x * 2
        return x * 3
    elif x.min() < -1.5:
        return x - 2
    return x


def early_return(x):
    s = x.sum()
    if s < 0:
        return s
    y = x.exp()
    return y.sum() + s


def halve_until_small(x):
    while (x > 1).any():
        x = x / 2
    return x


def after_nonzero(x):
    idx = x.nonzero()
    if idx.size(0) > 2:
        return idx.float().sum()
    return x.sum()


def mask_any(x, mask):  # the Hugging Face pattern
    if (mask == 0).any():
        x = x.masked_fill(mask == 0, -1e9)
    return x.softmax(-1)


def repeat_item(x, n):
    for _ in range(int(n.item())):
        x = x * 2
    return x


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("fn,make", [
    (any_branch, lambda i: (torch.randn(8),)),
    (item_branch, lambda i: (torch.randn(5), 0.5)),
    (nan_check, lambda i: (torch.randn(3, 4) if i % 3 else torch.full((3, 4), float("nan")), torch.randn(4, 2))),
    (nested, lambda i: (torch.randn(6),)),
    (early_return, lambda i: (torch.randn(5),)),
    (after_nonzero, lambda i: ((torch.rand(6) > 0.6).float(),)),
    (mask_any, lambda i: (torch.randn(2, 5), (torch.rand(2, 5) > 0.2).long())),
    (repeat_item, lambda i: (torch.randn(3), torch.tensor(i % 3))),
], ids=lambda v: getattr(v, "__name__", ""))
def test_data_branches_compile_and_match_eager(fn, make, dynamic):
    cf = differential(fn, make, dynamic=dynamic)
    assert not cf.stats.graph_breaks
    assert cf.stats.paths >= 1
    assert cf.stats.compiles <= cf.stats.paths + 2  # one per path seen (and per shape under dynamic=False)
    assert all(e.fn is not None for e in cf.entries)


def test_varying_shapes_and_data_together():
    def make(i):
        return (torch.randn(random.choice([3, 5, 8, 13])),)
    random.seed(0)
    cf = differential(any_branch, make, calls=60)
    assert not cf.stats.graph_breaks


def test_the_tree_prints_both_branches_and_the_code_branches_literally():
    cf = ds.compile(early_return)
    cf(torch.ones(4))
    cf(-torch.ones(4))
    (e,) = cf.entries
    text = str(e.graph)
    assert "if %lt:" in text and "else:" in text and "[path 0]" in text and "[path 1]" in text
    assert "test_speculation.py" in text
    assert "if bool(lt):" in e.code and "else:" in e.code
    assert cf.stats.paths == 2 and cf.stats.side_exits == 1 and cf.stats.compiles == 2
    line = early_return.__code__.co_firstlineno + 2
    assert cf.stats.recompile_reasons == [
        f"side exit: s < 0 was True at test_speculation.py:{line}; the compiled path assumed False"]


def test_a_path_seen_once_exits_the_other_way_with_a_plain_reason():
    cf = ds.compile(any_branch)
    cf(torch.full((4,), 2.0))
    code = cf.entries[0].code
    assert "raise _SideExit" in code
    report = ds.explain(cf, print_report=False)
    assert "data guards (1 path(s) traced" in report and "(x > 1).any()" in report and "sync on GPU" in report


def test_data_dependent_loop_is_bounded_then_runs_eagerly_with_a_reason():
    cf = ds.compile(halve_until_small)
    with ds.config.patch(speculation_paths=4):
        for k in range(8):
            x = torch.full((3,), 0.75) * 2 ** k
            torch.testing.assert_close(cf(x), halve_until_small(x))
    assert cf.stats.paths == 4
    assert len(cf.stats.graph_breaks) == 1
    assert "data-dependent loop at" in cf.stats.graph_breaks[0] and "4 trip counts seen" in cf.stats.graph_breaks[0]
    x = torch.full((3,), 0.75) * 4  # a seen trip count still runs compiled
    exits = cf.stats.side_exits
    torch.testing.assert_close(cf(x), halve_until_small(x))
    assert cf.stats.side_exits == exits


def test_one_hot_without_num_classes_compiles():
    cf = differential(lambda t: F.one_hot(t), lambda i: (torch.randint(0, 2 + i % 6, (7,)),))
    assert cf.stats.compiles == 1 and not cf.stats.graph_breaks


def test_autograd_follows_the_branch_taken():
    def f(x, w):
        y = x * w
        if y.sum() > 0:
            z = y.exp()
        else:
            z = y.sin()
        return z.sum()

    cf = ds.compile(f)
    torch.manual_seed(0)
    for _ in range(12):
        x, w = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        cf(x, w).backward()
        f(x2, w2).backward()
        torch.testing.assert_close(x.grad, x2.grad)
        torch.testing.assert_close(w.grad, w2.grad)
    assert cf.stats.paths == 2 and not cf.stats.graph_breaks


def test_paths_return_different_structures_and_python_effects():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.last = "none"

        def forward(self, x):
            if x.sum() > 0:
                self.last = "pos"
                return x, x.sum()
            self.last = "neg"
            return x.abs()

    m, ref = Counter(), Counter()
    cm = ds.compile(m)
    for v in (1.0, -1.0, 2.0, -3.0):
        x = torch.full((3,), v)
        out, exp = cm(x), ref(x)
        assert type(out) is type(exp)
        torch.testing.assert_close(out, exp)
        assert m.last == ref.last
    assert cm.stats.paths >= 2 and not cm.stats.graph_breaks  # (`last` is guarded: its changes recompile)


@pytest.mark.parametrize("prefix,why", [
    (lambda x: x.add_(1), "changes an input (or a tensor that may share its memory) in place"),
    (lambda x: print("hi"), "print() runs before it"),
    (lambda x: torch.rand(1), "a random op"),
])
def test_a_branch_after_a_visible_effect_is_a_graph_break_that_says_why(prefix, why, capsys):
    def f(x):
        prefix(x)
        if x.sum() > 0:
            return x + 1
        return x - 1

    cf = ds.compile(f)
    x1, x2 = torch.ones(3), torch.ones(3)
    torch.testing.assert_close(cf(x1), f(x2))
    torch.testing.assert_close(x1, x2)  # the in-place change happened once
    assert len(cf.stats.graph_breaks) == 1 and why in cf.stats.graph_breaks[0]
    assert "cannot be re-run from its start" in cf.stats.graph_breaks[0]
    with pytest.raises(ds.GraphBreakError, match="depends on data"), \
            ds.config.patch(speculate_under_fullgraph=True):
        ds.compile(f, fullgraph=True)(torch.ones(3))


def test_fullgraph_raises_on_a_data_branch_as_torch_compile_and_says_how_to_speculate():
    with pytest.raises(ds.GraphBreakError, match="speculate_under_fullgraph"):
        ds.compile(any_branch, fullgraph=True)(torch.randn(6))


def test_fullgraph_compiles_a_data_branch_when_asked():
    with ds.config.patch(speculate_under_fullgraph=True):
        cf = differential(any_branch, lambda i: (torch.randn(6),), fullgraph=True)
    assert cf.stats.paths == 2 and not cf.stats.graph_breaks


def test_a_condition_on_a_tensor_of_several_values_raises_as_eager():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(RuntimeError, match="ambiguous"):
        ds.compile(f)(torch.ones(3))


def test_export_raises_unless_asked_for_the_recorded_branches():
    def f(x):
        if x.sum().item() > 0:
            return x + 1
        return x - 1

    with pytest.raises(ds.DataDependentError):
        ds.export(f, (torch.ones(3),))
    ep = ds.export(f, (torch.ones(3),), dynamic_shapes=({0: ds.Dim("n")},), record_branches=True)
    torch.testing.assert_close(ep(torch.ones(5)), torch.full((5,), 2.0))
    buf = io.BytesIO()
    ds.save(ep, buf)
    buf.seek(0)
    for prog in (ep, ds.load(buf)):
        with pytest.raises(RuntimeError, match=re.escape("did not record: x.sum().item() > 0 was False")):
            prog(-torch.ones(4))


def test_a_new_path_under_fail_on_recompile_raises_and_the_log_names_the_sync(caplog):
    import logging
    cf = ds.compile(any_branch)
    with caplog.at_level(logging.INFO, logger="dynashape.guards"):
        cf(torch.full((3,), 2.0))
    assert any("reads its value from the device" in r.getMessage() for r in caplog.records)
    with ds.set_stance("fail_on_recompile"), pytest.raises(ds.RecompileError, match="would trace a new path"):
        cf(torch.zeros(3))
    torch.testing.assert_close(cf(torch.zeros(3)), any_branch(torch.zeros(3)))  # outside the stance: traced


def test_an_in_place_change_of_a_fresh_tensor_before_a_branch_is_speculated():
    def f(x):
        m = torch.zeros_like(x)
        m[x > 0] = 1.0  # in place, on memory the call made itself
        if m.sum() > 2:
            return x * m
        return x - m

    cf = differential(f, lambda i: (torch.randn(5),))
    assert cf.stats.paths == 2 and not cf.stats.graph_breaks
