"""Dispatch over many entries: any entry found is one whose guards accept; reasons stay bounded."""
import warnings

import pytest
import torch

import dynashape as ds
from dynashape.runtime import compile as compile_mod


def f(x):
    return (x * 2 + 1)[: x.size(0) // 2 + 1].sum(0)


# Dispatch is what these tests check: the replay backend, because under the fused one every static size
# is a kernel of its own and the suite's fused_sync waits for g++ on each (100 s of the suite for 280 of them)
EAGER = dict(dynamic=False, backend="eager")


def test_every_one_of_many_static_entries_is_found_and_equals_eager():
    with ds.config.patch(recompile_limit=10000):
        cf = ds.compile(f, **EAGER)
        xs = [torch.randn(n, 4) for n in range(1, 80)]
        for x in xs:
            cf(x)
        assert cf.stats.compiles == 79
        for x in reversed(xs):  # the oldest entries too, through the index
            torch.testing.assert_close(cf(x), f(x))
        assert cf.stats.compiles == 79
        cf(torch.randn(3, 5))  # a size no entry has: compiles
        assert cf.stats.compiles == 80


def test_index_and_dynamic_entries_together():
    def g(x, y):
        return x.sum() + y.sum() * x.size(0)
    with ds.config.patch(recompile_limit=10000):
        cf = ds.compile(g, dynamic=False)
        for n in range(1, 12):
            torch.testing.assert_close(cf(torch.ones(n), torch.ones(2)), g(torch.ones(n), torch.ones(2)))
        cf2 = ds.compile(g, dynamic=True)
        for n in range(2, 12):
            torch.testing.assert_close(cf2(torch.ones(n), torch.ones(n + 1)), g(torch.ones(n), torch.ones(n + 1)))
        # an int where a tensor was: the index cannot key it, the guards decide
        with pytest.raises(AttributeError):
            g(3, torch.ones(2))
        with pytest.raises(AttributeError):
            cf(3, torch.ones(2))


def test_recompile_reasons_stay_bounded_with_many_entries():
    with ds.config.patch(recompile_limit=10000):
        cf = ds.compile(f, **EAGER)
        for n in range(1, 200):
            cf(torch.randn(n, 4))
    kept = len(cf.stats.recompile_reasons)
    assert kept <= 2 * compile_mod._KEPT_REASONS
    assert any("older entries" in r for r in cf.stats.recompile_reasons)


def test_past_the_limit_misses_run_eagerly_without_explaining(monkeypatch):
    cf = ds.compile(f, **EAGER)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 12):
            cf(torch.randn(n, 4))
    assert sum("recompile_limit" in str(x.message) for x in w) == 1
    explained = []
    real = type(cf.entries[0].guard_set).explain
    monkeypatch.setattr(type(cf.entries[0].guard_set), "explain",
                        lambda self, L: explained.append(1) or real(self, L))
    before = len(cf.stats.recompile_reasons)
    for _ in range(100):
        x = torch.randn(50, 4)
        torch.testing.assert_close(cf(x), f(x))
    assert explained == [] and len(cf.stats.recompile_reasons) == before
    ds.reset()  # the warning comes again after a reset
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 12):
            cf(torch.randn(n, 4))
    assert sum("recompile_limit" in str(x.message) for x in w) == 1


def test_past_the_limit_sizes_that_missed_skip_the_lookup_and_other_calls_still_hit_their_entries(monkeypatch):
    # issue 22: a call past the limit cost binding + a failed lookup (11.8 us over eager); sizes
    # that already missed every entry now run eagerly at once. Calls that hit an entry still do.
    cf = ds.compile(f, **EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(1, 12):
            cf(torch.randn(n, 4))
    looked = []
    real = type(cf._cache).lookup
    monkeypatch.setattr(type(cf._cache), "lookup",
                        lambda self, L, s=0, tried=None: looked.append(1) or real(self, L, s, tried))
    for _ in range(5):
        x = torch.randn(50, 4)
        torch.testing.assert_close(cf(x), f(x))
    assert len(looked) == 1  # the first miss only
    hit = cf.entries[-1]
    x = torch.randn(1, 4)  # the oldest entry's size: looked up, and run by that entry
    torch.testing.assert_close(cf(x), f(x))
    assert len(looked) == 2 and cf.entries[-1] is hit
