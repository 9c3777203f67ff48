"""The default policy (automatic dynamic), annotations, config, stances, the recompile limit."""
import logging
import math
import warnings

import pytest
import torch

import dynashape as ds
from dynashape.runtime.annotations import marks_of
from tests.oracle import check_vs_eager


def times_size(x):
    return x * x.size()[0]


def mul(x, y):
    return x * y


SIZES = (2, 3, 4, 4, 5, 5, 6)


@pytest.mark.parametrize("dynamic,compiles", [(None, 2), (False, 5), (True, 1)])
def test_x_times_y_compile_counts_follow_pytorch(dynamic, compiles):
    check_vs_eager(mul, [(torch.randn(n), torch.randn(n)) for n in SIZES], dynamic=dynamic, compiles=compiles)


def test_automatic_dynamic_off_compiles_per_size():
    with ds.config.patch(automatic_dynamic_shapes=False):
        check_vs_eager(mul, [(torch.randn(n), torch.randn(n)) for n in SIZES], dynamic=None, compiles=5)


def test_assume_static_by_default_false_is_dynamic_from_the_start():
    with ds.config.patch(assume_static_by_default=False):
        check_vs_eager(mul, [(torch.randn(n), torch.randn(n)) for n in SIZES], dynamic=None, compiles=1)


def test_changing_int_argument_gives_two_compiles():
    def f(x, n):
        return x + n

    cf = check_vs_eager(f, [(torch.ones(3), n) for n in (1, 2, 3, 4)], dynamic=None, compiles=2)
    assert "L['n']" in cf.entries[0].dynamic_sources


def test_mark_dynamic_before_the_first_call_compiles_once():
    cases = []
    for n in (10, 20, 30, 40):
        x = torch.rand(n)
        ds.mark_dynamic(x, 0)
        cases.append((x,))
    cf = ds.compile(times_size)
    for (x,) in cases:
        torch.testing.assert_close(cf(x), x * x.size(0))
    assert cf.stats.compiles == 1


def test_dynamic_sources_config_compiles_once():
    with ds.config.patch(dynamic_sources="L['x']"):
        check_vs_eager(times_size, [(torch.rand(n),) for n in (10, 20, 30, 40)], dynamic=None, compiles=1)


def test_dynamic_sources_accept_regexes_and_override_dynamic_false():
    with ds.config.patch(dynamic_sources=r"L\['x.*'\]"):
        check_vs_eager(lambda xa: xa * 2, [(torch.rand(n),) for n in (3, 4, 5)], dynamic=False, compiles=1)


def specialize_on_ten(x):
    if x.size(0) == 10:  # the specializing line
        return x * 10
    return x


def test_maybe_mark_dynamic_on_a_specialized_dim_does_not_raise():
    x = torch.rand(10)
    ds.maybe_mark_dynamic(x, 0)
    cf = ds.compile(specialize_on_ten)
    torch.testing.assert_close(cf(x), x * 10)


def test_mark_dynamic_on_a_specialized_dim_raises_naming_the_line():
    x = torch.rand(10)
    ds.mark_dynamic(x, 0)
    cf = ds.compile(specialize_on_ten)
    with pytest.raises(ds.ConstraintViolationError) as e:
        cf(x)
    msg = str(e.value)
    assert "L['x'].size()[0]" in msg and "specialized to 10" in msg
    assert "if x.size(0) == 10:" in msg and "maybe_mark_dynamic" in msg


def test_mark_dynamic_with_a_range_raises_when_the_program_pins_the_size():
    def f(x, y):
        if x.shape[0] == 3:
            return x + y
        return x - y

    x, y = torch.rand(3), torch.rand(3)
    ds.mark_dynamic(y, 0, min=2, max=5)
    with pytest.raises(ds.ConstraintViolationError, match="L\\['y'\\].size\\(\\)\\[0\\]"):
        ds.compile(f)(x, y)


def test_mark_static_then_a_new_size_recompiles():
    x = torch.rand(4)
    ds.mark_static(x, 0)
    cf = ds.compile(times_size, dynamic=True)
    cf(x)
    y = torch.rand(5)
    ds.mark_static(y)
    torch.testing.assert_close(cf(y), y * 5)
    assert cf.stats.compiles == 2


def test_annotations_inside_a_compiled_function_are_accepted_and_change_nothing():
    # as torch.compile: on an input or on a value the function computes, no error, no effect
    def f(x):
        ds.mark_dynamic(x, 0)
        y = x * 2
        ds.mark_dynamic(y, 0)
        ds.mark_static(y, 0)
        return y + 1

    cf = ds.compile(f)
    for n in (3, 4, 5):
        x = torch.rand(n)
        got = cf(x)
        assert not marks_of(x)  # (eager's call below marks it)
        torch.testing.assert_close(got, f(x))
    assert cf.stats.compiles == 2 and cf.stats.graph_breaks == []


