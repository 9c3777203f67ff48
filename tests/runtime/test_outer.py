"""Globals and closure cells read and written by a compiled function and by the helpers it runs
(runtime/outer.py): each case runs one copy of the state eagerly and one compiled, changes both
the same way between calls, and compares results and state (found by the Python-state fuzzer,
tests/fuzz/state.py). Every case here was silently wrong before."""
import importlib
import math
import sys
import textwrap

import pytest
import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor

HELPERS = '''
import torch
SCALE = 2.0
CALLS = 0
FAST = True
W = torch.ones(2)


def scaled(x):
    return x * SCALE


def counted(x):
    global CALLS
    CALLS += 1
    return x * CALLS


def weighted(x):
    return x * W


class Net(torch.nn.Module):
    def forward(self, x):
        return x * 2 if FAST else x * 3


class Cfg:
    scale = 2.0
'''


@pytest.fixture
def two(tmp_path, monkeypatch):
    """Two fresh copies of a helper module (one for eager, one compiled)."""
    mods = []
    for i in range(2):
        name = f"ds_outer_helpers_{i}_{abs(hash(tmp_path))}"
        (tmp_path / f"{name}.py").write_text(HELPERS)
        mods.append(name)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = [importlib.import_module(m) for m in mods]
    yield out
    for m in mods:
        sys.modules.pop(m, None)


def _world(src: str, extra: dict) -> dict:
    ns = dict(extra, __name__="ds_outer_world", torch=torch, math=math)
    exec(compile(textwrap.dedent(src), f"<outer-{id(ns)}>", "exec"), ns)
    return ns


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert type(b) is torch.Tensor and not isinstance(b, FakeTensor)
        torch.testing.assert_close(b, a, equal_nan=True)
    else:
        assert type(a) is type(b) and (a == b or a != a and b != b), (a, b)


def _run(src, changes, names, helpers=None, dynamic=None, calls=4, grow=False):
    """`f(x)` of `src` eager and compiled; before call i both run changes[i]; the results and
    the globals `names` must agree after every call."""
    eager = _world(src, {"h": helpers[0]} if helpers else {})
    comp = _world(src, {"h": helpers[1]} if helpers else {})
    cf = ds.compile(comp["f"], dynamic=dynamic)
    for i in range(calls):
        for ns in (eager, comp):
            if i < len(changes) and changes[i]:
                exec(changes[i], ns)
        x = torch.arange(2.0 + grow * i) + i
        _same(eager["f"](x.clone()), cf(x.clone()))
        for n in names:
            _same(eval(n, eager), eval(n, comp))
    return cf


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_global_the_function_rebinds_is_replayed_and_no_fake_tensor_stays(dynamic):
    src = '''
    GT = torch.zeros(2)
    CNT = 0
    FLAG = True
    def f(x):
        global GT, CNT, FLAG
        GT = GT * 0.5 + x.mean()
        CNT += 1
        FLAG = not FLAG
        return x * 2 if FLAG else x * 3
    '''
    _run(src, [], ["GT", "CNT", "FLAG"], dynamic=dynamic)


def test_a_closure_cell_the_function_writes_is_replayed():
    src = '''
    def make():
        c = 3
        def f(x):
            nonlocal c
            c = c + x.shape[0]  # symbolic under dynamic=True
            return x * c
        def set_c(v):
            nonlocal c
            c = v
        return f, set_c
    f, set_c = make()
    '''
    for dynamic in (None, True):
        _run(src, ["", "set_c(10)", "set_c(math.nan)", "set_c(2.5)"], ["f.__closure__[0].cell_contents"],
             dynamic=dynamic, grow=True)


def test_a_helper_s_closure_is_guarded_when_read_and_replayed_when_written():
    src = '''
    def make():
        n = 0
        s = 2.0
        def counter():
            nonlocal n
            n += 1
            return n
        def scale(x):
            return x * s
        def set_s(v):
            nonlocal s
            s = v
        return counter, scale, set_s
    counter, scale, set_s = make()
    def f(x):
        return scale(x) * counter()
    '''
    _run(src, ["", "", "set_s(5.0)", ""], ["counter()"])


