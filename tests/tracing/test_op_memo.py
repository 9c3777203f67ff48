"""A call met again in one trace with the same symbolic arguments (tracing/op_memo.py): the graph,
guards and results must be those of a trace that runs every call through its meta kernel and rule."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dynashape as ds
from dynashape.tracing import op_memo


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(8, 8), nn.ReLU())])


def _blocks():
    torch.manual_seed(0)
    ln = nn.ModuleList(nn.LayerNorm(8) for _ in range(3))
    fc = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def f(x):
        for a, b in zip(ln, fc):
            x = x + b(a(x)).softmax(-1) * 0.5
        return x
    return f


def _mixed(x, y):
    # the same op on an input and on computed tensors of the same shape, on one tensor twice,
    # with scalars that differ in type, sign of zero and value, and under another grad mode
    a, b = x + y, x + x
    c = a * 2, a * 2.0, a * -0.0, a * 0.0, b.sum(-1), a.sum(-1), a.sum(-1, keepdim=True)
    with torch.enable_grad():
        d = a + b
    e = torch.cat([a, b]), torch.cat([b, a]), x.new_zeros(x.shape[0], 3), x.new_zeros(x.shape[0], 3)
    return c, d, e, x.repeat(2, 1), x.repeat(3, 1), x[: x.shape[0] - 1] + 1, x[: x.shape[0] - 1] + 1


def _unsqueezed(x):
    # views (unsqueeze, t) and reshape of a view are never memoized: their history is their input's
    return [x.unsqueeze(0) + 1, x.unsqueeze(0) + 1, x.t().reshape(-1).sum(), x.t().reshape(-1).sum()]


def _inplace(x, y):
    # an in-place op on a replayed result: it is fresh memory (no aliasing guards between x and y),
    # as it is for the first result
    a, b = x * 2, y * 2
    b.add_(1)
    return a, b


CASES = [
    pytest.param(_mlp, lambda n: (torch.randn(n, 8),), id="mlp"),
    pytest.param(_blocks, lambda n: (torch.randn(n, 8),), id="blocks"),
    pytest.param(lambda: _mixed, lambda n: (torch.randn(n, 8), torch.randn(n, 8)), id="mixed"),
    pytest.param(lambda: _unsqueezed, lambda n: (torch.randn(n, 5),), id="views"),
    pytest.param(lambda: _inplace, lambda n: (torch.randn(n, 3), torch.randn(n, 3)), id="inplace"),
]


def _compile_and_run(make, inputs, memo: bool, mode=torch.no_grad):
    ds.reset()
    fn = make()
    cf = ds.compile(fn, dynamic=True)
    outs = []
    with pytest.MonkeyPatch.context() as mp, mode():
        if not memo:
            mp.setattr(op_memo, "lookup", lambda *a: None)
        for n in (5, 9, 17):
            args = inputs(n)
            outs.append((cf(*args), fn(*args)))
    e = cf.entries[0]
    return str(e.graph), list(e.guards), outs, cf.stats.compiles, list(cf.stats.fallbacks)


@pytest.mark.parametrize("make,inputs", CASES)
def test_memoized_calls_give_the_graph_guards_and_results_of_a_full_trace(make, inputs):
    full = _compile_and_run(make, inputs, False)
    memo = _compile_and_run(make, inputs, True)
    assert memo[0] == full[0]  # node for node, names, shapes and lines included
    assert memo[1] == full[1]
    assert memo[3] == full[3] and memo[4] == full[4]
    for got, want in memo[2]:
        torch.testing.assert_close(got, want)


def test_under_inference_mode_too():
    # results made under inference mode are inference tensors: the memo's are made there too
    full = _compile_and_run(_blocks, CASES[1].values[1], False, torch.inference_mode)
    memo = _compile_and_run(_blocks, CASES[1].values[1], True, torch.inference_mode)
    assert memo[:2] == full[:2] and memo[3:] == full[3:]
    for got, want in memo[2]:
        assert got.is_inference()
        torch.testing.assert_close(got, want)


def test_an_mlps_repeated_layers_are_recorded_from_the_memo(monkeypatch):
    replays = []
    real = op_memo.replay
    monkeypatch.setattr(op_memo, "replay", lambda *a: replays.append(a[1]) or real(*a))
    cf = ds.compile(_mlp(), dynamic=True)
    with torch.no_grad():
        cf(torch.randn(6, 8))
    # the first Linear reads the input (which may alias the caller's memory), the second a fresh
    # result: each needs its own meta run, as does the first ReLU; the other five calls are replays
    assert [getattr(f, "__name__", "") for f in replays] == ["relu", "linear"] * 2 + ["relu"], replays


def test_calls_whose_results_carry_autograd_history_are_not_memoized(monkeypatch):
    replays = []
    real = op_memo.replay
    monkeypatch.setattr(op_memo, "replay", lambda *a: replays.append(a[1]) or real(*a))
    m = _mlp()
    cf = ds.compile(m, dynamic=True)
    x = torch.randn(6, 8)
    cf(x).sum().backward()
    got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    for g, p in zip(got, m.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert replays == []


def test_the_key_tells_apart_what_decides_a_results_metadata():
    x = torch.empty(4, 3, device="meta")
    from dynashape.tracing.fake import FakeTensor

    def fake(t, **flags):
        f = FakeTensor(t, t.shape, None, torch.device("cpu"), None)
        f.__dict__.update(flags)
        return f
    a, b = fake(x), fake(x)
    k = op_memo.key
    assert k(torch.add, (a, b), {}) == k(torch.add, (b, a), {})
    assert k(torch.add, (a, a), {}) != k(torch.add, (a, b), {})  # one tensor twice
    assert k(torch.mul, (a, 2), {}) != k(torch.mul, (a, 2.0), {})  # the scalar's type decides the dtype
    assert k(torch.mul, (a, 0.0), {}) != k(torch.mul, (a, -0.0), {})
    assert k(torch.add, (a, b), {}) != k(torch.add, (a, fake(x, ds_view=False, ds_may_alias=False)), {})
    assert k(torch.add, (a, b), {}) != k(torch.add, (a, fake(x.t())), {})  # the layout
    assert k(torch.add, (a, fake(x, ds_same_as=a)), {}) is None  # a result that is another's, as it is
    with torch.no_grad():
        nograd = k(torch.add, (a, b), {})
    with torch.enable_grad():
        assert k(torch.add, (a, b), {}) != nograd
    with torch.autocast("cpu"):
        assert k(torch.add, (a, b), {}) is None
    assert k(torch.add, (a, object()), {}) is None


def _fuzz_traces(seed: int, memo: bool):
    """The entries (graph, guards) and stats of a fuzz program run twice in one compiled function
    (the second run meets every call of the first again), with dynamic=True, called on its random
    calls, with the memo on or off; and the results."""
    from tests.fuzz.gen import generate, make_inputs
    from tests.fuzz.run import load, random_calls
    prog = generate(seed)
    fn = load(prog)

    def twice(*args):
        return fn(*args), fn(*args)
    ds.reset()
    cf = ds.compile(twice, dynamic=True)
    results = []
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        if not memo:
            mp.setattr(op_memo, "lookup", lambda *a: None)
        for c in random_calls(seed, prog, 3):
            try:
                results.append(cf(*make_inputs(prog.inputs, c)))
            except Exception as e:  # noqa: BLE001  (the program's own error: the same either way)
                results.append(f"{type(e).__name__}: {e}".replace(fn.__code__.co_filename, "<f>"))
    name = fn.__code__.co_filename  # <fuzz-N>, N counting the programs loaded

    def plain(texts):
        return [t.replace(name, "<f>") for t in texts]
    entries = [(str(e.graph).replace(name, "<f>"), list(e.guards)) for e in cf.entries]
    return entries, (cf.stats.compiles, plain(cf.stats.graph_breaks), plain(cf.stats.fallbacks)), results


@pytest.mark.parametrize("seed", range(25112900, 25112930))
def test_fuzz_programs_trace_the_same_with_and_without_the_memo(seed):
    # traced twice without: the first trace of a process may import a torch module whose import
    # reads a global flag (a guard on it, once per process, memo or not)
    _fuzz_traces(seed, False)
    full = _fuzz_traces(seed, False)
    memo = _fuzz_traces(seed, True)
    assert memo[0] == full[0]
    assert memo[1] == full[1]
    for got, want in zip(memo[2], full[2]):
        if isinstance(want, str):
            assert got == want
        else:
            torch.testing.assert_close(got, want, equal_nan=True)
