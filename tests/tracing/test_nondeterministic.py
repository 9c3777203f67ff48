"""Values that differ on every call (tracing/nondeterministic.py): drawn at run time, or the call
runs eagerly; never the trace's value again. Oracle: compiled vs eager with the generators seeded
alike before each call, and the next draw after it (the generator advanced as eager advances it)."""
import datetime
import os
import random
import secrets
import time
import uuid
from datetime import datetime as imported_datetime
from time import perf_counter as imported_perf_counter

import pytest
import torch

import dynashape as ds

try:
    import numpy as np
except ImportError:  # everything but the numpy cases works without it
    np = None


def _seed_all(i):
    random.seed(i)
    torch.manual_seed(i)
    if np is not None:
        np.random.seed(i)


def _next_draws():
    return random.random(), torch.rand(1).item(), np.random.rand() if np is not None else None


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def assert_same_as_eager(f, seed=_seed_all, sizes=(3, 5, 7, 9)):
    """Each call from the same generator states: the same result, and the same next draws."""
    cf = ds.compile(f)
    for i, n in enumerate(sizes):
        x = torch.zeros(n)
        _seed_all(i), seed(i)
        want = f(x), _next_draws()
        _seed_all(i), seed(i)
        got = cf(x), _next_draws()
        assert _same(got, want), (i, got, want)
    return cf


RANDOM_DRAWS = {  # (betavariate, expovariate, getrandbits were patched already)
    "triangular": lambda: random.triangular(),
    "lognormvariate": lambda: random.lognormvariate(0, 1),
    "paretovariate": lambda: random.paretovariate(1.5),
    "weibullvariate": lambda: random.weibullvariate(1, 1.5),
    "gammavariate": lambda: random.gammavariate(2, 1),
    "vonmisesvariate": lambda: random.vonmisesvariate(0, 1),
    "randbytes": lambda: len(set(random.randbytes(8))),
}


@pytest.mark.parametrize("name", sorted(RANDOM_DRAWS))
def test_every_draw_of_the_random_module_is_drawn_when_the_compiled_code_runs(name):
    # were missing from the patched names: drawn once while tracing, the trace's number on every call
    draw = RANDOM_DRAWS[name]
    assert_same_as_eager(lambda x: x + draw())


NUMPY_DRAWS = {
    "exponential": lambda: np.random.exponential(),
    "standard_normal": lambda: np.random.standard_normal(),
    "poisson": lambda: np.random.poisson(3.0),
    "binomial": lambda: np.random.binomial(10, 0.5),
    "beta": lambda: np.random.beta(2, 3),
    "gamma": lambda: np.random.gamma(2.0),
    "sample": lambda: np.random.sample(),
    "ranf": lambda: np.random.ranf(),
    "bytes": lambda: len(set(np.random.bytes(8))),
    "exponential(size=2)": lambda: float(np.random.exponential(size=2).sum()),
    "get_state": lambda: float(np.random.get_state()[1][0]),
}


@pytest.mark.parametrize("name", sorted(NUMPY_DRAWS))
def test_every_draw_of_numpy_random_is_drawn_when_the_compiled_code_runs(name):
    if np is None:
        pytest.skip("numpy is not installed")
    draw = NUMPY_DRAWS[name]
    assert_same_as_eager(lambda x: x + float(draw()))


def test_reseeding_inside_the_function_is_replayed_where_eager_reseeds():
    # random.seed ran once, while tracing: later calls did not reseed
    def f(x):
        a = random.random()
        random.seed(7)
        return x + a + random.random()

    cf = assert_same_as_eager(f)
    assert cf.stats.graph_breaks == []
    if np is not None:
        assert_same_as_eager(lambda x: (np.random.seed(7), x + np.random.rand())[1])


def test_a_random_generator_object_of_the_users_runs_eagerly():
    # its draws were frozen into the graph, and the object not advanced
    rng = random.Random(0)
    cf = assert_same_as_eager(lambda x: x + rng.random() + rng.randint(1, 6), seed=rng.seed)
    assert "a random.Random" in cf.stats.graph_breaks[0]
    g = ds.compile(lambda x, r: x + r.gauss(0, 1))  # an argument, its cached second gauss draw put back too
    for i in range(3):
        rng.seed(i)
        want = g(torch.zeros(3), rng).sum().item(), rng.getstate()
        rng.seed(i)
        rng.gauss(0, 1)
        assert rng.getstate() == want[1]
    assert g.stats.graph_breaks and vars(random.Random).get("random") is None  # (the class is left alone)