def test_another_module_s_globals_are_guarded_when_read_and_replayed_when_written(two):
    src = '''
    net = h.Net()
    def f(x):
        return h.scaled(x) + h.counted(x) + h.weighted(x) + net(x)
    '''
    _run(src, ["", "h.SCALE = 7.0", "h.FAST = False; h.W = torch.full((2,), 5.0)", "h.W.fill_(3.0)"],
         ["h.CALLS", "h.W"], helpers=two)


def test_a_module_attribute_added_after_the_trace_is_seen():
    src = '''
    class M(torch.nn.Module):
        pass
    m = M()
    def f(x):
        m.calls = getattr(m, "calls", 0) + 1
        return x * m.calls
    '''
    for dynamic in (None, True, False):
        _run(src, [], ["m.calls"], dynamic=dynamic)


def test_a_nan_closure_value_in_a_symbolic_expression_compiles():
    c = math.nan

    def f(x, n):
        return x * (n + c)
    cf = ds.compile(f, dynamic=True)
    for n in (1, 2):
        torch.testing.assert_close(cf(torch.ones(2), n), f(torch.ones(2), n), equal_nan=True)


def test_a_store_of_the_object_already_there_is_redone_after_the_caller_changes_it(two):
    # `CALLS = 0` where CALLS is 0 leaves no difference to replay: the value is guarded instead
    src = '''
    X = 0
    def f(x):
        global X
        X = 0
        h.CALLS = 0
        return x + 1
    '''
    _run(src, ["", "X = 5; h.CALLS = 7", "", "X = 0.0"], ["X", "h.CALLS"], helpers=two)


def test_a_module_imported_inside_the_function_has_its_globals_guarded(two):
    src = '''
    def f(x):
        import MOD as mod  # not a global of f
        return x * mod.SCALE
    '''
    eager = _world(src.replace("MOD", two[0].__name__), {})
    comp = _world(src.replace("MOD", two[1].__name__), {})
    cf = ds.compile(comp["f"])
    for scale in (None, 7.0, -1.0):
        if scale is not None:
            two[0].SCALE = two[1].SCALE = scale
        _same(eager["f"](torch.ones(2)), cf(torch.ones(2)))


def test_globals_called_inside_the_function_runs_it_eagerly_and_says_why():
    src = '''
    SCALE = 2.0
    def f(x):
        return x * globals()["SCALE"]
    '''
    cf = _run(src, ["", "SCALE = 3.0"], ["SCALE"], calls=3)
    assert any("globals()" in r for r in cf.stats.graph_breaks), cf.stats.graph_breaks


def test_a_helper_s_default_values_and_a_partial_s_keywords_are_guarded():
    src = '''
    import functools
    def helper(x, k=2.0, *, j=1.0):
        return x * k + j
    part = functools.partial(helper, k=3.0)
    def f(x):
        return helper(x) + part(x)
    '''
    _run(src, ["", "helper.__defaults__ = (7.0,)", "part.keywords['k'] = 11.0", "helper.__kwdefaults__['j'] = -1.0"],
         [], calls=5)


def test_a_global_iterator_the_function_advances_runs_eagerly_from_its_first_draw():
    src = '''
    import itertools
    cnt = itertools.count()
    it = iter([1.0, 2.0, 3.0, 4.0, 5.0])
    def f(x):
        return x * next(cnt) + next(it)
    '''
    cf = _run(src, [], ["next(cnt)", "next(it)"], calls=2)  # (the checks draw too, in both)
    assert any("advanced" in r for r in cf.stats.graph_breaks), cf.stats.graph_breaks


def test_a_deque_is_guarded_and_its_changes_replayed_like_a_list_s():
    src = '''
    import collections
    dq = collections.deque([1, 2, 3])
    def f(x):
        dq.rotate(1)
        return x * dq[0]
    '''
    _run(src, ["", "", "dq.append(7)", "dq.clear(); dq.extend([4, 5])"], ["list(dq)"], calls=5)


@pytest.mark.parametrize("read", [
    'getattr(h, "SCALE")',
    'sys.modules[h.__name__].SCALE',
    'importlib.import_module(h.__name__).SCALE',
    'vars(h)["SCALE"]',
    'h.__dict__.get("SCALE")',
    'getattr(h, "EXTRA", 1.0)',
    'getattr(getattr(h, "W"), "sum")()',
])
def test_a_module_attribute_read_by_name_at_run_time_is_guarded(two, read):
    """Not in any code's names: seen while the trace runs (outer._Watched)."""
    src = f'''
    import importlib, sys
    def f(x):
        return x * {read}
    '''
    _run(src, ["", "h.SCALE = 7.0", "h.EXTRA = 5.0", "h.W = torch.full((2,), 3.0)", "del h.EXTRA"], [],
         helpers=two, calls=6)


