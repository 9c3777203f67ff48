"""Known tracing pitfalls: what specializes, what is seen, what breaks — and that it is said."""
import pytest
import torch

import dynashape as ds
from tests.oracle import check_vs_eager


def test_range_over_a_size_unrolls_with_a_specialization_guard():
    def f(x):
        out = x
        for _ in range(x.size(0)):
            out = out * 2
        return out

    cf = check_vs_eager(f, [(torch.ones(3),), (torch.ones(3),), (torch.ones(4),)], compiles=2)
    assert "L['x'].size()[0] == 3" in cf.entries[1].guards
    assert cf.stats.recompile_reasons[0].startswith("L['x'].size()[0] == 3 failed (x.size(0) = 4)")


def test_python_int_in_a_closure_that_changes_recompiles():
    scale = 2

    def f(x):
        return x * scale

    cf = ds.compile(f, dynamic=True)
    x = torch.ones(3)
    torch.testing.assert_close(cf(x), x * 2)
    scale = 5
    torch.testing.assert_close(cf(x), x * 5)
    assert cf.stats.compiles == 2
    assert "scale" in cf.stats.recompile_reasons[0]


GLOBAL_SHIFT = 1.0


def test_python_float_global_that_changes_recompiles():
    global GLOBAL_SHIFT

    def f(x):
        return x + GLOBAL_SHIFT

    cf = ds.compile(f, dynamic=True)
    x = torch.zeros(2)
    torch.testing.assert_close(cf(x), x + 1.0)
    GLOBAL_SHIFT = 3.0
    try:
        torch.testing.assert_close(cf(x), x + 3.0)
    finally:
        GLOBAL_SHIFT = 1.0
    assert cf.stats.compiles == 2


def test_tensor_in_a_closure_is_read_at_call_time():
    w = torch.ones(3)

    def f(x):
        return x * w

    cf = ds.compile(f, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(3)), torch.ones(3))
    w.mul_(4)  # in-place change of the captured tensor is visible
    torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 4.0))


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


def test_module_attribute_change_is_seen():
    m = Scaled()
    cm = ds.compile(m, dynamic=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cm(x), m(x))
    m.scale = 7.0  # a float attribute is a symbol, read from the module at each call (as torch.compile)
    torch.testing.assert_close(cm(x), m(x))
    assert cm.stats.compiles == 1
    m.scale = 3  # an int: guarded by value
    torch.testing.assert_close(cm(x), m(x))
    assert cm.stats.compiles == 2
    assert "scale" in cm.stats.recompile_reasons[0]


def max_branch(x):
    if x.max() > 0.5:  # data-dependent
        return x * 2
    return x


def test_data_dependent_if_compiles_both_paths_by_speculation():
    f = max_branch
    cf = ds.compile(f, dynamic=True)
    for x in (torch.zeros(3), torch.ones(3), torch.zeros(3)):
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats.paths == 2 and not cf.stats.graph_breaks
    (reason,) = cf.stats.recompile_reasons
    assert reason.startswith("side exit: x.max() > 0.5 was True at test_tracing_pitfalls.py:")


@ds.config.patch(speculate_data_branches=False)
def test_data_dependent_if_graph_breaks_with_the_users_line_and_no_dynashape_frames():
    f = max_branch
    cf = ds.compile(f, dynamic=True)
    for x in (torch.zeros(3), torch.ones(3)):
        torch.testing.assert_close(cf(x), f(x))
    (reason,) = cf.stats.graph_breaks
    assert "test_tracing_pitfalls.py" in reason and "if x.max() > 0.5:" in reason
    assert "dynashape/" not in reason and "tracer.py" not in reason