def test_a_numpy_generator_the_function_draws_from_is_put_back_and_runs_eagerly():
    if np is None:
        pytest.skip("numpy is not installed")
    gen = np.random.default_rng(0)
    state = np.random.RandomState(0)

    def seed(i):
        gen.bit_generator.state = np.random.default_rng(i).bit_generator.state
        state.seed(i)

    def draws():
        return float(gen.random()), float(state.rand())

    cf = assert_same_as_eager(lambda x: x + float(gen.random()) + float(gen.integers(0, 9)), seed=seed)
    assert "numpy.Generator" in cf.stats.graph_breaks[0]
    for fn in (lambda x: x + state.rand(), lambda x: x + torch.from_numpy(gen.normal(size=x.shape))):
        cf = ds.compile(fn)
        for i, n in enumerate((3, 5, 7)):
            seed(i)
            want = fn(torch.zeros(n)), draws()
            seed(i)
            got = cf(torch.zeros(n)), draws()
            assert _same(got, want)
        assert cf.stats.graph_breaks
    cf = assert_same_as_eager(lambda x: x + float(np.random.default_rng(3).random()))  # made here, seeded:
    assert cf.stats.graph_breaks == []  # the same numbers on every call, as in the graph


def test_torch_random_state_read_in_the_function_follows_manual_seed_between_calls():
    # torch.initial_seed() and get_rng_state() gave the trace's seed and state on every call
    g = torch.Generator()
    for f in (lambda x: x + torch.initial_seed(), lambda x: x + torch.get_rng_state()[:8].float().sum(),
              lambda x: x + torch.random.get_rng_state()[:8].float().sum()):
        cf = assert_same_as_eager(f)
        assert "inside the compiled function reads or reseeds the random generator" in cf.stats.graph_breaks[0]
    cf = assert_same_as_eager(lambda x: (g.manual_seed(5), x + torch.rand(x.shape, generator=g))[1],
                              seed=g.manual_seed)
    assert "torch.Generator" in cf.stats.graph_breaks[0]


def test_manual_seed_in_a_call_that_breaks_later_leaves_the_generator_as_eager_finds_it():
    # the trace ran torch.manual_seed(0) itself: the eager call after the break drew `a` from seed 0
    def f(x):
        a = torch.rand(1)
        torch.manual_seed(0)
        if torch.rand(1).item() > 0.5:
            return x + a
        return x - a

    cf = assert_same_as_eager(f, seed=lambda i: torch.manual_seed(100 + i))
    assert cf.stats.graph_breaks


CLOCKS = {  # what it reads, whether two calls surely differ, what the graph break names
    "datetime.datetime.now": (lambda: datetime.datetime.now(), True, "datetime.datetime.now"),
    "from datetime import datetime": (lambda: imported_datetime.now(), True, "datetime.datetime.now"),
    "from time import perf_counter": (lambda: imported_perf_counter(), True, "time.perf_counter"),
    "uuid.uuid4": (lambda: uuid.uuid4(), True, "uuid.uuid4"),
    "uuid.uuid1": (lambda: uuid.uuid1(), True, "uuid.uuid1"),
    "os.urandom": (lambda: os.urandom(8), True, "os.urandom"),
    "time.thread_time_ns": (lambda: time.thread_time_ns(), False, "time.thread_time_ns"),
    "time.strftime": (lambda: time.strftime("%S"), False, "time.strftime"),
    "secrets.token_hex": (lambda: secrets.token_hex(8), True, "os.urandom"),
    "secrets.randbelow": (lambda: secrets.randbelow(2 ** 60), True, "os.urandom"),
}


@pytest.mark.parametrize("name", sorted(CLOCKS))
def test_clocks_and_entropy_are_read_on_every_call(name):
    # datetime.now(), uuid4(), os.urandom(): the trace's value on every call (date.today() reads
    # time.time, which broke already)
    read, differs, says = CLOCKS[name]
    cf = ds.compile(lambda x: (x * 2, read()))
    seen = [cf(torch.ones(n))[1] for n in (3, 5, 7)]
    assert not differs or len(set(seen)) == len(seen), seen
    reason, _, where = cf.stats.graph_breaks[0].partition(" at ")
    assert says + "()" in reason and where.startswith("test_nondeterministic.py:")


def test_a_time_function_reads_the_clock_only_when_its_time_is_left_out():
    cf = ds.compile(lambda x: (x + time.localtime(86400 * 365).tm_year, time.strftime("%Y", time.gmtime(0))))
    assert cf(torch.zeros(3))[1] == "1970" and cf.stats.graph_breaks == []
    cf = ds.compile(lambda x: (x + 1, time.asctime()))
    cf(torch.zeros(3))
    assert "time.asctime()" in cf.stats.graph_breaks[0]


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_the_call_stack_read_in_the_function_is_the_call_s(backend):
    """`inspect.currentframe()`, `inspect.stack()`, `traceback.extract_stack()` answered with the trace's
    frames (whose locals are FakeTensors), baked into the graph: the call runs eagerly."""
    import inspect
    import traceback

    def f(x):
        fr = inspect.currentframe()
        top = inspect.stack()[0]
        return x * 2, fr.f_locals["x"] is x, top.function, traceback.extract_stack()[-1].name
    cf = ds.compile(f, backend=backend)
    for n in (3, 4, 5):
        x = torch.randn(n)
        got, want = cf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] == (True, "f", "f")
    assert any("inspect.currentframe()" in b for b in cf.stats.graph_breaks)