def test_a_module_read_through_an_object_is_guarded(two):
    src = '''
    class Holder:
        pass
    holder = Holder()
    holder.mod = h
    def f(x):
        return x * holder.mod.SCALE
    '''
    _run(src, ["", "h.SCALE = -3.0"], [], helpers=two)


def test_a_module_imported_for_the_first_time_by_the_trace_runs_once_eagerly(tmp_path, monkeypatch):
    """Its body ran under the trace, and its stores (`S = 2.0`) were replayed on every call: the
    caller's `S = 5.0` was undone by the next compiled call."""
    name = f"ds_outer_fresh_{abs(hash(tmp_path))}"
    (tmp_path / f"{name}.py").write_text("import torch\nS = 2.0\nW = torch.ones(2)\n"
                                         "def scaled(x):\n    return x * S * W\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ns = _world(f'''
    def f(x):
        import {name} as fresh
        return fresh.scaled(x) + fresh.S
    ''', {})
    try:
        cf = ds.compile(ns["f"], fullgraph=True)
        x = torch.ones(2)
        _same(cf(x), torch.full((2,), 4.0))  # (eagerly: the import ran once)
        mod = sys.modules[name]
        assert type(mod.W) is torch.Tensor and not isinstance(mod.W, FakeTensor)
        assert any("for the first time" in r for r in cf.stats.graph_breaks), cf.stats.graph_breaks
        w = mod.W
        for s in (5.0, 5.0, -1.0):
            mod.S = s
            _same(ns["f"](x), cf(x))
            assert mod.S == s and mod.W is w
        assert cf.stats.compiles >= 1
    finally:
        sys.modules.pop(name, None)


def test_an_attribute_of_a_module_not_in_sys_modules_read_by_name_is_guarded():
    src = '''
    import types
    h = types.ModuleType("ds_outer_adhoc")
    h.SCALE = 2.0
    def f(x):
        return x * getattr(h, "SCALE")
    '''
    _run(src, ["", "h.SCALE = 5.0", "h.SCALE = -1"], ["h.SCALE"])


def test_a_module_s_type_is_module_type_while_its_reads_are_watched(two):
    src = '''
    import types
    def f(x):
        return x * 2 if type(h) is types.ModuleType and isinstance(h, types.ModuleType) else x * 3
    '''
    _run(src, [], [], helpers=two, calls=2)


def test_a_class_attribute_read_through_a_module_is_guarded(two):
    """`h.Cfg.scale`: the module sees `Cfg` read, not `scale` (shared/bugs python_state repro_06)."""
    src = '''
    def f(x):
        return x * h.Cfg.scale
    '''
    _run(src, ["", "h.Cfg.scale = 7.0", "h.Cfg.scale = -1"], [], helpers=two)


def test_a_setattr_of_the_value_already_there_is_redone_after_the_caller_removes_it(two):
    """`setattr(h, "EXTRA", n)` is no store in the bytecode: a trace that found EXTRA already n left
    nothing to replay and guarded nothing (state fuzzer, seed 25112980)."""
    src = '''
    def f(x):
        setattr(h, "EXTRA", 5)
        return x + 1
    '''
    _run(src, ["", "", "del h.EXTRA", "", "h.EXTRA = 1"], ["getattr(h, 'EXTRA', None)"], helpers=two, calls=5,
         grow=True)


def test_a_builtin_given_for_the_trace_is_not_guarded_as_a_global(two):
    """`type` and `setattr` are ours in the user's modules while a trace runs; code met only while
    tracing (a hook, a custom op's setup_context) guarded them as globals, and every call after
    the trace recompiled (`G['setattr'] is <the same function> failed`)."""
    src = '''
    class Box:
        pass
    def late(x):  # not named by f: first met while the trace runs
        b = Box()
        setattr(b, "k", 2.0 if type(x) is torch.Tensor else 3.0)
        return x * b.k
    hooks = [late]
    def f(x):
        return hooks[0](x)
    '''
    cf = _run(src, [], [], calls=4)
    assert cf.stats.compiles == 1, cf.stats.recompile_reasons
