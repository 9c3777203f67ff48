"""Data-dependent shapes end to end: one compile over many data values, checks, bounds, errors."""
import pytest
import torch

import dynashape as ds
from tests.oracle import check_vs_eager


def data_cases(make, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [make(g) for _ in range(n)]


def test_mask_select_then_sum_compiles_once_over_data():
    check_vs_eager(lambda x: x[x > 0].sum(), data_cases(lambda g: (torch.randn(7, generator=g),)), compiles=1)


def test_nonzero_then_gather_compiles_once_over_data():
    def f(x, v):
        idx = torch.nonzero(x > 0.5)[:, 0]
        return v[idx] * 2

    check_vs_eager(f, data_cases(lambda g: (torch.rand(9, generator=g), torch.randn(9, 3, generator=g))),
                   compiles=1)


def test_masked_select_then_a_linear_layer():
    lin = torch.nn.Linear(1, 4)

    def f(x):
        picked = torch.masked_select(x, x > 0)
        return lin(picked.unsqueeze(1)).relu().sum(0)

    check_vs_eager(f, data_cases(lambda g: (torch.randn(5, 5, generator=g),)), compiles=1)


def test_unique_with_counts():
    def f(x):
        values, counts = torch.unique(x, return_counts=True)
        return values * 10, counts

    check_vs_eager(f, data_cases(lambda g: (torch.randint(0, 5, (12,), generator=g),)), compiles=1)


def test_item_used_as_a_size_after_a_check_compiles_once():
    def f(x, t):
        n = t.item()
        ds.check(n >= 0)
        return torch.zeros(n, 4) + x.sum()

    check_vs_eager(f, [(torch.ones(2), torch.tensor(3)), (torch.ones(2), torch.tensor(4)),
                       (torch.ones(2), torch.tensor(0))], dynamic=None, compiles=1)


def test_detection_style_head_compiles_once():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()

    def head(scores, boxes):
        keep = torch.nonzero(scores > 0.6).squeeze(1)  # a data-dependent number of boxes
        kept = boxes[keep]
        return mlp(kept).softmax(-1), keep

    check_vs_eager(head, data_cases(lambda g: (torch.rand(20, generator=g), torch.randn(20, 4, generator=g))),
                   compiles=1)


def test_xla_seed_training_step_with_nonzero_and_masked_select_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ref.load_state_dict(model.state_dict())

    def step(m, x, y):
        mask = x > 0
        xs = torch.masked_select(x, mask).unsqueeze(1)  # (u0, 1)
        ys = y[torch.nonzero(mask.squeeze(1)).squeeze(1)]  # (u1, 1)
        return torch.nn.functional.mse_loss(m(xs), ys)

    cstep = ds.compile(step, dynamic=True)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x, y = torch.randn(16, 1, generator=g), torch.randn(16, 1, generator=g)
        l1, l2 = cstep(model, x, y), step(ref, x, y)
        torch.testing.assert_close(l1, l2)
        l1.backward()
        l2.backward()
        for p1, p2 in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p1.grad, p2.grad)
            p1.grad = p2.grad = None
    assert cstep.stats.compiles == 1 and not cstep.stats.graph_breaks


def branchy(x):
    n = x.nonzero().size(0)
    if n == 0:  # branching on data
        return x
    return x * 2


@ds.config.patch(speculate_data_branches=False)  # speculation off: the branch is a graph break
def test_branching_on_a_data_dependent_size_raises_under_fullgraph_with_the_users_line():
    with pytest.raises(ds.DataDependentError) as e:
        ds.compile(branchy, dynamic=True, fullgraph=True)(torch.ones(3))
    msg = str(e.value)
    assert "test_datadep.py" in msg and "if n == 0:" in msg
    assert "x.nonzero().size(0) == 0" in msg
    assert "dynashape.check" in msg and "torch.where" in msg
    assert "dynashape/" not in msg and "shape_env.py" not in msg


@ds.config.patch(speculate_data_branches=False)  # speculation off: the branch is a graph break
def test_branching_on_a_data_dependent_size_falls_back_to_eager_otherwise():
    cf = ds.compile(branchy, dynamic=True)
    for x in (torch.zeros(3), torch.ones(3)):
        torch.testing.assert_close(cf(x), branchy(x))
    assert cf.stats.graph_breaks and "x.nonzero().size(0) == 0" in cf.stats.graph_breaks[0]


def test_a_failing_runtime_assert_raises_at_call_time():
    def f(a):
        ds.check(a.item() != 5, "a must not be 5")
        return a + 1

    cf = ds.compile(f, dynamic=True)
    torch.testing.assert_close(cf(torch.tensor(3)), torch.tensor(4))
    with pytest.raises(RuntimeError, match="a must not be 5"):
        cf(torch.tensor(5))
    assert cf.stats.compiles == 1


def test_nonzero_of_a_5x5_input_prints_its_bound():
    cf = ds.compile(torch.nonzero, dynamic=False)
    cf(torch.randint(0, 2, (5, 5)))
    assert "i64[u0<=25, 2]" in str(cf.entries[0].graph)