def test_marks_of_the_first_call_do_not_bind_later_unmarked_tensors():
    # PyTorch: a later tensor needs no marks to reuse the dynamic entry; marks it carries must hold
    cf = ds.compile(lambda x: x * 2)
    x = torch.rand(4, 3)
    ds.mark_dynamic(x, 0)
    cf(x)
    for n in (7, 9):
        cf(torch.rand(n, 3))
    assert cf.stats.compiles == 1, cf.stats.recompile_reasons
    y = torch.rand(5, 3)
    ds.mark_dynamic(y, 0)  # dynamic here too: reused
    cf(y)
    assert cf.stats.compiles == 1
    z = torch.rand(6, 3)
    ds.mark_static(z, 0)  # static where the entry is dynamic: a new entry
    torch.testing.assert_close(cf(z), z * 2)
    assert cf.stats.compiles == 2 and "annotations" in cf.stats.recompile_reasons[-1]


def test_a_marked_tensor_does_not_reuse_an_entry_that_is_static_in_its_marked_dim():
    cf = ds.compile(lambda x: x * 2, dynamic=False)
    cf(torch.rand(4))
    x = torch.rand(4)
    ds.mark_dynamic(x, 0)
    cf(x)
    assert cf.stats.compiles == 2
    cf(torch.rand(11))  # the marked entry is dynamic: an unmarked tensor of another size reuses it
    assert cf.stats.compiles == 2, cf.stats.recompile_reasons


def test_annotation_arguments_are_checked():
    with pytest.raises(IndexError, match="dim=3"):
        ds.mark_dynamic(torch.rand(2, 2), 3)
    with pytest.raises(ValueError, match="min=5 is greater than max=2"):
        ds.mark_dynamic(torch.rand(3), 0, min=5, max=2)
    with pytest.raises(TypeError, match="must be a tensor"):
        ds.mark_dynamic([1, 2], 0)


def test_parameter_inputs_are_static_unless_configured():
    def f(p):
        return p * 2

    cases = [(torch.nn.Parameter(torch.randn(n)),) for n in (2, 3, 4)]
    cf = ds.compile(f)
    for (p,) in cases:
        torch.testing.assert_close(cf(p), p * 2)
    assert cf.stats.compiles == 3
    with ds.config.patch(force_parameter_static_shapes=False):
        cf = ds.compile(f)
        for (p,) in cases:
            torch.testing.assert_close(cf(p), p * 2)
        assert cf.stats.compiles == 2


def test_recompile_limit_runs_eagerly_with_one_warning():
    with ds.config.patch(recompile_limit=2), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cf = ds.compile(times_size, dynamic=False)
        for n in range(2, 12):
            x = torch.rand(n)
            torch.testing.assert_close(cf(x), x * n)
    assert cf.stats.compiles == 2
    limit = [x for x in w if "recompile_limit" in str(x.message)]
    assert len(limit) == 1 and "times_size" in str(limit[0].message)


def test_recompile_limit_can_raise_instead():
    with ds.config.patch(recompile_limit=1, fail_on_recompile_limit_hit=True):
        cf = ds.compile(times_size, dynamic=False)
        cf(torch.rand(2))
        with pytest.raises(ds.RecompileError, match="recompile_limit"):
            cf(torch.rand(3))


def test_fail_on_recompile_stance_raises_with_the_reasons():
    cf = ds.compile(times_size, dynamic=False)
    cf(torch.rand(2))
    with ds.set_stance("fail_on_recompile"):
        cf(torch.rand(2))  # a cache hit is fine
        with pytest.raises(ds.RecompileError) as e:
            cf(torch.rand(3))
    assert e.value.reasons == ["tensor 'x' size mismatch at index 0. expected 2, actual 3; to compile this "
                               "dynamically from the start, call ds.mark_dynamic(x, 0) or set "
                               "DYNASHAPE_DYNAMIC_SOURCES=\"L['x']\""]


def test_force_eager_never_compiles():
    cf = ds.compile(times_size)
    with ds.set_stance("force_eager"):
        torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 3.0))
    assert cf.stats.compiles == 0


def test_eager_then_compile_compiles_once_for_a_varying_batch():
    cf = ds.compile(times_size)

    @ds.set_stance("eager_then_compile")
    def run():
        for n in (3, 5, 7, 9):
            x = torch.rand(n)
            torch.testing.assert_close(cf(x), x * n)

    run()
    assert cf.stats.compiles == 1 and cf.stats.recompile_reasons == []


def test_unknown_stance_and_knob_raise_with_the_valid_names():
    with pytest.raises(ValueError, match="fail_on_recompile"):
        ds.set_stance("fast")
    with pytest.raises(AttributeError, match="recompile_limit"):
        ds.config.recompile_limt = 3
    with pytest.raises(TypeError, match="takes a int"):
        ds.config.recompile_limit = "8"


def test_config_patch_works_as_a_decorator_and_restores():
    @ds.config.patch(recompile_limit=3)
    def inner():
        return ds.config.recompile_limit

    assert inner() == 3 and ds.config.recompile_limit == 8


def test_automatic_dynamic_sizes_cover_zero_and_one_without_more_graphs():
    cf = check_vs_eager(lambda x: x * 2 + x.sum(), [(torch.rand(n),) for n in (3, 4, 1, 5, 1, 0, 7)],
                        dynamic=None, compiles=2)
    assert "0 <= L['x'].size()[0]" in cf.entries[0].guards


