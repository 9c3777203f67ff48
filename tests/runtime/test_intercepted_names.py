"""Functions the trace intercepts on their owner modules (tracing/global_state.py: torch.manual_seed,
warnings.warn, math's functions, torch's flag getters, print), held under a name of the user's:
`from torch import manual_seed`, a closure's, an attribute's, a helper module's global. Each is
swapped for the patch's router while the trace runs (runtime/pystate_swaps.py), so the call is
recorded or guarded as `torch.manual_seed(...)` is. Before, it ran once, at trace time: the
compiled calls neither reseeded nor warned, and a flag's value was baked in unguarded."""
import contextlib
import importlib
import io
import math
import sys
import warnings

import torch

import dynashape as ds
from math import sqrt
from torch import are_deterministic_algorithms_enabled, manual_seed
from warnings import warn

say = print


def _seeded(fn, n):
    """The call's result from a generator seeded alike, and the next draw after it."""
    torch.manual_seed(100)
    out = fn(torch.zeros(n))
    return out, torch.rand(2)


def test_manual_seed_imported_by_name_reseeds_on_every_call():
    def f(x):
        manual_seed(x.shape[0])
        return x + torch.rand(x.shape)

    cf = ds.compile(f, backend="eager")
    for n in (2, 3, 4, 4, 5, 5):
        torch.testing.assert_close(_seeded(cf, n), _seeded(f, n))


def test_warn_imported_by_name_warns_on_every_call():
    def f(x):
        warn(f"rows {x.shape[0]}")
        return x + 1

    cf = ds.compile(f, backend="eager")
    for n in (2, 3, 4, 4):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            cf(torch.zeros(n))
        assert [str(w.message) for w in got] == [f"rows {n}"]


def test_sqrt_imported_by_name_of_a_size_stays_symbolic():
    def f(x):
        return x / sqrt(x.size(-1))

    cf = ds.compile(f, dynamic=True, backend="eager")
    for n in (3, 5, 7):
        torch.testing.assert_close(cf(torch.ones(2, n)), f(torch.ones(2, n)))
    assert cf.stats.compiles == 1  # as `math.sqrt(...)` (was one graph per size)


def test_a_flag_getter_imported_by_name_is_guarded_by_its_value():
    def f(x):
        return x * 2 if are_deterministic_algorithms_enabled() else x * 3

    cf = ds.compile(f, backend="eager")
    before = torch.are_deterministic_algorithms_enabled()
    try:
        for on in (False, True, False):
            torch.use_deterministic_algorithms(on)
            torch.testing.assert_close(cf(torch.ones(2)), f(torch.ones(2)))
    finally:
        torch.use_deterministic_algorithms(before)


def test_print_bound_to_another_name_prints_on_every_call():
    def f(x):
        say("rows", x.shape[0])
        return x + 1

    cf = ds.compile(f, backend="eager")
    for n in (2, 3, 3):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cf(torch.zeros(n))
        assert out.getvalue() == f"rows {n}\n"


def _seed_holders():
    seed = torch.manual_seed

    class Holder:
        pass
    h = Holder()
    h.seed = torch.manual_seed
    fns = [torch.manual_seed]
    return {"closure": lambda x: (seed(x.shape[0]), x + torch.rand(x.shape))[1],
            "attribute": lambda x: (h.seed(x.shape[0]), x + torch.rand(x.shape))[1],
            "list": lambda x: (fns[0](x.shape[0]), x + torch.rand(x.shape))[1]}


def test_manual_seed_held_by_a_closure_an_attribute_or_a_list_reseeds_on_every_call():
    for where, f in _seed_holders().items():
        cf = ds.compile(f, backend="eager")
        for n in (2, 3, 3, 4):
            torch.testing.assert_close(_seeded(cf, n), _seeded(f, n), msg=where)


HELPER = '''
import torch
from torch import manual_seed


def noisy(x):
    manual_seed(x.shape[0])
    return x + torch.rand(x.shape)
'''


def test_manual_seed_imported_by_a_helper_module_reseeds_on_every_call(tmp_path, monkeypatch):
    name = f"ds_intercepted_helper_{abs(hash(tmp_path))}"
    (tmp_path / f"{name}.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    helper = importlib.import_module(name)
    try:
        f = lambda x: helper.noisy(x) * 2  # noqa: E731
        cf = ds.compile(f, backend="eager")
        for n in (2, 3, 3, 4):
            torch.testing.assert_close(_seeded(cf, n), _seeded(f, n))
        assert helper.manual_seed is torch.manual_seed  # put back after the trace
    finally:
        sys.modules.pop(name, None)


def test_the_user_s_names_hold_their_functions_again_after_the_trace():
    cf = ds.compile(lambda x: (manual_seed(1), warn("w"), x * sqrt(4.0))[2], backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf(torch.ones(2))
    g = globals()
    assert g["manual_seed"] is torch.random.manual_seed and g["warn"] is warnings.warn and g["sqrt"] is math.sqrt