def test_bounds_are_visible_and_tighten_through_constrain_range():
    seen = {}

    def f(t):
        n = t.item()
        seen["before"] = ds.bounds(n)
        ds.constrain_range(n, min=0, max=10)
        seen["after"] = ds.bounds(n)
        return torch.ones(n)

    cf = ds.compile(f)
    torch.testing.assert_close(cf(torch.tensor(4)), torch.ones(4))
    assert seen["before"] == (float("-inf"), float("inf")) and seen["after"] == (0, 10)
    with pytest.raises(RuntimeError):
        cf(torch.tensor(11))  # the range is checked when the code runs


def test_item_and_tolist_become_graph_breaks_when_capture_is_off():
    with ds.config.patch(capture_scalar_outputs=False):
        cf = ds.compile(lambda t: torch.ones(t.item()), dynamic=True)
        torch.testing.assert_close(cf(torch.tensor(3)), torch.ones(3))
        assert cf.stats.graph_breaks


def test_tolist_values_bind_at_run_time():
    def f(x, t):
        a, b = t.tolist()
        ds.check(a >= 0)
        ds.check(b >= 0)
        return torch.cat([x[:1].expand(a, 2), x[1:2].expand(b, 2)])

    check_vs_eager(f, [(torch.randn(2, 2), torch.tensor([1, 3])), (torch.randn(2, 2), torch.tensor([4, 0]))],
                   dynamic=None, compiles=1)


def test_mark_unbacked_dim_uses_no_guards_on_it():
    x = torch.randn(5, 3)
    ds.mark_unbacked(x, 0)
    cf = ds.compile(lambda x: (x * 2).sum(0))
    torch.testing.assert_close(cf(x), (x * 2).sum(0))
    assert not any("L['x'].size()[0]" in g and "==" in g for g in cf.entries[0].guards)
    y = torch.randn(1, 3)
    ds.mark_unbacked(y, 0)
    torch.testing.assert_close(cf(y), (y * 2).sum(0))
    assert cf.stats.compiles == 1


def test_sizes_from_data_feed_arange_narrow_and_slicing():
    def f(x, t):
        n = t.item()
        ds.check(n >= 0)
        ds.check(n <= x.size(0))
        return torch.arange(n) * 2, x.narrow(0, 0, n), x[:n]

    check_vs_eager(f, [(torch.randn(6), torch.tensor(3)), (torch.randn(6), torch.tensor(6)),
                       (torch.randn(6), torch.tensor(0))], dynamic=None, compiles=1)


def test_split_with_sizes_read_from_data():
    def f(x, t):
        sizes = t.tolist()
        for s in sizes:
            ds.check_is_size(s)
        return [p.sum(0) for p in x.split(sizes)]

    cf = check_vs_eager(f, [(torch.randn(6, 2), torch.tensor([2, 4])), (torch.randn(6, 2), torch.tensor([5, 1]))],
                        dynamic=None, compiles=1)
    with pytest.raises(RuntimeError, match="sizes must match"):
        cf(torch.randn(6, 2), torch.tensor([2, 2]))  # the sizes must add up: checked when the code runs


# ---------------------------------------------------------------- sizes 0 and 1 of data-dependent lengths
def _counts_0_1_many(make_rest=lambda g: ()):
    """Inputs with 0, 1, 2 and several positive elements."""
    out = []
    for k in (0, 1, 2, 5, 0, 3):
        x = -torch.rand(7) - 0.1
        x[:k] = torch.rand(k) + 0.1
        out.append((x,))
    return out


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_a_data_dependent_length_broadcast_against_one_keeps_its_size(dynamic):
    def f(x, y):
        h = x[x > 0][:1] * y
        return h.size(0), torch.arange(h.size(0) + 2), h
    check_vs_eager(f, [(x, torch.ones(1)) for (x,) in _counts_0_1_many()], dynamic=dynamic)


@pytest.mark.parametrize("fn", [
    lambda x: x[x > 0].unsqueeze(0).expand(3, -1).sum(0),
    lambda x: x[x > 0].unsqueeze(1).squeeze(1) * 2,
    lambda x: (x[x > 0] * torch.ones(1)).sum(),
    lambda x: x[x > 0][3:].sum(),
])
def test_ops_on_data_dependent_lengths_of_zero_and_one_equal_eager(fn):
    check_vs_eager(fn, _counts_0_1_many(), compiles=1)


