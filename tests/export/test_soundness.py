"""An exported program agrees with eager on every input its checks accept, and the export leaves
nothing of its trace in the user's objects (the fourth bug hunt's export findings).

Each test compares with eager over several inputs, and checks that the inputs the program cannot
serve are refused with a RuntimeError that names the argument (or the setting) and what to do;
the same after ds.save/ds.load.
"""
import io
import re
import warnings

import pytest
import torch

import dynashape as ds
from dynashape.symbolic.symtypes import SymBase
from dynashape.tracing.fake import FakeTensor


def roundtrip(ep):
    buf = io.BytesIO()
    ds.save(ep, buf)
    buf.seek(0)
    return ds.load(buf)


def programs(ep):
    """The program, its module and its saved-and-loaded copy: each must keep every check."""
    return [("ep", ep), ("module", ep.module()), ("loaded", roundtrip(ep))]


def refused(prog, args, kwargs=None, match=""):
    with pytest.raises(RuntimeError, match=match) as info:
        prog(*args, **(kwargs or {}))
    return str(info.value)


# ---------------------------------------------------------------------------- 1. trace state
SEEN = []


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.cache = []

    def forward(self, x):
        self.count += 1  # in place, then Module.__setattr__ rebinds the buffer to the trace's stand-in
        self.last = x.sum()
        self.cache.append(x * 2)
        SEEN.append(x.shape[0])
        return x * self.count


def _leaks(*objs) -> list:
    out = []
    for o in objs:
        for v in (o if isinstance(o, list) else [o]):
            if isinstance(v, (FakeTensor, SymBase)) or isinstance(v, torch.Tensor) and v.device.type == "meta":
                out.append(v)
    return out


def test_export_leaves_the_modules_attributes_lists_and_globals_as_they_were():
    SEEN.clear()
    m = Counter()
    count = m.count
    with pytest.warns(UserWarning, match=r"Counter\.last.*the exported program does not make such changes"):
        ep = ds.export(m, (torch.ones(3, 2),), dynamic_shapes=({0: ds.Dim("n")},))
    assert m._buffers["count"] is count and float(count) == 0.0
    assert not hasattr(m, "last") and m.cache == [] and SEEN == []
    assert not _leaks(list(vars(m).values()), m.cache, SEEN)
    m(torch.ones(3, 2))  # the module still runs eagerly
    assert float(m.count) == 1.0


def test_an_exported_buffer_keeps_its_name_and_counts_like_eager():
    m = Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = ds.export(m, (torch.ones(3, 2),), dynamic_shapes=({0: ds.Dim("n")},))
    assert list(ep.state_dict) == ["count"]
    ref = Counter()
    for n in (2, 5, 3, 7):
        x = torch.randn(n, 2)
        torch.testing.assert_close(ep(x), ref(x))


def test_export_restores_closures_class_attributes_and_objects_when_the_trace_fails():
    box = {"n": 0}
    seen = []

    class Holder:
        calls = 0

    h = Holder()

    def f(x):
        nonlocal seen
        Holder.calls += 1
        h.last = x.shape[0]
        box["n"] = x.shape[0]
        seen = [x]
        raise ValueError("the program fails on the example")

    with pytest.raises(ValueError, match="fails on the example"):
        ds.export(f, (torch.ones(4),), dynamic_shapes=({0: ds.Dim("n")},))
    assert Holder.calls == 0 and not hasattr(h, "last") and box == {"n": 0} and seen == []


# ---------------------------------------------------------------------------- 2. layouts
def test_a_program_reading_strides_refuses_other_layouts_of_a_size_one_dim():
    f = lambda x: x * x.stride(0)
    ep = ds.export(f, (torch.ones(1, 4),), dynamic_shapes=({1: ds.Dim("d")},))
    for tag, prog in programs(ep):
        for n in (3, 6, 9):
            x = torch.randn(1, n)
            torch.testing.assert_close(prog(x), f(x))
        msg = refused(prog, (torch.ones(1, 8)[:, :4],), match=r"args\[0\]\.stride\(\)")
        assert "(4, 1)" in msg and "(8, 1)" in msg and "contiguous" in msg, (tag, msg)


