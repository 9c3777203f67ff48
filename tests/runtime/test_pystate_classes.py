"""The Python state of classes, `__slots__` objects, modules' private attributes, mutable default
arguments and callable objects (runtime/pystate_classes.py, pystate.py, compile.py): read,
changed and replayed as eager reads and changes it, with no stand-in of the trace left behind.
Every case here was silently wrong before (found by a hunt by hand, 2026-11-28)."""
import pytest
import torch

import dynashape as ds
from dynashape.symbolic.symtypes import SymBase
from dynashape.tracing.fake import FakeTensor

SIZES = (3, 5, 7, 5, 9)


def _no_trace_values(*objs):
    for o in objs:
        items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else [o]
        for x in items:
            assert not isinstance(x, (FakeTensor, SymBase)), f"a trace value was left behind: {x!r}"
            if isinstance(x, torch.Tensor):
                assert x.device.type != "meta"


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._steps = 0
        self._scale = 1.0
        self._kv = []

    def forward(self, x):
        self._steps += 1
        self._kv.append(x.sum() * 2)
        return x * self._steps * self._scale + torch.stack(self._kv).sum()


def test_a_module_s_private_attributes_are_state():
    """`self._steps += 1` stuck at the trace's value, `self._scale` changed between calls was read
    stale, and `self._kv.append(...)` left a FakeTensor in the module: `_`-named attributes were
    neither guarded nor walked."""
    me, mc = _Counter(), _Counter()
    cf = ds.compile(mc)
    for i, n in enumerate(SIZES):
        me._scale = mc._scale = float(1 + i % 2)
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), me(x))
        assert mc._steps == me._steps
        assert len(mc._kv) == len(me._kv)
        _no_trace_values(mc._kv)


def _make_class_counter():
    class Counter:
        count = 0
        hist = []
        scale = 1.0

        def __call__(self, x):
            type(self).count += 1
            self.hist.append(x.shape[0])
            return x * self.scale + self.count
    return Counter()


def test_a_class_s_attributes_are_state_and_a_callable_object_is_its_call():
    """`type(self).count += 1` stopped counting and `self.hist.append(x.shape[0])` on a class-level
    list left Sym(s0) in it; a callable object compiled was never walked at all."""
    oe, oc = _make_class_counter(), _make_class_counter()
    cf = ds.compile(oc)
    for i, n in enumerate(SIZES):
        if i == 3:
            type(oe).scale = type(oc).scale = 2.0
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), oe(x))
        assert (type(oc).count, type(oc).hist) == (type(oe).count, type(oe).hist)
        assert all(type(v) is int for v in type(oc).hist)
    ds.explain(cf)  # (a compiled callable object is named by its __call__)


class _Slotted:
    __slots__ = ("n", "hist", "unset")

    def __init__(self):
        self.n = 0
        self.hist = []


def test_a_slots_object_is_walked_slot_by_slot():
    def make():
        o = _Slotted()

        def f(x):
            o.n += 1
            o.hist.append(x.shape[0])
            return x * o.n
        return f, o
    (fe, oe), (fc0, oc) = make(), make()
    cf = ds.compile(fc0)
    for n in SIZES:
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), fe(x))
        assert (oc.n, oc.hist) == (oe.n, oe.hist)
        assert all(type(v) is int for v in oc.hist)
        assert not hasattr(oc, "unset")


def _defaults():
    def f(x, a=1, acc=[], /, d={}, *, kw=[]):  # noqa: B006 (the point)
        acc.append(x.shape[0])
        d[x.shape[0]] = a
        kw.append(x.sum())
        return x * len(acc) + a + len(d)
    return f


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_mutable_default_argument_is_changed_as_eager_changes_it(dynamic):
    """`def f(x, acc=[])`: the function appended the trace's SymInt (or FakeTensor) to its own
    default list, which nothing snapshotted or replayed."""
    fe, fc0 = _defaults(), _defaults()
    cf = ds.compile(fc0, dynamic=dynamic)
    for n in SIZES:
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), fe(x))
        assert fc0.__defaults__[:2] == fe.__defaults__[:2]
        assert fc0.__defaults__[2] == fe.__defaults__[2]
        got, want = fc0.__kwdefaults__["kw"], fe.__kwdefaults__["kw"]
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
        _no_trace_values(fc0.__defaults__[1], fc0.__defaults__[2], got)


