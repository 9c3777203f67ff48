"""What a trace reads and changes in Python: guarded, restored after the trace, replayed once per call
(runtime/pystate.py). Oracle: the compiled function against eager, on the state and the result."""
import dataclasses
import functools
import os
import random
import types
import weakref

import pytest
import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor


@pytest.fixture(autouse=True)
def _fresh():
    ds.reset()
    yield


def _real(t):
    return type(t) is torch.Tensor and t.device.type != "meta"


# ---------------------------------------------------------------- side effects, once, at run time
class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.last = None
        self.history = []

    def forward(self, x):
        y = self.lin(x)
        self.last = y  # an attribute assignment
        self.history.append(y.sum())  # a list attribute mutated in place
        return y


def test_module_attribute_and_list_mutations_are_replayed_once_per_call_with_real_values():
    m = Counter()
    cm = ds.compile(m)
    xs = [torch.randn(2, 3) for _ in range(3)]
    outs = [cm(x) for x in xs]
    assert len(m.history) == 3 and all(_real(h) for h in m.history)
    assert torch.equal(m.last, outs[-1]) and _real(m.last)
    for h, x in zip(m.history, xs):
        torch.testing.assert_close(h, m.lin(x).sum())
    # (the list's length is guarded, as the trace may have iterated over it: a list that grows every
    # call recompiles every call)


def test_a_passed_in_object_is_updated_like_eager_every_call():
    class Cache:
        def __init__(self):
            self.keys = None

    def step(x, cache):
        cache.keys = x if cache.keys is None else torch.cat([cache.keys, x], 1)
        return cache.keys.sum(1)

    eager, comp = Cache(), Cache()
    cf = ds.compile(step)
    for _ in range(5):
        x = torch.randn(2, 1, 4)
        torch.testing.assert_close(cf(x, comp), step(x, eager))
        torch.testing.assert_close(comp.keys, eager.keys)
    assert cf.stats.compiles <= 3 and cf.stats.graph_breaks == []


def test_dict_argument_mutation_is_replayed():
    def f(x, d):
        d["y"] = x * 2
        d.pop("gone", None)
        return x + 1

    cf = ds.compile(f)
    d = {"gone": 1}
    cf(torch.ones(2), d)
    assert set(d) == {"y"} and torch.equal(d["y"], torch.full((2,), 2.0))
    d2 = {"gone": 1}
    cf(torch.ones(2) * 3, d2)
    assert torch.equal(d2["y"], torch.full((2,), 6.0))


def test_a_global_list_appended_to_is_appended_once_per_call():
    cf = ds.compile(_append_global)
    LOG.clear()
    cf(torch.ones(1))
    cf(torch.ones(1) * 2)
    assert len(LOG) == 2 and [t.item() for t in LOG] == [2.0, 3.0]


LOG: list = []


def _append_global(x):
    LOG.append(x + 1)
    return x


# ---------------------------------------------------------------- restored after the trace
class Anchors(torch.nn.Module):  # torchvision AnchorGenerator, reduced
    def __init__(self):
        super().__init__()
        self.cell_anchors = [torch.arange(4.0)]

    def forward(self, x, branch=False):
        self.cell_anchors = [a.to(dtype=x.dtype) for a in self.cell_anchors]
        out = x + self.cell_anchors[0]
        if branch and out.sum() > 0:  # data-dependent: a graph break, the call runs eagerly
            return out
        return -out


@pytest.mark.parametrize("branch", [False, True])
def test_module_state_is_restored_after_a_trace_that_breaks_or_succeeds(branch):
    m = Anchors()
    want = m(torch.ones(4), branch)
    cm = ds.compile(m)
    got = cm(torch.ones(4), branch)
    assert torch.equal(got, want)
    assert _real(m.cell_anchors[0])
    assert torch.equal(m(torch.ones(4), branch), want)
    assert (len(cm.stats.graph_breaks) == 1) == branch


def test_state_is_restored_after_a_trace_that_raises():
    class Bad(torch.nn.Module):
        def forward(self, x):
            self.tmp = x * 2
            raise ValueError("the program's own error")

    m = Bad()
    with pytest.raises(ValueError, match="the program's own error"):
        ds.compile(m)(torch.ones(2))
    # the error is eager's own (the call ran eagerly to raise it): the module is as eager leaves it,
    # with a real tensor, nothing of the trace
    assert type(m.tmp) is torch.Tensor and torch.equal(m.tmp, torch.ones(2) * 2)