def test_a_program_reading_strides_of_a_transposed_input_serves_other_transposed_sizes():
    f = lambda x: x * x.stride(1)
    ep = ds.export(f, (torch.ones(4, 3).t(),), dynamic_shapes=({0: ds.Dim("a"), 1: ds.Dim("b")},))
    for tag, prog in programs(ep):
        for n, k in ((5, 6), (2, 7), (9, 3)):
            x = torch.randn(n, k).t()
            torch.testing.assert_close(prog(x), f(x))
        refused(prog, (torch.ones(6, 10)[:, ::2],), match=r"args\[0\]\.stride\(\) to be \(1, 6\)")
        refused(prog, (torch.ones(5, 6),), match=r"args\[0\]\.stride\(\)")


def test_a_program_reading_the_storage_offset_refuses_another_offset():
    f = lambda x: x + x.storage_offset()
    ep = ds.export(f, (torch.ones(3, 4),), dynamic_shapes=({0: ds.Dim("a")},))
    for tag, prog in programs(ep):
        for n in (2, 5, 8):
            x = torch.randn(n, 4)
            torch.testing.assert_close(prog(x), f(x))
        msg = refused(prog, (torch.ones(10, 4)[2:5],), match=r"args\[0\]\.storage_offset\(\) to be 0")
        assert "but got 8" in msg


def test_a_program_that_reads_no_layout_takes_any_layout():
    f = lambda x: x * 2 + 1
    ep = ds.export(f, (torch.ones(3, 4),), dynamic_shapes=({0: ds.Dim("a")},))
    for tag, prog in programs(ep):
        for x in (torch.randn(8, 4)[1:6], torch.randn(4, 6).t()[:, :4].contiguous(), torch.randn(4, 5).t()[:, :4]):
            torch.testing.assert_close(prog(x), f(x))


# ---------------------------------------------------------------------------- 3. float constants
def test_a_float_argument_is_checked_bit_for_bit():
    f = lambda x, s: x / s
    ep = ds.export(f, (torch.ones(3), 0.0))
    for tag, prog in programs(ep):
        x = torch.randn(3)
        torch.testing.assert_close(prog(x, 0.0), f(x, 0.0))
        msg = refused(prog, (x, -0.0), match=r"args\[1\] to be equal to 0\.0, but got -0\.0")
        assert "sign of a zero" in msg
        refused(prog, (x, 1.0), match=r"args\[1\] to be equal to 0\.0, but got 1\.0")


def test_a_nan_example_serves_nan_again():
    f = lambda x, s: x + s
    ep = ds.export(f, (torch.ones(3), float("nan")))
    for tag, prog in programs(ep):
        for n in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(prog(x, float("nan")), f(x, float("nan")), equal_nan=True)
        refused(prog, (torch.ones(3), 1.0), match=r"args\[1\] to be equal to nan")


# ---------------------------------------------------------------------------- 4. grad mode and global state
def test_a_program_exported_under_no_grad_runs_under_the_callers_grad_mode():
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        ep = ds.export(lin, (torch.randn(4, 3),), dynamic_shapes=({0: ds.Dim("b")},))
    for tag, prog in programs(ep):
        for n in (2, 5, 7):
            x = torch.randn(n, 3)
            got, want = prog(x), lin(x)
            torch.testing.assert_close(got, want)
            assert got.requires_grad and got.grad_fn is not None, tag
            with torch.no_grad():
                assert not prog(x).requires_grad, tag
    mod = ep.module()
    x = torch.randn(5, 3)
    mod(x).sum().backward()
    lin(x).sum().backward()
    torch.testing.assert_close(mod.weight.grad, lin.weight.grad)


def test_a_program_that_reads_the_grad_mode_checks_it():
    def f(x):
        return x * 2 if torch.is_grad_enabled() else x * 3

    with torch.no_grad():
        ep = ds.export(f, (torch.ones(3),))
    for tag, prog in programs(ep):
        with torch.no_grad():
            for _ in range(3):
                x = torch.randn(3)
                torch.testing.assert_close(prog(x), f(x))
        msg = refused(prog, (torch.ones(3),), match="grad mode off and reads it")
        assert "torch.no_grad()" in msg and "test_soundness.py" in msg, (tag, msg)