def test_zero_one_churn_under_dynamic_true_makes_the_size_oblivious():
    cf = check_vs_eager(lambda x: x * 2 + x.sum(), [(torch.rand(n),) for n in (3, 1, 4, 0, 1)],
                        dynamic=True, compiles=2)
    assert "this size is now compiled without 0/1 specialization" in cf.stats.recompile_reasons[0]


def test_a_program_that_asks_about_one_still_gets_an_exact_guard():
    def f(x, y):
        return x + y  # broadcasting asks whether a size is 1

    cases = [(torch.rand(n, 3), torch.rand(m, 3)) for n, m in [(2, 2), (3, 1), (4, 4), (1, 1), (5, 1)]]
    cf = check_vs_eager(f, cases, dynamic=None)
    for e in cf.entries:
        assert all("<= L['y'].size()[0] <= " not in g for g in e.guards)


def test_recompile_log_names_the_function_and_the_reason(caplog):
    cf = ds.compile(times_size)
    with caplog.at_level(logging.INFO, logger="dynashape.recompiles"):
        cf(torch.rand(2))
        cf(torch.rand(3))
    assert "Recompiling function times_size in test_policy.py" in caplog.text
    assert "size mismatch at index 0" in caplog.text


def test_explain_reports_dynamic_sources_specializations_and_reasons():
    cf = ds.compile(specialize_on_ten)
    for n in (10, 11, 12):
        cf(torch.rand(n))
    report = ds.explain(cf, print_report=False)
    assert "L['x'].size()[0]: automatic: seen with 10 and 11" in report
    assert "recompile reasons:" in report and "size mismatch at index 0" in report
    assert "guards:" in report and "graph:" in report


def test_a_float_argument_that_changes_becomes_a_symbol_as_in_torch_compile():
    # torch.compile (specialize_float=False since 2.6) compiles twice here: so do we (issue 22: was 4)
    def f(x, scale):
        return x * scale + scale

    cases = [(torch.randn(3), s) for s in (0.5, 1.5, 2.5, 3.5)]
    cf = check_vs_eager(f, cases, dynamic=None, compiles=2)
    assert "type(L['scale']) is float and plain_float(L['scale'])" in cf.entries[0].guards
    with ds.config.patch(specialize_float=True):  # one graph per value, as before
        check_vs_eager(f, cases, dynamic=None, compiles=4)


class Repeats(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 2

    def forward(self, x):
        return x.repeat(self.k, 1) * self.k


@pytest.mark.parametrize("allow,compiles", [(False, 4), (True, 2)])
def test_int_attributes_of_modules_follow_the_int_policy_when_allowed(allow, compiles):
    m = Repeats()
    with ds.config.patch(allow_unspec_int_on_nn_module=allow):
        cm = ds.compile(m)
        for k in (2, 3, 4, 5):
            m.k = k
            x = torch.randn(2, 3)
            torch.testing.assert_close(cm(x), m(x))
    assert cm.stats.compiles == compiles
    assert cm.stats.recompile_reasons[0] == "L['self'].k == 2 failed (self.k = 3)"
    assert m.k == 5  # the attribute is the user's value again after tracing


@pytest.mark.parametrize("values", [(0.5, -1.5, float("nan")), (0.5, float("nan"), 2.0), (float("inf"), 0.5, -0.0)])
def test_a_dynamic_float_argument_that_is_nan_or_inf_recompiles_and_says_why(values):
    # a float symbol's range guard failed on nan and explaining it compared nan in sympy (fuzz seed
    # 20261123 once floats became symbols by default); nan and inf are never symbols
    def f(y, a):
        return y * (1.0 if a > 0 else -1.0)
    cf = ds.compile(f)
    for a in values:
        torch.testing.assert_close(cf(torch.ones(2), a), f(torch.ones(2), a))
    assert all(isinstance(r, str) for r in cf.stats.recompile_reasons)


def test_a_float_symbol_never_stands_for_nan_inf_or_negative_zero():
    # the engine reasons about a float symbol as a finite real (`a == a` holds): a graph compiled
    # for symbolic a gave y + nan for `y + (a if a == a else 1.0)` at a = nan (fuzz seed 25112707),
    # and no error where eager's masked_fill of an int tensor with nan raises
    def f(y, a):
        return y + (a if a == a else 1.0)

    def g(x, a):
        v = x.argmin(1)
        return v.masked_fill(v > 0, a)

    def h(x, a):  # specialized at 0.0, the symbol said 1.0 for -0.0 too (seed 25112707 again)
        return x * math.copysign(1.0, a)
    for fn, make in ((f, lambda: torch.randn(2, 3)), (g, lambda: torch.randn(2, 3)), (h, lambda: torch.randn(2))):
        cf = ds.compile(fn)
        for a in (1.5, -2.0, float("nan"), float("inf"), 0.5, 0.0, -0.0, -1.0):
            x = make()
            try:
                want = fn(x, a)
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match=str(e)[:20]):
                    cf(x, a)
                continue
            torch.testing.assert_close(cf(x, a), want, equal_nan=True)