# ---------------------------------------------------------------- everything read is guarded
class State(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.pads = [1, 1]
        self.cfg = types.SimpleNamespace(k=2.0)
        self.opts = {"k": 2.0}
        self.register_buffer("b", torch.zeros(1))

    def forward(self, x):
        return torch.nn.functional.pad(x, self.pads) * self.scale * self.cfg.k * self.opts["k"] + self.b


@pytest.mark.parametrize("change", [
    lambda m: m.pads.__setitem__(0, 3), lambda m: m.pads.extend([2, 2]),
    lambda m: m.__dict__.__setitem__("scale", 3.0), lambda m: setattr(m.cfg, "k", 5.0),
    lambda m: m.opts.__setitem__("k", 7.0), lambda m: m._buffers.__setitem__("b", torch.ones(1)),
], ids=["list item", "list grows", "__dict__ write", "sub-object", "dict attribute", "_buffers"])
def test_module_state_changed_without_setattr_is_seen(change):
    m = State()
    cm = ds.compile(m)
    x = torch.ones(2, 3)
    cm(x)
    change(m)
    want = m(x)
    got = cm(x)
    assert got.shape == want.shape and torch.equal(got, want)
    assert cm.stats.compiles == 2 and cm.stats.recompile_reasons


@dataclasses.dataclass
class Cfg:
    scale: float = 2.0
    flip: bool = False


def test_a_mutated_dataclass_argument_recompiles_and_an_equal_new_one_does_not():
    def f(x, cfg):
        y = x * cfg.scale
        return y.flip(0) if cfg.flip else y

    cf = ds.compile(f)
    cfg, x = Cfg(), torch.arange(3.0)
    cf(x, cfg)
    cf(x, Cfg())  # another object with the same state: same graph
    assert cf.stats.compiles == 1
    cfg.scale, cfg.flip = 10.0, True
    assert torch.equal(cf(x, cfg), f(x, cfg))
    assert cf.stats.compiles == 2


def test_bound_methods_guard_their_self():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    class Obj:
        k = None

        def __init__(self):
            self.k = 2.0

        def fn(self, x):
            return x * self.k

    m, o = M(), Obj()
    cm, co = ds.compile(m.forward), ds.compile(o.fn)
    cm(torch.ones(2)), co(torch.ones(2))
    m.scale, o.k = 5.0, 7.0
    assert cm(torch.ones(2)).tolist() == [5.0, 5.0]
    assert co(torch.ones(2)).tolist() == [7.0, 7.0]


def test_compile_as_a_method_decorator_binds_self():
    class M(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        @ds.compile
        def forward(self, x):
            return x * self.k

    a, b = M(2.0), M(3.0)
    assert a(torch.ones(1)).item() == 2.0 and b(torch.ones(1)).item() == 3.0
    a.k = 4.0
    assert a(torch.ones(1)).item() == 4.0
    assert type(M.__dict__["forward"]).__name__ == "CompiledFunction"


def test_a_decorated_forward_is_called_the_way_the_user_called_it():
    def add_kwarg(func):
        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            if kwargs.get("use_cache") is None:
                kwargs["use_cache"] = False
            return func(self, *args, **kwargs)
        return wrapper

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        @add_kwarg
        def forward(self, x, mask=None, use_cache=None):
            return self.lin(x) + (1 if use_cache else 0)

    m = Model()
    x = torch.randn(2, 4)
    cm = ds.compile(m)
    assert torch.equal(cm(x), m(x))
    assert torch.equal(cm(x, None), m(x, None))
    assert torch.equal(cm(x, use_cache=True), m(x, use_cache=True))


G = 2.0


def _read_partial(x, k):
    return x * k * G


def test_module_class_and_partial_globals_are_guarded():
    import tests.runtime.test_pystate as here
    cf = ds.compile(functools.partial(_read_partial, k=1.0))
    assert cf(torch.ones(1)).item() == 2.0
    here.G = 5.0
    try:
        assert cf(torch.ones(1)).item() == 5.0
    finally:
        here.G = 2.0
    cls = ds.compile(_read_class_attr)
    assert cls(torch.ones(1)).item() == 2.0
    Cfg.scale = 6.0
    try:
        assert cls(torch.ones(1)).item() == 6.0
    finally:
        Cfg.scale = 2.0


def _read_class_attr(x):
    return x * Cfg.scale


def test_os_environ_reads_are_guarded():
    def f(x):
        return x * float(os.environ.get("DS_TEST_SCALE", "1"))

    cf = ds.compile(f)
    assert cf(torch.ones(1)).item() == 1.0
    os.environ["DS_TEST_SCALE"] = "3"
    try:
        assert cf(torch.ones(1)).item() == 3.0
    finally:
        del os.environ["DS_TEST_SCALE"]
    assert cf.stats.compiles == 2


def test_random_in_the_function_is_drawn_at_run_time_not_a_constant():
    # issue 22: as torch.compile, Python's draws happen when the compiled code runs, in eager's order
    def f(x):
        return x * random.uniform(0, 1) + random.randint(1, 6)

    cf = ds.compile(f)
    for seed in range(4):
        random.seed(seed)
        want = [f(torch.ones(1)).item() for _ in range(3)] + [random.random()]
        random.seed(seed)
        got = [cf(torch.ones(1)).item() for _ in range(3)] + [random.random()]
        assert got == want
    assert cf.stats.compiles == 1 and cf.stats.graph_breaks == []


def test_what_python_decides_from_a_random_draw_is_a_graph_break_that_says_why():
    def f(x):
        if random.random() < 0.5:
            return x + 1
        return x - 1

    def g(x):
        return x * random.choice([1.0, 2.0])

    for fn in (f, g):
        cf = ds.compile(fn)
        random.seed(3)
        want = [fn(torch.ones(1)).item() for _ in range(6)]
        random.seed(3)
        assert [cf(torch.ones(1)).item() for _ in range(6)] == want
        assert "random." in cf.stats.graph_breaks[0] and "test_pystate.py" in cf.stats.graph_breaks[0]


def test_numpy_scalar_draws_are_drawn_at_run_time():
    np = pytest.importorskip("numpy")

    def f(x):
        return x * np.random.normal(0, 1) + np.random.rand()

    cf = ds.compile(f)
    np.random.seed(0)
    want = [f(torch.ones(2)) for _ in range(3)]
    np.random.seed(0)
    got = [cf(torch.ones(2)) for _ in range(3)]
    torch.testing.assert_close(got, want)
    assert cf.stats.graph_breaks == []


def test_a_closure_argument_is_guarded_by_code_and_contents_not_identity():
    def make(k):
        return lambda x: x * k

    def apply(fn, x):
        return fn(x)

    cf = ds.compile(apply)
    assert cf(make(2.0), torch.ones(1)).item() == 2.0
    assert cf(make(2.0), torch.ones(1)).item() == 2.0  # a new closure, same code and contents: no recompile
    assert cf.stats.compiles == 1
    assert cf(make(3.0), torch.ones(1)).item() == 3.0
    assert cf.stats.compiles == 2


# ---------------------------------------------------------------- one cache per code object
def _double(x):
    return x * 2


def test_compiling_the_same_function_twice_shares_the_cache():
    for _ in range(3):
        cf = ds.compile(_double)
        cf(torch.ones(3))
    assert len(cf.entries) == 1


def test_a_newly_marked_dynamic_dim_recompiles_instead_of_reusing_a_static_entry():
    cf = ds.compile(_double)
    cf(torch.ones(3))
    x = torch.ones(3)
    ds.mark_dynamic(x, 0)
    cf(x)
    assert len(cf.entries) == 2 and "L['x'].size()[0]" in cf.entries[0].dynamic_sources


def test_no_fake_tensor_is_left_in_arguments_modules_or_globals():
    m = Counter()
    cm = ds.compile(m)
    cm(torch.randn(2, 3))
    for v in list(vars(m).values()) + m.history + [LOG]:
        assert not isinstance(v, FakeTensor)


def test_a_closed_over_int_of_a_function_argument_becomes_dynamic_instead_of_recompiling():
    def apply(fn, x):
        return fn(x)

    cf = ds.compile(apply)
    for k in (2, 3, 4, 5, 7):
        g = (lambda kk: (lambda x: x * kk + x.shape[0] % kk))(k)
        assert torch.equal(cf(g, torch.ones(3)), g(torch.ones(3)))
    assert cf.stats.compiles == 2
    assert "type(L['fn'].__closure__[0].cell_contents) is int" in cf.entries[0].guards


def test_a_class_attribute_read_through_self_is_guarded():
    class M(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * self.scale

    m = M()
    cm = ds.compile(m)
    assert cm(torch.ones(1)).item() == 2.0
    M.scale = 3.0
    assert cm(torch.ones(1)).item() == 3.0


def test_a_decorated_function_recompiles_when_called_another_way_and_says_so():
    def default_scale(func):
        @functools.wraps(func)
        def wrapper(x, *args, **kwargs):
            kwargs.setdefault("scale", 2.0)  # sees only what was passed by keyword
            return func(x, *args, **kwargs)
        return wrapper

    @default_scale
    def f(x, scale=None):
        return x * scale

    cf = ds.compile(f)
    assert cf(torch.ones(1)).item() == 2.0
    assert cf(torch.ones(1), scale=3.0).item() == 3.0
    assert "keywords scale" in cf.stats.recompile_reasons[0]

    plain = ds.compile(_double)
    plain(torch.ones(2))
    plain(x=torch.ones(2))  # a plain function: how it is called does not matter
    assert len(plain.entries) == 1


def test_a_list_inside_a_tuple_argument_is_mutated_like_eager():
    def f(x, pair):
        pair[1].append(x * 2)
        return x + 1

    cf = ds.compile(f)
    acc = []
    cf(torch.ones(1), (0, acc))
    assert len(acc) == 1 and _real(acc[0]) and acc[0].item() == 2.0


@pytest.mark.parametrize("write", ["__dict__", "_buffers", "__dict__ replaced", "none"])
def test_writes_to_module_dicts_inside_the_trace_are_restored_and_replayed(write):
    # the trace's snapshot skips comparing dicts whose version tags did not move (guards/native.py):
    # a write of any kind must still be found, undone after the trace and replayed by each call
    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(2))
            self.calls = 0

        def forward(self, x):
            if write == "__dict__":
                self.__dict__["calls"] = self.calls + 1
            elif write == "_buffers":
                self._buffers["b"] = self.b + x
            elif write == "__dict__ replaced":
                object.__setattr__(self, "__dict__", dict(self.__dict__, calls=self.calls + 1))
            return x * 2 + self.b

    m, ref = W(), W()
    cm = ds.compile(m)
    for _ in range(3):
        x = torch.randn(2)
        torch.testing.assert_close(cm(x), ref(x))
        assert m.calls == ref.calls and torch.equal(m.b, ref.b)
        assert _real(m.b) and not any(isinstance(v, FakeTensor) for v in vars(m).values())


# ---------------------------------------------------------------- iterators the trace can reach
def _numbers():
    yield from (float(i) for i in range(100))


class _Holder:
    pass


@pytest.mark.parametrize("where", ["attr", "list", "dict", "cell"])
@pytest.mark.parametrize("make", [_numbers, lambda: iter([1.0, 2.0, 3.0, 4.0, 5.0]),
                                  lambda: __import__("itertools").count(3)],
                         ids=["generator", "list_iterator", "count"])
def test_an_iterator_the_function_draws_from_gives_eager_s_draws_from_the_first_call(where, make):
    """Watched in place, a generator held in an attribute was advanced by the trace: the first call's
    eager run then drew the second element (silently wrong)."""
    def world():
        it = make()
        h = _Holder()
        h.it, box, d = it, [it], {"it": it}

        def draw():
            return next(it)
        return {"attr": lambda: next(h.it), "list": lambda: next(box[0]), "dict": lambda: next(d["it"]),
                "cell": draw}[where], (h, box, d)

    draw_e, keep_e = world()
    draw_c, keep_c = world()

    def f(draw, x):
        return x * draw()
    cf = ds.compile(f)
    for _ in range(3):
        torch.testing.assert_close(cf(draw_c, torch.ones(2)), f(draw_e, torch.ones(2)))
    assert draw_c() == draw_e()  # nothing left of the trace in the holders: the same next element
    assert cf.stats.graph_breaks


def test_a_generator_s_stand_in_answers_type_and_isinstance_as_the_generator():
    h = _Holder()
    h.it = _numbers()

    def f(x):
        kind = (type(h.it) is types.GeneratorType, isinstance(h.it, types.GeneratorType))
        return x + 1 if kind == (True, True) else x - 1
    cf = ds.compile(f)
    torch.testing.assert_close(cf(torch.ones(2)), f(torch.ones(2)))
    assert type(h.it) is types.GeneratorType and next(h.it) == 0.0


# ---- weak containers (WeakValueDictionary, WeakKeyDictionary, WeakSet): walked as objects, their refs
# kept the trace's stand-ins (a FakeTensor in the user's container after a compiled call)

_LAST = weakref.WeakValueDictionary()
_SEEN = weakref.WeakKeyDictionary()
_ALIVE = weakref.WeakSet()


def _weak_stores(x):
    y = x * 2
    _LAST["y"] = y
    _ALIVE.add(y)
    return y


def _weak_keyed(x):
    _SEEN[x] = x.shape[0]
    return x + 1


def test_weak_containers_hold_the_call_s_tensors():
    cf = ds.compile(_weak_stores)
    for n in (3, 5, 7):
        y = cf(torch.ones(n))
        assert _LAST.get("y") is y and any(v is y for v in _ALIVE)
        assert all(type(v) is torch.Tensor for v in list(_LAST.values()) + list(_ALIVE))
    cg = ds.compile(_weak_keyed)
    xs = [torch.ones(n) for n in (3, 5, 7)]
    for x in xs:
        torch.testing.assert_close(cg(x), x + 1)
        keys = [r() for r in _SEEN.keyrefs()]
        assert any(k is x for k in keys) and all(type(k) is torch.Tensor for k in keys)
    assert "a WeakKeyDictionary" in cg.stats.graph_breaks[0]