def test_squeezing_a_data_dependent_length_runs_eagerly():
    f = lambda x: x[x > 0].unsqueeze(0).squeeze()  # noqa: E731 - the rank depends on the data
    cf = ds.compile(f)
    for x in (torch.tensor([1.0, 2.0, -1.0]), torch.tensor([1.0, -2.0, -1.0])):
        torch.testing.assert_close(cf(x), f(x))
    assert "x[x > 0]" in cf.stats.graph_breaks[0] or "depends on data" in cf.stats.graph_breaks[0]


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("fn", [
    lambda x, y: x[x > 0] * y,
    lambda x, y: torch.broadcast_tensors(x.nonzero().float() @ torch.ones(1, 3), y)[0],
    lambda x, y: x[x > 0][1:].amax(0),
])
def test_ops_after_a_data_dependent_size_trace_on_the_first_call(fn, dynamic):
    cases = [(torch.tensor([1., 2., 3., -1.]), torch.ones(3)), (torch.tensor([1., -2., 3., 4.]), torch.zeros(3))]
    check_vs_eager(fn, cases, dynamic=dynamic)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_tensor_of_floats_from_tolist_keeps_a_float_dtype(dynamic):
    def f(y):
        t = torch.tensor(y[:2].tolist())
        return torch.zeros(2, dtype=t.dtype), t * 2, torch.nn.functional.layer_norm(t, (2,))
    check_vs_eager(f, [(torch.randn(3),), (torch.randn(3),)], dynamic=dynamic)


def test_one_argument_where_stays_in_the_graph_like_nonzero():
    def where1(x):
        return torch.where(x > 0)[0]

    cf = check_vs_eager(where1, [(torch.randn(n),) for n in (5, 7, 9)], dynamic=None)
    assert cf.stats.graph_breaks == [] and cf.stats.compiles >= 1


def test_a_data_dependent_length_broadcast_against_a_size_that_becomes_one():
    def f(x):
        v0 = x.logsumexp(-1)
        return v0[v0 > 0][:1] * x
    cases = [(torch.randn(0, 0),), (torch.ones(2, 2),), (-torch.ones(2, 1),), (torch.ones(2, 1),), (torch.ones(3, 3),)]
    check_vs_eager(f, cases, dynamic=None)


def test_torch_check_family_raises_eagers_type_and_message_at_run_time():
    """A torch._check* on a data-dependent value is a runtime assert: it fails with the error type
    and message eager raises (the user's message, or torch's default), not a RuntimeError of ours."""
    def g(x, n):
        k = n.item()
        torch._check(k >= 0, lambda: "k must be non-negative")
        torch._check_value(k < 100, lambda: "k < 100 please")
        torch._check_index(k != 50)
        torch._check(k != 60)
        return x[:k] * 2

    cf = ds.compile(g)
    cf(torch.randn(5), torch.tensor(2))
    for k in (-1, 200, 50, 60):
        with pytest.raises(Exception) as eager:
            g(torch.randn(5), torch.tensor(k))
        with pytest.raises(Exception) as ours:
            cf(torch.randn(5), torch.tensor(k))
        assert (type(ours.value), str(ours.value)) == (type(eager.value), str(eager.value)), k
    assert cf.stats.compiles == 1 and not cf.stats.graph_breaks


@pytest.mark.parametrize("backend", [None, "fused"])
def test_a_dynamic_size_broadcast_against_a_data_dependent_size_may_be_one(backend):
    """`v - y` with v's length from data and y's a dynamic size: the trace takes y's size as not 1
    without a guard (it changed between calls: size-oblivious), so at run time it may be 1 and stretch
    (eager broadcasts there), or equal v's, or neither (eager's error). One graph after the first
    call's static one serves all three: the check is "y's size is 1 or v's"."""
    def f(y, z):
        v = y.new_ones((y > 0).sum().item(), 2).view(-1) * 3
        return v - y, (v - y.view(-1, 1) * z).sum(-1), (v * z.view(-1, 1)).numel()

    cf = ds.compile(f, backend=backend)
    for n, m in ((1, 2), (0, 0), (2, 1), (3, 1), (4, 4), (1, 1), (2, 2), (1, 2)):
        y, z = torch.ones(n, requires_grad=True), torch.arange(float(m))
        try:
            want = f(y, z)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="sizes must broadcast: y.size\\(0\\) must be 1 or"):
                cf(y, z)
            assert "must match" in str(e)
            continue
        got = cf(y, z)
        torch.testing.assert_close(got, want)
        (g1,) = torch.autograd.grad(want[0].sum() + want[1].sum(), y)
        (g2,) = torch.autograd.grad(got[0].sum() + got[1].sum(), y)
        torch.testing.assert_close(g2, g1)
    assert cf.stats.compiles == 2 and cf.stats.graph_breaks == [] and cf.stats.fallbacks == []


def test_a_data_dependent_size_fixed_by_a_later_check_sizes_the_ops_after_it():
    """`v - w` with w of length 2 checks (at run time) that v's data-dependent length is 2; the meta
    tensors made before that check had another stand-in length, and an op after it must not trace
    with the old one (it failed to trace: 'meta rule ... but torch gives (2, 4)')."""
    def f(y, w):
        v = y.new_ones((y > 0).sum().item(), 2).view(-1)
        return v - w, v * w.view(-1, 1)

    check_vs_eager(f, [(torch.ones(1), torch.arange(2.0)), (torch.full((1,), 5.0), torch.ones(2))],
                   dynamic=None, compiles=1)