# ---- found by a second hunt (nn.Module and autograd features): what a trace that breaks leaves behind,
# and state no container held

def _breaks(x):
    return x + len(str(x)) * 0  # a tensor formatted into a string: a graph break, the call runs eagerly


class _HookInForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.calls = []

    def forward(self, x):
        h = self.lin.register_forward_hook(lambda m, i, o: (self.calls.append(1), o + 1)[1])
        y = _breaks(self.lin(x))
        h.remove()
        return y


class _Parametrized(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        import torch.nn.utils.parametrize as P
        if not P.is_parametrized(self.lin):
            P.register_parametrization(self.lin, "weight", _Symmetric())
        return _breaks(self.lin(x))


class _Symmetric(torch.nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).T


@pytest.mark.parametrize("make", [_HookInForward, _Parametrized])
def test_a_trace_that_breaks_leaves_no_hook_or_class_change_behind(make):
    """A hook a forward registered (and a parametrization's class swap) in a trace that then broke
    stayed: the eager run registered its own, and the hook ran twice."""
    torch.manual_seed(0)
    me = make()
    mc = make()
    mc.load_state_dict(me.state_dict())
    cf = ds.compile(mc)
    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(cf(x), me(x))
        assert type(mc.lin).__name__ == type(me.lin).__name__
        assert len(mc.lin._forward_hooks) == len(me.lin._forward_hooks)
        assert len(getattr(mc, "calls", ())) == len(getattr(me, "calls", ()))


def test_a_class_assigned_in_the_function_runs_eagerly():
    class A:
        k = 2

    class B:
        k = 3

    def make():
        o = A()

        def f(x):
            y = x * o.k
            o.__class__ = B if o.__class__ is A else A
            return y
        return f, o
    (fe, oe), (fc0, oc) = make(), make()
    cf = ds.compile(fc0)
    for n in SIZES:
        x = torch.ones(n)
        torch.testing.assert_close(cf(x), fe(x))
        assert type(oc) is type(oe)
    assert "changes the class of" in cf.stats.graph_breaks[0]


def test_a_tensor_s_own_attributes_are_not_baked():
    def reads(x):
        return x * (2 if getattr(x, "flag", False) else 3)
    cf = ds.compile(reads)
    x = torch.ones(2)
    torch.testing.assert_close(cf(x), reads(x))
    x.flag = True
    torch.testing.assert_close(cf(x), reads(x))

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            self.lin.weight.seen = self.lin.weight.__dict__.get("seen", 0) + 1
            return self.lin(x)
    me, mc = M(), M()
    mc.load_state_dict(me.state_dict())
    cm = ds.compile(mc)
    for _ in range(3):
        x = torch.randn(2)
        torch.testing.assert_close(cm(x), me(x))
        assert mc.lin.weight.seen == me.lin.weight.seen


class _Flagged(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x):
        k = 2 if getattr(self.lin.weight, "flag", 0) else 1
        return self.lin(x) * k * self.scale * getattr(self.scale, "meta", {"k": [1]})["k"][0]


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_a_parameter_s_or_buffer_s_own_attributes_read_in_forward_are_guarded(backend):
    """`getattr(self.lin.weight, "flag", 0)` read a real parameter's attribute, which no guard
    checked: set after the first call, the compiled module kept the trace's branch. Changed in
    place (a list in a dict), replaced (`__dict__ = ...`), deleted: each retraces, and nothing
    else does."""
    me, mc = _Flagged(), _Flagged()
    mc.load_state_dict(me.state_dict())
    cm = ds.compile(mc, backend=backend)
    changes = [lambda m: None, lambda m: setattr(m.lin.weight, "flag", 1), lambda m: None,
               lambda m: setattr(m.scale, "meta", {"k": [3]}), lambda m: m.scale.meta["k"].__setitem__(0, 4),
               lambda m: setattr(m.scale, "__dict__", {"meta": {"k": [5]}}), lambda m: delattr(m.lin.weight, "flag"),
               lambda m: None]
    for change in changes:
        change(me), change(mc)
        x = torch.randn(2, 3)
        torch.testing.assert_close(cm(x), me(x))
    assert cm.stats.compiles == 6, cm.stats.recompile_reasons
    assert "lin._parameters['weight'].flag" in cm.stats.recompile_reasons[0]


def test_a_global_tensor_s_own_attributes_are_guarded():
    T = [torch.ones(3)]

    def f(x):
        return x * (2 if getattr(T[0], "flag", 0) else 1) + T[0]
    cf = ds.compile(f)
    x = torch.ones(3)
    torch.testing.assert_close(cf(x), f(x))
    T[0].flag = 1
    torch.testing.assert_close(cf(x), f(x))


def _descriptor_class():
    class Scale:
        def __init__(self):
            self.value, self.reads = 2.0, 0

        def __get__(self, obj, owner=None):
            self.reads += 1
            return self.value

    class Cfg:
        scale = Scale()
    return Cfg


def test_a_user_descriptor_s_state_is_guarded_and_its_changes_replayed():
    E, C = _descriptor_class(), _descriptor_class()

    def f(x, cfg):
        return x * cfg.scale
    cf = ds.compile(f)
    for _ in range(4):
        x = torch.ones(2)
        torch.testing.assert_close(cf(x, C()), f(x, E()))
        assert C.__dict__["scale"].reads == E.__dict__["scale"].reads
        E.__dict__["scale"].value += 1
        C.__dict__["scale"].value += 1


def _helper_defaults():
    def remember(v, seen=[]):  # noqa: B006
        seen.append(v.shape[0])
        return v * len(seen)

    def tally(v, *, k=[0]):  # noqa: B006
        k[0] += 1
        return v + k[0]

    def f(x):
        return remember(x) + tally(x)
    return f, remember, tally


def test_a_helper_s_mutable_defaults_and_a_list_inside_a_plain_dict_are_state():
    """A guard compared `{'k': [0]}` with a shallow copy of itself (the same inner list, changed in
    place with it): a helper's `k=[0]` default counted once."""
    (fe, re_, te), (fc0, rc, tc) = _helper_defaults(), _helper_defaults()
    cf = ds.compile(fc0)
    for n in (2, 4, 3, 3):
        x = torch.zeros(n)
        torch.testing.assert_close(cf(x), fe(x))
        assert rc.__defaults__ == re_.__defaults__ and tc.__kwdefaults__ == te.__kwdefaults__


def test_defaults_replaced_after_compile_are_the_ones_a_call_gets():
    """`f.__defaults__ = ([],)` after ds.compile: the call bound the signature's defaults, read at
    compile time, and replayed the appends on the old list (found by the state fuzzer, seed 25112986)."""
    def make():
        def f(x, acc=[], *, kw=[]):  # noqa: B006
            acc.append(x.shape[0])
            kw.append(1)
            return x * len(acc)
        return f
    fe, fc0 = make(), make()
    cf = ds.compile(fc0)
    for i, n in enumerate((3, 5, 7, 5)):
        if i == 2:
            fe.__defaults__, fc0.__defaults__ = ([9],), ([9],)
            fe.__kwdefaults__, fc0.__kwdefaults__ = {"kw": []}, {"kw": []}
        x = torch.ones(n)
        torch.testing.assert_close(cf(x), fe(x))
        assert fc0.__defaults__ == fe.__defaults__ and fc0.__kwdefaults__ == fe.__kwdefaults__