def test_print_is_replayed_with_real_values_at_each_call(capsys):
    def f(x):
        print("sum", x.sum(), "rows", x.size(0))
        return x + 1

    cf = ds.compile(f, dynamic=True)
    for n in (2, 3):
        torch.testing.assert_close(cf(torch.ones(n)), torch.full((n,), 2.0))
    assert capsys.readouterr().out == "sum tensor(2.) rows 2\nsum tensor(3.) rows 3\n"
    assert cf.stats.compiles == 1 and not cf.stats.graph_breaks


def test_formatting_a_tensor_into_a_string_is_a_graph_break(capsys):
    def f(x):
        print(f"x = {x}")
        return x + 1

    cf = ds.compile(f, dynamic=True)
    torch.testing.assert_close(cf(torch.zeros(2)), torch.ones(2))
    assert "tensor" in cf.stats.graph_breaks[0]
    assert capsys.readouterr().out == "x = tensor([0., 0.])\n"


def test_reading_strides_guards_the_layout():
    def f(x):
        if x.is_contiguous():
            return x * 2
        return x * 3

    cf = ds.compile(f, dynamic=True)
    a = torch.randn(4, 5)
    torch.testing.assert_close(cf(a), a * 2)
    torch.testing.assert_close(cf(a.t()), a.t() * 3)
    assert cf.stats.compiles == 2


def test_int_of_a_size_specializes_visibly():
    def f(x):
        n = int(x.size(0))
        return x.view(n, -1)

    cf = check_vs_eager(f, [(torch.ones(3, 2),), (torch.ones(5, 2),)], compiles=2)
    assert "L['x'].size()[0] == 3" in cf.entries[1].guards


SIZES = [2, 3]
WEIGHTS = [torch.ones(3), torch.ones(3) * 2]


class Cfg:
    def __init__(self):
        self.scale = 2.0


CFG = Cfg()


def _helper(x):
    return x * SIZES[0]


def test_a_mutated_global_list_of_numbers_recompiles():
    def f(x):
        return x * SIZES[1]

    cf = ds.compile(f, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 3.0))
    SIZES[1] = 7
    try:
        torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 7.0))
    finally:
        SIZES[1] = 3
    assert cf.stats.compiles == 2


def test_a_global_read_by_a_helper_function_is_guarded():
    cf = ds.compile(lambda x: _helper(x) + 1, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 3.0))
    SIZES[0] = 5
    try:
        torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 6.0))
    finally:
        SIZES[0] = 2


def test_a_config_object_attribute_change_is_seen():
    cf = ds.compile(lambda x: x * CFG.scale, dynamic=True)
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 2.0))
    CFG.scale = 4.0
    try:
        torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 4.0))
    finally:
        CFG.scale = 2.0


def test_a_replaced_tensor_in_a_global_list_is_read_at_call_time():
    cf = ds.compile(lambda x: x * WEIGHTS[1], dynamic=True)
    torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 2.0))
    old = WEIGHTS[1]
    WEIGHTS[1] = torch.full((3,), 9.0)
    try:
        torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 9.0))
    finally:
        WEIGHTS[1] = old


def test_manual_seed_inside_the_function_is_replayed():
    def f(x):
        torch.manual_seed(123)
        return x + torch.rand(3)

    cf = ds.compile(f, dynamic=True)
    first = cf(torch.zeros(3))
    torch.rand(5)  # move the global generator on: the compiled code must reseed as eager does
    torch.testing.assert_close(cf(torch.zeros(3)), first)
    torch.testing.assert_close(cf(torch.zeros(3)), f(torch.zeros(3)))
    assert cf.stats.compiles == 1 and "torch.manual_seed(123)" in cf.entries[0].code


def test_changing_the_default_dtype_inside_the_function_is_a_graph_break():
    def f(x):
        torch.set_default_dtype(torch.float64)
        try:
            return x + torch.ones(2)
        finally:
            torch.set_default_dtype(torch.float32)

    cf = ds.compile(f, dynamic=True)
    assert cf(torch.zeros(2)).dtype == torch.float64
    assert "set_default_dtype" in cf.stats.graph_breaks[0]


