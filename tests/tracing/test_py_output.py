"""Log records and warnings made by the user's code inside a compiled function (tracing/py_output.py):
the compiled function makes the records and warnings eager makes, call by call, with the values of
the call (never a symbolic value of the trace), the same file and line, and the logger's level and
the warning filters as they are when the call runs."""
import contextlib
import io
import logging
import warnings

import pytest
import torch

import dynashape as ds

log = logging.getLogger("ds_test_py_output")


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        self.seen.append((record.name, record.levelname, record.getMessage(), record.filename, record.lineno,
                          record.funcName))


@pytest.fixture
def records():
    h = _Records()
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield h.seen
    log.removeHandler(h)


def _logs(x):
    log.info("rows %d of %s", x.shape[0], x.dtype)
    log.debug("not shown at INFO: %s", x.shape)
    if x.shape[0] > 3:
        log.warning("many rows: %s", x.shape[0] * 2)
    logging.getLogger("ds_test_py_output").log(logging.ERROR, "sum %s", x.sum())
    return x * 2


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_the_compiled_function_logs_what_eager_logs_on_every_call(records, backend):
    cf = ds.compile(_logs, dynamic=True, backend=backend)
    for n in (2, 3, 5, 2, 6, 3):
        x = torch.arange(float(n))
        _logs(x)
        eager = records[:]
        records.clear()
        cf(x)
        assert records == eager, (records, eager)
        records.clear()
    assert cf.stats.compiles <= 2 and not cf.stats.graph_breaks, cf.stats


def test_a_stream_handler_shows_each_call_s_values_never_a_symbol():
    """Run at trace time, `rows %s` of a size printed `rows Sym(s0)` once per compile, and the calls
    after it printed nothing."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s [%(funcName)s:%(lineno)d]"))
    other = logging.getLogger("ds_test_py_output_stream")
    other.addHandler(handler)
    other.setLevel(logging.INFO)
    other.propagate = False

    def f(x):
        other.info("rows %s, last %s", x.shape[0], x.shape[-1] * 2)
        return x.sum(0)
    cf = ds.compile(f, dynamic=True)
    want = []
    for n in (2, 3, 4, 3):
        x = torch.ones(n, n + 1)
        f(x)
        want.append(stream.getvalue())
        stream.seek(0)
        stream.truncate()
        cf(x)
        assert stream.getvalue() == want[-1], (stream.getvalue(), want[-1])
        stream.seek(0)
        stream.truncate()
    assert "Sym" not in "".join(want) and cf.stats.compiles == 1
    other.removeHandler(handler)


def test_a_level_changed_between_calls_is_read_when_the_call_runs(records):
    def f(x):
        log.info("rows %d", x.shape[0])
        if log.isEnabledFor(logging.DEBUG):  # a branch on the level: guarded
            x = x + 100
        return x * 2
    cf = ds.compile(f)
    for level in (logging.INFO, logging.WARNING, logging.DEBUG, logging.INFO):
        log.setLevel(level)
        x = torch.ones(3)
        want = f(x)
        eager = records[:]
        records.clear()
        torch.testing.assert_close(cf(x), want)
        assert records == eager, (level, records, eager)
        records.clear()


def test_a_log_record_with_exc_info_runs_the_call_eagerly(records):
    def f(x):
        try:
            raise ValueError("bad")
        except ValueError:
            log.exception("failed at %d", x.shape[0])
        return x + 1
    cf = ds.compile(f)
    torch.testing.assert_close(cf(torch.ones(2)), f(torch.ones(2)))
    assert len(records) == 2 and records[0] == records[1]
    assert cf.stats.graph_breaks


def _warns(x):
    warnings.warn(f"rows {x.shape[0]}")
    warnings.warn("always the same", DeprecationWarning)
    return x - 1


@pytest.mark.parametrize("action", ["always", "default"])
def test_the_compiled_function_warns_what_eager_warns_on_every_call(action):
    cf = ds.compile(_warns, dynamic=True)
    seen = {}
    for who, fn in (("eager", _warns), ("compiled", cf)):
        globals().pop("__warningregistry__", None)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter(action)
            for n in (2, 3, 2, 4, 2):
                fn(torch.ones(n))
        seen[who] = [(str(m.message), m.category, m.filename, m.lineno) for m in w]
    assert seen["compiled"] == seen["eager"], seen


# ---- warnings the function filters itself, and prints it redirects (a sixth hunt)

def _caught(fn, *args):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [(type(m.message).__name__, str(m.message)) for m in w]


def _records_its_own(x):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        warnings.warn("inner")
    return x * len(w)


def _silences_its_own(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn(f"silent {x.shape[0]}")
    return x + 1


def _turns_its_own_into_errors(x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warnings.warn("boom")
            y = x + 1
        except UserWarning:
            y = x - 1
    return y


@pytest.mark.parametrize("fn", [_records_its_own, _silences_its_own, _turns_its_own_into_errors])
def test_a_warning_under_the_functions_own_filters_is_judged_by_them(fn):
    """Recorded at trace time and replayed under the caller's filters, `catch_warnings(record=True)` counted 0
    warnings and a warning the function silenced reached the caller."""
    cf = ds.compile(fn)
    for n in (2, 3, 4):
        x = torch.randn(n)
        (got, got_w), (want, want_w) = _caught(cf, x), _caught(fn, x)
        torch.testing.assert_close(got, want)
        assert got_w == want_w


def _resets_filters(x):
    warnings.simplefilter("ignore", DeprecationWarning)
    return x + 1


def test_filters_the_function_changes_are_changed_on_every_call():
    cf = ds.compile(_resets_filters)
    saved = warnings.filters[:]
    try:
        for n in (2, 3, 3):
            warnings.filters[:] = saved
            cf(torch.ones(n))
            assert warnings.filters[0][2] is DeprecationWarning and warnings.filters[0][0] == "ignore"
    finally:
        warnings.filters[:] = saved
        warnings._filters_mutated()


def _prints_into(x, buf):
    with contextlib.redirect_stdout(buf):
        print(x.shape[0])
    return x + 1


def test_a_print_the_function_redirects_goes_where_it_redirects():
    """The print was replayed into the caller's sys.stdout: the function's buffer stayed empty."""
    cf = ds.compile(_prints_into)
    for n in (2, 3, 4):
        got, want = io.StringIO(), io.StringIO()
        cf(torch.ones(n), got)
        _prints_into(torch.ones(n), want)
        assert got.getvalue() == want.getvalue() == f"{n}\n"


def _sets_level(x, verbose):
    log.setLevel(logging.DEBUG if verbose else logging.WARNING)
    log.debug("rows %d", x.shape[0])
    return x + 1


def test_a_logger_the_function_configures_is_configured_on_every_call(records):
    """`log.setLevel(...)` inside ran at trace time only: the level stayed the caller's on later calls and
    the debug record was lost."""
    cf = ds.compile(_sets_level)
    for n, verbose in ((2, True), (3, False), (4, True), (4, True)):
        for fn in (_sets_level, cf):
            log.setLevel(logging.INFO)
            records.clear()
            fn(torch.ones(n), verbose)
            assert log.level == (logging.DEBUG if verbose else logging.WARNING)
            assert [r[2] for r in records] == ([f"rows {n}"] if verbose else [])
