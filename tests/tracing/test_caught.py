"""Errors the trace raises into the user's code and the user's code catches, and ops recorded inside
the user's try/except (tracing/caught.py): the call runs eagerly, never down a path eager does not
take, and no error of the compiled code escapes a handler that eager's would reach. Every case
here was silently wrong (or raised where eager did not) before; found by hand and by the fuzzer's
`try:` template (tests/fuzz/findings.md)."""
import contextlib
import io
import math

import pytest
import torch

import dynashape as ds


def _catches_globals(x):
    try:
        globals()
        return x + 1
    except Exception:
        return x - 1


def _catches_data_dependent_length(x):
    try:
        return x * len(x.nonzero())
    except Exception:
        return x * 3


def _helper_catches(x):
    def count(t):
        try:
            return len(t.nonzero())
        except Exception:  # noqa: BLE001
            return -1
    return x * count(x)


def _catches_in_a_loop(x):
    out = x
    for _ in range(2):
        try:
            out = out + len(out.nonzero())
        except (RuntimeError, Exception):
            out = out - 1
    return out


@pytest.mark.parametrize("fn", [_catches_globals, _catches_data_dependent_length, _helper_catches,
                                _catches_in_a_loop])
def test_an_error_the_trace_raised_and_the_user_caught_runs_eagerly(fn):
    """Eager raises nothing on these lines; a trace that went on down the `except` branch was
    silently wrong (x * 3 for x * len(x.nonzero()))."""
    cf = ds.compile(fn)
    for x in (torch.arange(-2.0, 4.0), torch.tensor([0.0, 1.0, 0.0]), torch.zeros(5)):
        torch.testing.assert_close(cf(x), fn(x))
    assert cf.stats.graph_breaks and all("caught an error the trace raised" in r for r in cf.stats.graph_breaks), \
        cf.stats.graph_breaks


def test_a_swallowed_break_names_the_users_line_and_fails_fullgraph():
    cf = ds.compile(_catches_data_dependent_length, fullgraph=True)
    with pytest.raises(ds.GraphBreakError, match=r"caught an error the trace raised.*test_caught.py:\d+"):
        cf(torch.ones(3))


def test_an_error_of_an_op_the_user_catches_runs_the_call_eagerly():
    """Eager raises it too, but whether the trace's error is eager's (type, condition) is eager's to
    say: `x @ x` of a matrix that is not square."""
    def f(x):
        try:
            return x @ x
        except RuntimeError:
            return x * 2
    cf = ds.compile(f)
    for x in (torch.ones(2, 3), torch.ones(3, 3), torch.ones(3, 4)):
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats.graph_breaks


def _sqrt_of_a_size(y):  # T1: compiled at size 3, the graph ran sqrt(s0 - 3) outside the try at size 2
    try:
        return y * math.sqrt(y.size(0) - 3)
    except ValueError:
        return y[:1] - 1


def _check_on_a_data_dependent_size(y):  # T2: the runtime check of expand escaped the handler
    v0 = y[torch.arange(y.size(0)) % 1 == 0]
    try:
        return v0.expand(1)
    except RuntimeError:
        return v0[:1] - 1


def _argmax_of_a_filtered_tensor(y):  # T2: the graph's argmax of an empty tensor raised outside the try
    try:
        v0 = y[y > 100]
        return v0[v0.argmax().item():]
    except Exception:  # noqa: BLE001
        return y[:1] - 1


def _stand_in_type_error(y):  # T3: FakeTensor * SymFloat raised a TypeError the program caught
    try:
        return y * sum(y.flatten()[:1].tolist())
    except Exception:  # noqa: BLE001
        return y * 0.5


def _error_of_another_type(y):  # T4: the trace raised RuntimeError, eager IndexError (which escapes)
    try:
        return y.flatten()[y.flatten().argmax().item():]
    except RuntimeError:
        return y.reshape(-1) * 0.5


@pytest.mark.parametrize("fn, sizes", [
    (_sqrt_of_a_size, [(3,), (2,), (5,)]),
    (_check_on_a_data_dependent_size, [(2,), (1,), (3,)]),
    (_argmax_of_a_filtered_tensor, [(3,), (4,)]),
    (_stand_in_type_error, [(3,), (2,)]),
    (_error_of_another_type, [(0, 2), (2, 2)]),
])
@pytest.mark.parametrize("dynamic", [None, True])
def test_what_eager_raises_or_catches_the_compiled_function_does_too(fn, sizes, dynamic):
    cf = ds.compile(fn, dynamic=dynamic)
    for size in sizes:
        x = torch.arange(float(math.prod(size))).reshape(size) - 1
        try:
            want = fn(x.clone())
        except Exception as e:  # noqa: BLE001
            with pytest.raises(type(e)):
                cf(x.clone())
            continue
        torch.testing.assert_close(cf(x.clone()), want)


def test_with_and_finally_blocks_and_the_user_s_own_errors_stay_compiled():
    table = {"a": 2.0}

    def f(x):
        with torch.no_grad():
            y = x * 2
        try:
            y = y + 1
        finally:
            table["calls"] = table.get("calls", 0) + 1
        try:
            k = table["missing"]
        except KeyError:
            k = 3.0
        try:
            raise ValueError("the user's own")
        except ValueError:
            k = k + 1
        return y * k
    cf = ds.compile(f)
    for n in (2, 3):
        torch.testing.assert_close(cf(torch.ones(n)), f(torch.ones(n)))
    assert not cf.stats.graph_breaks and cf.stats.compiles >= 1