def test_a_power_of_a_size_and_math_sqrt_of_it_stay_symbolic_also_under_from_math_import_sqrt():
    import math
    from math import sqrt
    cases = [(torch.ones(2, n),) for n in (3, 5, 7)]
    check_vs_eager(lambda x: x / x.size(-1) ** 0.5, cases, compiles=1)
    check_vs_eager(lambda x: x / math.sqrt(x.size(-1)), cases, compiles=1)  # as torch.compile (was 3)
    # a name bound before any trace is swapped for the trace's router too (it specialized the size before)
    check_vs_eager(lambda x: x / sqrt(x.size(-1)), cases, compiles=1)


def _eager_equal(fn, cases, **kw):
    cf = ds.compile(fn, **kw)
    for args in cases:
        try:
            want = fn(*args)
        except Exception as e:  # noqa: BLE001
            with pytest.raises(type(e)):
                cf(*args)
            continue
        torch.testing.assert_close(cf(*args), want)
    return cf


def test_an_error_caught_by_the_program_runs_the_call_eagerly_and_says_why():
    """`try: x.view(-1, 4) except RuntimeError: ...`: whether eager raises there (and what) is eager's
    to say, and an op of the `try:` raising when compiled code runs would not reach the handler
    (tracing/caught.py; the fuzzer's `try:` template found both): the call runs eagerly."""
    def f(x):
        try:
            y = x.view(-1, 4)
        except RuntimeError:
            y = x.reshape(1, -1)
        return y * 2

    cf = _eager_equal(f, [(torch.ones(n),) for n in (8, 6, 12, 5, 16)])
    assert cf.stats.graph_breaks and all("try:" in r or "caught an error" in r for r in cf.stats.graph_breaks)


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_index_past_a_dim_caught_by_the_program_takes_the_except_path(dynamic):
    """`try: x[i] except IndexError:` with i (or the size) varying: eager's path, call by call (a graph
    that only ran the op raised the IndexError out of the call, explore2 repro_2); outside a `try:`
    the error is eager's, of eager's type."""
    def f(x, i):
        try:
            return x[i] * 2, x.select(1, -i), x[:, i]
        except IndexError:
            return x.sum() * 0 - 1, x[0], x[:, 0]

    cases = [(torch.randn(s, c), i) for s, c, i in
             [(4, 5, 1), (4, 5, 3), (6, 7, 5), (6, 6, 6), (6, 9, -7), (5, 9, -5), (3, 2, 2), (8, 9, 7)]]
    _eager_equal(f, cases, dynamic=dynamic)
    with pytest.raises(IndexError, match="out of bounds"):  # not caught: eager's error, eager's type
        ds.compile(lambda x, i: x[i], dynamic=dynamic)(torch.randn(3), 5)


def test_torch_cond_takes_eagers_branch_and_export_says_what_it_cannot_do():
    """torch.cond runs torch.compile on the spot, which cannot trace our values: it failed with a
    misleading Dynamo error (explore2 repro_9). In a trace it is the branch `if pred:` takes."""
    def f(x, n):
        y = torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))  # on data: checked per call
        return torch.cond(x.size(0) > n, lambda t, k: t + k, lambda t, k: t - k, [y, n])  # on sizes: a guard

    cf = check_vs_eager(f, [(torch.ones(3), 2), (-torch.ones(3), 2), (torch.ones(5), 7), (-torch.ones(4), 1)])
    assert cf.stats.graph_breaks == []

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))
    with pytest.raises(ds.GraphBreakError, match="(?s)torch.cond on a tensor.*record_branches=True"):
        ds.export(M(), (torch.ones(3),))
    ep = ds.export(M(), (torch.ones(3),), record_branches=True)
    torch.testing.assert_close(ep.module()(torch.full((3,), 2.0)), M()(torch.full((3,), 2.0)))
    with pytest.raises(RuntimeError, match="did not record"):
        ep.module()(-torch.ones(3))