def test_a_no_grad_block_inside_the_program_is_its_own_switch():
    w = torch.nn.Parameter(torch.randn(3))

    def f(x):
        with torch.no_grad():
            y = x * w
        return y + x * w

    ep = ds.export(f, (torch.ones(3),))
    for tag, prog in programs(ep):
        x = torch.randn(3)
        got, want = prog(x), f(x)
        torch.testing.assert_close(got, want)
        assert got.requires_grad == want.requires_grad
        refused_msg = refused(torch.no_grad()(prog), (x,), match="grad mode on and reads it")
        assert "torch.enable_grad()" in refused_msg


GLOBAL_WEIGHT = torch.randn(3, requires_grad=True)


def test_a_captured_tensor_that_requires_grad_keeps_requiring_it_in_the_program():
    """A global tensor that requires grad became the program's state without it: the outputs did not
    require grad where eager's do, and backward raised."""
    def f(x):
        return x * GLOBAL_WEIGHT

    ep = ds.export(f, (torch.randn(4, 3),), dynamic_shapes=({0: ds.Dim("b")},))
    for tag, prog in programs(ep):
        state = prog.state_dict(keep_vars=True) if tag == "module" else prog.state_dict
        (w,) = [t for t in state.values() if t.requires_grad]
        x = torch.randn(5, 3)
        got = prog(x)
        assert got.requires_grad, tag
        w.grad = GLOBAL_WEIGHT.grad = None
        got.sum().backward()
        f(x).sum().backward()
        torch.testing.assert_close(w.grad, GLOBAL_WEIGHT.grad)


def test_a_program_that_reads_requires_grad_checks_it_per_input():
    def f(x):
        return x * 2 if x.requires_grad else x * 3

    ep = ds.export(f, (torch.ones(3),))
    for tag, prog in programs(ep):
        for _ in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(prog(x), f(x))
        msg = refused(prog, (torch.ones(3, requires_grad=True),), match=r"args\[0\]\.requires_grad to be False")
        assert "x.detach()" in msg


def test_a_program_checks_the_default_dtype_and_the_flags_it_read():
    def by_dtype(x):
        return x + torch.ones(3) * (1 if torch.get_default_dtype() == torch.float32 else 2)

    def by_precision(x):
        return x * (2 if torch.get_float32_matmul_precision() == "highest" else 3)

    ep_dtype = ds.export(by_dtype, (torch.ones(3, dtype=torch.float64),))
    before = torch.get_float32_matmul_precision()
    ep_flag = ds.export(by_precision, (torch.ones(3),))
    for (tag, a), (_, b) in zip(programs(ep_dtype), programs(ep_flag)):
        x = torch.randn(3, dtype=torch.float64)
        torch.testing.assert_close(a(x), by_dtype(x))
        torch.testing.assert_close(b(x.float()), by_precision(x.float()))
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            refused(a, (x,), match=r"torch.get_default_dtype\(\) == torch.float32, but it is torch.float64")
        finally:
            torch.set_default_dtype(old)
        torch.set_float32_matmul_precision("high" if before == "highest" else "highest")
        try:
            refused(b, (x.float(),), match=r"torch.get_float32_matmul_precision\(\) == ")
        finally:
            torch.set_float32_matmul_precision(before)


# ---------------------------------------------------------------------------- 5. dict key order
def test_a_dict_input_must_come_in_the_examples_key_order():
    a, b = torch.zeros(2), torch.ones(2)
    f = lambda d: torch.stack(list(d.values()))
    ep = ds.export(f, ({"a": a, "b": b},))
    for tag, prog in programs(ep):
        for _ in range(3):
            d = {"a": torch.randn(2), "b": torch.randn(2)}
            torch.testing.assert_close(prog(d), f(d))
        msg = refused(prog, ({"b": b, "a": a},), match=r"input at args\[0\] in the order of the example")
        assert "['b', 'a']" in msg and "Pass them in the example's order" in msg


def test_keyword_arguments_must_come_in_the_examples_order():
    def kw(x, **rest):
        return torch.cat([x, *rest.values()])

    ep = ds.export(kw, (torch.zeros(1),), {"p": torch.ones(1), "q": torch.full((1,), 2.0)})
    for tag, prog in programs(ep):
        for _ in range(3):
            x, p, q = torch.randn(1), torch.randn(1), torch.randn(1)
            torch.testing.assert_close(prog(x, p=p, q=q), kw(x, p=p, q=q))
        refused(prog, (torch.zeros(1),), {"q": torch.ones(1), "p": torch.ones(1)},
                match=re.escape("Expected the keyword arguments in the order of the example, ['p', 'q']"))
