"""Python state changes made before a call of the graph that raises when the compiled code runs
(runtime/raise_order.py): eager has made them, so the compiled call leaves them too, and not those
after the call. Oracle: one copy of the state run eagerly, one compiled, the same calls (some raise),
results, exceptions, state and printed text compared after each. Before, the graph raised before the
recorded changes were written: the compiled call left none of them."""
import contextlib
import io
import warnings

import pytest
import torch

import dynashape as ds


class _Obj:
    pass


def _world():
    """(f, state()): a function changing a list, a dict, an object and a new list in an attribute
    before and between data-dependent indexing that can raise. state() reads the state and resets it
    (each call starts from the same state: one entry serves them all)."""
    log, step, obj = [], {"n": 0}, _Obj()
    obj.n, obj.hist = 0, None

    def f(x, i):
        log.append(x.shape[0])
        step["n"] += 1
        obj.n += x.shape[0]
        obj.hist = []  # made by the call, then changed in place
        print("before", x.shape[0])
        y = x[i.item()]  # may raise: i out of range
        obj.hist.append(1)
        log.append("mid")
        z = y + x[i.item() - 1]  # may raise too
        obj.hist.append(2)
        step["n"] += 10
        return z * 2

    def state():
        out = (list(log), dict(step), obj.n, list(obj.hist) if obj.hist is not None else None)
        log.clear()
        step["n"], obj.n, obj.hist = 0, 0, None
        return out
    return f, state


def _outcome(fn, state, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            got = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001 - the program's own errors are compared
            got = ("raised", type(e).__name__)
    return got, state(), out.getvalue()


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_changes_before_the_call_that_raised_are_left_as_eager_leaves_them(backend, dynamic):
    fe, state_e = _world()
    fc, state_c = _world()
    cf = ds.compile(fc, backend=backend, dynamic=dynamic)
    # i in range; out of range at the first index; at the second only (x[-n] then x[-n - 1])
    for n, i in [(4, 1), (5, 2), (6, 9), (6, -6), (7, 3), (7, -7), (8, 20)]:
        x = torch.arange(float(n))
        (ge, se, pe), (gc, sc, pc) = _outcome(fe, state_e, x, torch.tensor(i)), _outcome(cf, state_c, x, torch.tensor(i))
        assert ge[0] == gc[0] and (ge[0] == "raised" and ge == gc or torch.equal(ge[1], gc[1])), (n, i, ge, gc)
        assert se == sc and pe == pc, (n, i, se, sc)
    assert not cf.stats.graph_breaks and cf.stats.compiles <= 2


def test_changes_before_a_warning_the_caller_turns_into_an_error_are_left():
    def make():
        seen, step = [], {"n": 0}

        def f(x):
            seen.append(x.shape[0])
            step["n"] += 1
            if x.shape[0] > 3:
                warnings.warn("large batch")
            seen.append("after")
            return x * 2
        return f, lambda: (list(seen), dict(step))

    (fe, state_e), (fc, state_c) = make(), make()
    cf = ds.compile(fc, backend="eager")
    for n in (2, 3, 5, 6, 7):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = [_outcome(fn, st, torch.ones(n))[:2] for fn, st in ((fe, state_e), (cf, state_c))]
        assert got[0][0][0] == got[1][0][0] and got[0][1] == got[1][1], (n, got)


def test_a_module_counting_its_calls_keeps_the_count_when_an_embedding_id_is_out_of_range():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.calls = 0

        def forward(self, ids):
            self.calls += 1
            return self.emb(ids).sum()

    ref, net = Net(), Net()
    net.load_state_dict(ref.state_dict())
    cm = ds.compile(net, backend="eager")
    for ids in ([1, 2], [3, 4], [5, 12], [6, 7]):
        t = torch.tensor(ids)
        for m in (ref, cm):
            try:
                m(t)
            except IndexError:
                pass
        assert net.calls == ref.calls


def test_changes_before_an_integer_division_by_zero_are_left():
    def make():
        log = []

        def f(x, y):
            log.append(x.shape[0])
            q = x // y
            log.append("after")
            return q
        return f, log

    (fe, log_e), (fc, log_c) = make(), make()
    cf = ds.compile(fc, backend="eager")
    for d in (1, 2, 0, 3):
        x, y = torch.arange(4), torch.full((4,), d)
        outs = []
        for fn in (fe, cf):
            try:
                outs.append(fn(x, y).tolist())
            except RuntimeError:  # (torch's "ZeroDivisionError")
                outs.append("raised")
        assert outs[0] == outs[1] and log_e == log_c, (d, outs, log_e, log_c)


def test_changes_before_a_failed_check_on_a_data_dependent_value_are_left():
    def make():
        log = []

        def f(x, i):
            n = i.item()
            log.append(x.shape[0])
            torch._check(n < 5, lambda: "n must be below 5")
            log.append("checked")
            return x * n
        return f, log

    (fe, log_e), (fc, log_c) = make(), make()
    cf = ds.compile(fc, backend="eager")
    for k in (1, 7, 2):
        outs = []
        for fn in (fe, cf):
            try:
                outs.append(fn(torch.ones(3), torch.tensor(k)).tolist())
            except RuntimeError:
                outs.append("raised")
        assert outs[0] == outs[1] and log_e == log_c, (k, outs, log_e, log_c)


def test_a_call_that_does_not_raise_runs_without_a_marker_when_nothing_changed_before():
    log = []

    def f(x, i):
        y = x[i.item()]
        log.append(1)  # after the call that may raise: written with the results, as before
        return y

    cf = ds.compile(f, backend="eager")
    cf(torch.ones(3), torch.tensor(1))
    assert "reached" not in cf.entries[0].code and log == [1]


def test_a_trace_that_branches_on_data_breaks_where_a_marker_would_be_needed():
    log = []

    def f(x, i):
        log.append(x.shape[0])
        y = x[i.item()]
        return y + 1 if x.sum() > 0 else y - 1  # a data-dependent branch: a trace tree's path

    cf = ds.compile(f, backend="eager")
    for s, i in [(1.0, 1), (-1.0, 1), (1.0, 7)]:
        got = []
        for fn in (f, cf):
            log.clear()
            try:
                out = fn(torch.full((3,), s), torch.tensor(i)).item()
            except IndexError:
                out = "raised"
            got.append((out, list(log)))
        assert got[0] == got[1], (s, i, got)
    assert "branches on data" in cf.stats.graph_breaks[0] and "x[i.item()]" in cf.stats.graph_breaks[0]