def test_a_try_around_the_compiled_function_s_call_does_not_count():
    """The caller's handler does catch what the compiled code raises: only `try:` blocks inside the
    function count (a training loop's `except KeyboardInterrupt:` made every step eager)."""
    table = {}

    def f(x):
        try:  # a handler in the function (not around an op): the frames are looked at
            k = table["k"]
        except KeyError:
            k = 2
        return x[x > 0].sum() * k + x.argmax()
    cf = ds.compile(f)
    try:
        for n in (3, 4):
            x = torch.arange(float(n)) - 1
            torch.testing.assert_close(cf(x), f(x))
    except KeyboardInterrupt:
        pass
    assert not cf.stats.graph_breaks, cf.stats.graph_breaks


def _probe():
    import sys
    return sys._getframe(1).f_lasti


def _blocks():
    out = {}
    try:
        out["except Exception"] = _probe()
    except Exception:  # noqa: BLE001
        pass
    try:
        out["except (A, B)"] = _probe()
    except (ValueError, RuntimeError):
        pass
    try:
        out["bare except"] = _probe()
    except:  # noqa: E722
        pass
    try:
        with open(__file__):
            out["with inside try"] = _probe()
    except KeyError:
        pass
    with open(__file__):
        out["with"] = _probe()
    try:
        out["finally"] = _probe()
    finally:
        pass
    out["outside"] = _probe()
    return out


def test_which_blocks_catch():
    from dynashape.tracing.caught import _caught_at
    got = {k: _caught_at(_blocks.__code__, v) for k, v in _blocks().items()}
    assert got == {"except Exception": True, "except (A, B)": True, "bare except": True, "with inside try": True,
                   "with": False, "finally": False, "outside": False}, got


def test_the_break_names_the_line_in_the_try():
    def f(y):
        try:
            v = y.narrow(0, 1, 2)
            v = v[v > 0]
        except (ValueError, RuntimeError):
            v = y.flatten() * 1.0
        return v
    cf = ds.compile(f, dynamic=True)
    for s in [(3, 1), (1, 0), (4, 2)]:
        torch.testing.assert_close(cf(torch.ones(s)), f(torch.ones(s)))
    assert "y.narrow(0, 1, 2)" in cf.stats.graph_breaks[0], cf.stats.graph_breaks


# ---- `with` blocks whose manager's exit may swallow the error (contextlib.suppress and kin)

@contextlib.contextmanager
def _swallowing():
    try:
        yield
    except Exception:  # noqa: BLE001
        pass


@contextlib.contextmanager
def _tidy():
    try:
        yield
    finally:
        pass


class _ExitTrue:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


class _ExitNone:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _index_read_from_data(manager):
    def f(x, i):
        y = x + 1
        with manager():
            y = x[i.item()] * 2
        return y
    return f


class _LambdaEnter:  # an `__enter__` that is not a function named `__enter__` (a sixth hunt: never noted)
    __enter__ = lambda self: self  # noqa: E731

    def __exit__(self, *exc):
        return True


class _CEnter(io.StringIO):  # a C `__enter__`, a Python `__exit__` that swallows
    def __exit__(self, *exc):
        return True


SWALLOWING = {"suppress": lambda: contextlib.suppress(IndexError, RuntimeError), "@contextmanager": _swallowing,
              "__exit__ returns True": _ExitTrue, "lambda __enter__": _LambdaEnter, "C __enter__": _CEnter}
PASSING = {"@contextmanager with finally": _tidy, "__exit__ returns None": _ExitNone, "no_grad": torch.no_grad}


@pytest.mark.parametrize("name", sorted(SWALLOWING) + sorted(PASSING))
def test_an_op_inside_a_with_block_that_may_swallow_its_error_runs_eagerly(name):
    """`with contextlib.suppress(IndexError): y = x[i.item()] * 2` compiled to an indexing that
    raised out of the compiled code where eager's suppress swallowed the IndexError (y = x + 1)."""
    manager = SWALLOWING.get(name) or PASSING[name]
    f = _index_read_from_data(manager)
    cf = ds.compile(f)
    for i in (1, 7, 2, 9):
        x, idx = torch.arange(4.0), torch.tensor(i)
        try:
            want = f(x, idx)
        except IndexError:
            with pytest.raises(IndexError):
                cf(x, idx)
            continue
        torch.testing.assert_close(cf(x, idx), want)
    if name in SWALLOWING:
        assert cf.stats.graph_breaks and "whose exit may swallow" in cf.stats.graph_breaks[0], cf.stats.graph_breaks
        assert "x[i.item()] * 2" in cf.stats.graph_breaks[0]
    else:
        assert not cf.stats.graph_breaks, cf.stats.graph_breaks


def test_an_error_the_trace_raised_into_a_suppress_block_runs_eagerly():
    def f(x):
        y = x * 3
        with contextlib.suppress(Exception):
            y = x * len(x.nonzero())
        return y
    cf = ds.compile(f)
    for x in (torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 0.0])):
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats.graph_breaks, "the trace's error was swallowed by suppress and the call compiled"
