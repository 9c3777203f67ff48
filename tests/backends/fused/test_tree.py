"""Trace trees (speculation on data-dependent branches) with backend='fused': each path's regions
fuse, a region never spans a branch, and the statements the paths share stay identical, so
the paths still merge into one entry."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.ir.tree import is_data_guard
from .oracle import check_fused


def prefix_used_differently(x, w):
    a = (x * w).exp()
    b = a + 1
    if x.sum() > 0:  # path 1 reads a and b after the branch, path 2 only a
        return (b * a.sigmoid()).relu() * 3
    return (a - 1).tanh() * 2


def normalise_unless_nan(x, w, b):
    y = F.gelu(x * w + b) * torch.sigmoid(x)
    if torch.isnan(y).any():
        return torch.zeros_like(y)
    return (y - y.mean(-1, keepdim=True)) / y.std(-1, keepdim=True)


def _cases(n):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        x = torch.randn(3 + i % 4, 7, generator=g) + (1.0 if i % 2 else -1.0)
        out.append((x, torch.randn(7, generator=g)))
    return out


def test_paths_that_read_a_shared_region_differently_merge_and_fuse():
    cf = check_fused(prefix_used_differently, _cases(12), compiles=2)
    assert len(cf.entries) == 1 and cf.stats.paths == 2
    e = cf.entries[0]
    assert e.tree is not None and e.fn.fused
    assert "if bool(" in e.fn.source and "_fused_" in e.fn.source


def test_a_nan_check_takes_both_paths_with_kernels_and_matches_eager():
    cases = []
    for i, (x, w) in enumerate(_cases(10)):
        if i % 3 == 0:
            x = x.clone()
            x[0, 0] = float("nan")
        cases.append((x, w, torch.randn(7)))
    cf = check_fused(normalise_unless_nan, cases, compiles=2)
    assert cf.stats.side_exits == 1 and cf.entries[0].fn.fused


def test_a_region_never_spans_a_data_guard():
    def f(x, w):
        a = x * w + 1  # would fuse with the exp/tanh after the branch, were the guard not a barrier
        if x.sum() > 0:
            return (a * 2).exp()
        return (a * 3).tanh()
    cf = check_fused(f, _cases(6), compiles=2)
    paths = cf.entries[0].tree.paths
    for rt in cf.entries[0].fn.regions:
        g = next(p for p in paths if rt.region.nodes[0] in p.nodes)
        pos = {n: i for i, n in enumerate(g.nodes)}
        guard = next(pos[n] for n in g.nodes if is_data_guard(n))
        sides = {pos[n] < guard for n in rt.region.nodes}
        assert len(sides) == 1, [n.name for n in rt.region.nodes]
    assert len(cf.entries[0].fn.regions) == 3  # x * w + 1 before; one region after, on each path


def test_tree_entries_train_with_eager_gradients():
    def step(x, w):
        y = (x * w).tanh()
        if y.mean() > 0:
            return (y * 2).sum()
        return (y.exp() - 1).sum()
    cases = [(x.requires_grad_(), w.requires_grad_()) for x, w in _cases(8)]
    check_fused(step, cases, grad=True, compiles=None)


def test_the_eager_backend_still_replays_trees():
    cf = ds.compile(prefix_used_differently, dynamic=True, backend="eager")
    for x, w in _cases(6):
        torch.testing.assert_close(cf(x, w), prefix_used_differently(x, w))
    assert cf.stats.paths == 2 and "_fused_" not in cf.entries[0].fn.source


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_paths_that_traced_an_input_with_different_symbols_still_fuse_after_their_branch():
    """Inference fuzz seed 25112801: one path traced `y` as f32[1, s1], another as f32[1, s2], so the
    region before the branch differed between them and the fused paths no longer merged (the whole
    tree fell back to its eager code, a build failure). Now only the regions after each path's first
    data guard fuse there."""
    import warnings
    from dynashape.backends.fused import build
    from tests.fuzz.gen import generate
    from tests.fuzz.run import check_program, random_calls
    pseed = 252586855669371
    prog = generate(pseed, None, data_branches=True)
    assert "if int((x > 0).sum()) % 2 == 0:" in prog.source(), "the generator changed: find a new program"
    before = build.counters["failures"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in (15, 18, 20, 24):
            assert not check_program(prog, random_calls(pseed, prog, k), backend="fused")
    assert build.counters["failures"] == before, build.failure_messages[-1:]
