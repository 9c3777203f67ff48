"""Iterators the compiled function can reach (runtime/pystate_swaps.py): in its own closure, passed as
an argument, in a global tuple, sharing another iterator. Oracle: one copy of the world run eagerly,
one compiled, the values drawn compared call by call, and the next draw after the calls. Before the
fix the trace drew from the caller's iterator (every value drawn twice: the trace's draw, then the
eager run's), or a generator's draw went unnoticed and its value was baked into the graph."""
import itertools
import weakref

import pytest
import torch

import dynashape as ds


def _numbers():
    i = 0
    while True:  # after a turn of the loop, the frame is back at the same `yield`
        i += 1
        yield i


_MAKERS = {"generator": _numbers, "count": lambda: itertools.count(1), "range_iterator": lambda: iter(range(1, 99)),
           "list_iterator": lambda: iter(list(range(1, 99))), "map": lambda: map(int, iter(range(1, 99)))}


def _drawing(make):
    it = make()

    def f(x):
        return x * next(it)
    return f, it


@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_an_iterator_in_the_function_s_closure_is_drawn_once_per_call(kind):
    fe, it_e = _drawing(_MAKERS[kind])
    fc, it_c = _drawing(_MAKERS[kind])
    cf = ds.compile(fc, backend="eager")
    for n in (2, 3, 4, 4, 4):
        torch.testing.assert_close(cf(torch.ones(n)), fe(torch.ones(n)))
    assert next(it_c) == next(it_e)  # nothing drawn twice, nothing left of the trace in the cell
    assert cf.stats.graph_breaks


def test_a_nonlocal_counter_and_a_closure_generator_agree_with_eager():
    def make():
        count, hist, g = 0, [], _numbers()

        def f(x):
            nonlocal count
            count += x.shape[0]
            hist.append(count)
            return x * count + next(g)
        return f, lambda: (count, list(hist), next(g))

    for dynamic in (None, True):
        (fe, state_e), (fc, state_c) = make(), make()
        cf = ds.compile(fc, dynamic=dynamic, backend="eager")
        for n in (2, 3, 4, 4, 5):
            torch.testing.assert_close(cf(torch.ones(n)), fe(torch.ones(n)))
        assert state_c() == state_e()


@pytest.mark.parametrize("kind", ["generator", "count", "list_iterator"])
@pytest.mark.parametrize("how", ["alone", "in a tuple", "in a list", "twice"])
def test_an_iterator_passed_as_an_argument_is_drawn_once_per_call(kind, how):
    def f(x, it):
        if how == "twice":
            return x * next(it[0]) + next(it[1])
        return x * next(it if how == "alone" else it[0])

    it_e, it_c = _MAKERS[kind](), _MAKERS[kind]()
    wrap = {"alone": lambda i: i, "in a tuple": lambda i: (i,), "in a list": lambda i: [i],
            "twice": lambda i: (i, i)}[how]
    cf = ds.compile(f, backend="eager")
    for n in (2, 3, 4, 4):
        torch.testing.assert_close(cf(torch.ones(n), wrap(it_c)), f(torch.ones(n), wrap(it_e)))
    assert next(it_c) == next(it_e)


def test_a_list_argument_appended_to_gets_the_caller_s_iterator_not_the_trace_s_copy():
    def f(x, items):
        items.append(items[0])  # the iterator itself, not drawn
        return x + len(items)

    it = iter(range(5))
    box = [it]
    cf = ds.compile(f, backend="eager")
    cf(torch.ones(2), box)
    assert box == [it, it] and next(it) == 0


_TUPLE = (iter(range(1, 99)),)
_TUPLE_E = (iter(range(1, 99)),)


def test_an_iterator_in_a_global_tuple_runs_eagerly_before_the_trace_draws():
    def draw_c(x):
        return x * next(_TUPLE[0])

    def draw_e(x):
        return x * next(_TUPLE_E[0])

    cf = ds.compile(draw_c, backend="eager")
    for n in (2, 3, 3):
        torch.testing.assert_close(cf(torch.ones(n)), draw_e(torch.ones(n)))
    assert next(_TUPLE[0]) == next(_TUPLE_E[0])
    assert "in a tuple" in cf.stats.graph_breaks[0]


def test_a_weak_dictionary_in_the_closure_is_not_filled_with_the_trace_s_tensors():
    def make():
        seen = weakref.WeakValueDictionary()

        def f(x):
            seen["last"] = x
            return x * len(seen)
        return f, seen

    (fe, seen_e), (fc, seen_c) = make(), make()
    cf = ds.compile(fc, backend="eager")
    x = torch.ones(3)
    torch.testing.assert_close(cf(x), fe(x))
    assert seen_c["last"] is x and type(seen_c["last"]) is torch.Tensor
