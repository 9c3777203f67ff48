"""Calls that change a tensor in place without a trailing `_` (tracing/writes.py): `inplace=True`
by keyword or position, running statistics of batch_norm / instance_norm, embedding's `max_norm`
renorm, `torch._foreach_*_`; and results that are a view of their input (one-operand einsum).
Each is compiled and compared with eager: results, the inputs and module state after the call,
and whether the result is the input itself."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.tracing.writes import written

BACKENDS = ["eager", "fused"]


def _same(got, want):
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _versus_eager(make_fn, makers, backend, identity=False, state=None):
    """Call eager and compiled `make_fn()` on the inputs each maker builds (built twice, alike):
    results and the inputs afterwards match; `identity`: the result is the first input exactly
    when eager's is; `state(fn)`: a module's state after each call matches."""
    with ds.config.patch(fused_sync=True):
        fe, fc_raw = make_fn(), make_fn()
        fc = ds.compile(fc_raw, backend=backend)
        for i, mk in enumerate(makers):
            torch.manual_seed(i)
            ae = mk()
            torch.manual_seed(i)
            ac = mk()
            want, got = fe(*ae), fc(*ac)
            _same(got, want)
            _same(ac, ae)
            if identity:
                assert (got is ac[0]) == (want is ae[0])
            if state is not None:
                _same(state(fc_raw), state(fe))
    return fc


def _plain(n):
    return lambda: (torch.randn(n, 4),)


SIZES = [3, 3, 5, 7]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", [
    lambda x: F.relu(x, inplace=True), lambda x: F.relu(x, True), lambda x: F.leaky_relu(x, 0.1, True),
    lambda x: F.elu(x, inplace=True), lambda x: F.hardtanh(x, inplace=True), lambda x: F.silu(x, inplace=True),
    lambda x: F.threshold(x, 0.1, 2.0, inplace=True), lambda x: F.selu(x, inplace=True),
    torch.nn.ReLU(inplace=True), torch.nn.LeakyReLU(0.2, inplace=True),
], ids=["relu", "relu_positional", "leaky_relu_positional", "elu", "hardtanh", "silu", "threshold", "selu",
        "nn.ReLU", "nn.LeakyReLU"])
def test_an_inplace_activation_returns_its_input_itself(op, backend):
    def make():
        def f(x):
            y = op(x)
            return y is x, y * 2
        return f
    _versus_eager(make, [_plain(n) for n in SIZES], backend)
    _versus_eager(lambda: op, [_plain(n) for n in SIZES], backend, identity=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inplace_activation_before_a_data_branch_changes_the_input_once(backend):
    def f(x):
        F.leaky_relu(x, 0.5, inplace=True)
        if x.sum() > 0:
            return x * 2
        return x * 3
    up = lambda: (torch.tensor([[-4.0, 1.0, 2.0, 3.0]]),)  # noqa: E731
    down = lambda: (torch.tensor([[-4.0, -1.0, 2.0, 1.0]]),)  # noqa: E731
    _versus_eager(lambda: f, [up, down, up, down], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_inplace_activation_on_an_input_makes_aliased_inputs_run_as_eager(backend):
    def f(x, y):
        a = y.exp() * 2
        F.leaky_relu(x, 0.5, True)  # (inplace, by position)
        return a + y

    def sliced(n):
        def mk():
            x = torch.randn(n, 4)
            return x, x[1:]
        return mk
    _versus_eager(lambda: f, [lambda: (torch.randn(3, 4), torch.randn(2, 4)), sliced(4), sliced(6)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_running_statistics_are_updated_once_around_a_data_branch(backend):
    def f(x, rm, rv):
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        if y.max() > 1:
            return y * 2
        return y - 1
    mk = [lambda n=n: (torch.randn(n, 4), torch.zeros(4), torch.ones(4)) for n in SIZES]
    _versus_eager(lambda: f, mk, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_norm_with_running_statistics_updates_its_buffers_once(backend):
    class IN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.InstanceNorm1d(4, track_running_stats=True, momentum=0.5)

        def forward(self, x):
            y = self.norm(x)
            if y.sum() > 0:
                return y * 2
            return y * 3
    state = lambda m: [b.clone() for b in m.buffers()]  # noqa: E731
    _versus_eager(IN, [lambda n=n: (torch.randn(2, 4, n),) for n in SIZES], backend, state=state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_running_mean_read_before_and_after_batch_norm_reads_each_value(backend):
    def returned(x, rm, rv):
        a = rm * 2
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        return y, a + rm

    def around(x, rm, rv):
        a = (rm * 2).exp()
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        return y * (a - rm)
    mk = [lambda n=n: (torch.randn(n, 4), torch.randn(4), torch.ones(4)) for n in SIZES]
    for f in (returned, around):
        _versus_eager(lambda: f, mk, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_max_norm_renormalises_the_weight_once(backend):
    def branch(i, w):
        y = F.embedding(i, w, max_norm=1.0)
        if y.sum() > 0:
            return y * 2
        return y * 3

    def around(i, w):
        a = (w * 2).exp()
        y = F.embedding(i, w, None, 1.0)
        return y.sum(), a - w
    mk = [lambda n=n: (torch.randint(0, 6, (n,)), torch.randn(6, 4) * 3) for n in SIZES]
    for f in (branch, around):
        _versus_eager(lambda: f, mk, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_foreach_inplace_op_before_a_data_branch_changes_the_input_once(backend):
    def f(x):
        torch._foreach_mul_([x], 0.5)
        if x.sum() > 0:
            return x * 2
        return x * 3
    _versus_eager(lambda: f, [_plain(n) for n in SIZES], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_one_operand_einsum_is_a_view_its_writes_reach_the_input(backend):
    def transposed(x):
        torch.einsum("ij->ji", x).mul_(0.5)
        if x.sum() > 0:
            return x * 2
        return x * 3

    def between_reads(x):
        a = x.exp() * 2
        torch.einsum("ij->ij", x).mul_(2)
        return a + x
    for f in (transposed, between_reads):
        _versus_eager(lambda: f, [_plain(n) for n in SIZES], backend)


def test_a_two_operand_einsum_is_still_new_memory():
    def f(x, w):
        y = torch.einsum("ij,jk->ik", x, w)
        y.mul_(2)  # a fresh result: no input changes, so the data branch is speculated
        if y.sum() > 0:
            return y + 1
        return y - 1
    cf = ds.compile(f, backend="eager")
    for n in SIZES:
        x, w = torch.randn(n, 4), torch.randn(4, 3)
        torch.testing.assert_close(cf(x, w), f(x, w))
    assert not cf.stats.graph_breaks


def test_the_table_names_what_each_call_writes():
    x, rm, rv, w = torch.randn(3, 4), torch.zeros(4), torch.ones(4), torch.randn(5, 4)
    i = torch.tensor([1])
    cases = [
        (F.relu, (x,), {}, []), (F.relu, (x, True), {}, [x]), (F.leaky_relu, (x, 0.1), {"inplace": True}, [x]),
        (F.batch_norm, (x, rm, rv), {"training": True}, [rm, rv]), (F.batch_norm, (x, rm, rv), {}, []),
        (F.batch_norm, (x, None, None, None, None, True), {}, []),
        (torch.batch_norm, (x, None, None, rm, rv, True, 0.1, 1e-5, False), {}, [rm, rv]),
        (F.instance_norm, (x, rm, rv), {}, [rm, rv]), (F.instance_norm, (x, rm, rv), {"use_input_stats": False}, []),
        (F.embedding, (i, w), {}, []), (F.embedding, (i, w, None, 1.0), {}, [w]), (torch.embedding, (w, i), {}, []),
        (torch.Tensor.add_, (x, 1), {}, [x]), (torch.Tensor.__iadd__, (x, 1), {}, [x]),
        (torch.Tensor.__add__, (x, 1), {}, []), (torch.add, (x, 1), {"out": rm}, [rm]),
        (torch.ops.aten.add_.Tensor, (x, x), {}, [x]), (torch.Tensor.sort, (x,), {}, []),
    ]
    for func, args, kwargs, want in cases:
        got = written(func, args, kwargs)
        assert len(got) == len(want) and all(g is t for g, t in zip(got, want)), (func, args, kwargs)
    lst = [x, rm]
    assert written(torch._foreach_mul_, (lst, 0.5), {}) == [lst]
    assert written(torch._foreach_mul, (lst, 0.5), {}) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_offset_after_as_strided_with_an_offset_is_the_new_one(backend):
    def moved(x):
        x.as_strided_((2, 2), (1, 2), 1)
        return x.storage_offset(), x * 1

    def kept(x):
        x.t_()
        return x.storage_offset(), x * 1
    base = lambda n: (lambda: (torch.arange(float(n * 4 + 2))[2:].reshape(n, 4),))  # noqa: E731  (offset 2)
    for f in (moved, kept):
        _versus_eager(lambda: f, [base(3), base(3), base(5)], backend)
