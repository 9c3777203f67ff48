"""Python numbers computed from sizes and number arguments (tracing/symint.py, symbolic/symnode.py):
what eager computes, of eager's type, with eager's errors, never the trace's symbol. Each case was
wrong before (a hunt by hand, eleventh session)."""
import math

import pytest
import torch

import dynashape as ds

MODES = [(None, "eager"), (True, "eager"), (None, "fused"), (True, "fused")]


@pytest.mark.parametrize("dynamic, backend", MODES)
def test_repr_of_a_size_and_of_containers_of_sizes_is_the_number(dynamic, backend):
    """`repr(n)`, `str(list(x.shape))`, `f"{tuple(x.shape)}"` (containers show their items' repr) gave
    `Sym(s0)`: returned, and stored on a module and in a global list."""
    log = []

    def f(x, k):
        n = x.shape[0]
        log.append(repr(n))
        return repr(n), f"{n!r}", str(list(x.shape)), f"{tuple(x.shape)}", str({"rows": n}), "%r" % n, repr(k)
    cf = ds.compile(f, dynamic=dynamic, backend=backend)
    for n in (5, 7, 9, 7):
        x = torch.randn(n, 3)
        assert cf(x, n + 0.5) == f(x, n + 0.5)
        assert log[-1] == log[-2] == str(n)


@pytest.mark.parametrize("case", ["numel // n", "n // n", "n % n", "k % n", "k / n"])
@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_dividing_by_a_size_that_may_be_zero_raises_as_eager(case, backend):
    """A size made dynamic after a recompile is compiled size-obliviously (a size-0 call reuses the
    entry): `x.numel() // x.size(0)` simplified to the other size returned 3 where eager raises
    ZeroDivisionError. The division guards its divisor nonzero now."""
    fns = {"numel // n": lambda x, k: x.numel() // x.shape[0], "n // n": lambda x, k: x.shape[0] // x.shape[0],
           "n % n": lambda x, k: x.shape[0] % x.shape[0], "k % n": lambda x, k: k % x.shape[0],
           "k / n": lambda x, k: k / x.shape[0]}
    f = fns[case]
    cf = ds.compile(f, backend=backend)
    for n in (5, 7, 0, 9):
        x = torch.randn(n, 3)
        if n == 0:
            with pytest.raises(ZeroDivisionError):
                f(x, 0)
            with pytest.raises(ZeroDivisionError):
                cf(x, 0)
        else:
            got = cf(x, 0)
            assert got == f(x, 0) and type(got) is type(f(x, 0))
    assert cf.stats.compiles <= 3


@pytest.mark.parametrize("dynamic, backend", MODES)
def test_a_float_argument_of_zero_stays_a_float_with_its_sign(dynamic, backend):
    """0.0 came back as the int 0 (the trace's `f == 0` replaced the symbol by sympy's integer 0), and
    `x.shape[0] * -0.0` as 0.0 (sympy's zero has no sign): 1 / it is -inf in eager."""
    def f(x, v):
        if v:
            x = x + 1
        return x * 2, v, v * 1, x.shape[0] * v
    cf = ds.compile(f, dynamic=dynamic, backend=backend)
    for v in (0.5, 0.7, 0.0, -0.0, 0.0, 0.25, -0.0):
        x = torch.randn(4)
        want, got = f(x, v), cf(x, v)
        torch.testing.assert_close(got[0], want[0])
        assert [type(a) for a in got[1:]] == [type(a) for a in want[1:]], (v, got, want)
        assert got[1:] == want[1:]
        assert [math.copysign(1.0, a) for a in got[1:]] == [math.copysign(1.0, a) for a in want[1:]], (v, got)


def test_if_on_a_number_argument_guards_it_nonzero_not_its_value():
    """`if v:` specialized `v` to its value: a new float recompiled every call."""
    def f(x, v):
        return x * v if v else x
    cf = ds.compile(f, dynamic=True)
    for v in (0.5, 0.7, 0.9, 3.0):
        x = torch.randn(3)
        torch.testing.assert_close(cf(x, v), f(x, v))
    assert cf.stats.compiles == 1
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, 0.0), f(x, 0.0))
    assert cf.stats.compiles == 2


@pytest.mark.parametrize("dynamic, backend", MODES)
def test_a_float_equal_to_an_integer_keeps_float_dtypes_downstream(dynamic, backend):
    """A float decided equal to 0 or 1 (`if v == 0:` on a float argument or an `.item()`) became the
    int 0 in the graph: `int32_tensor + v` stayed int32, `torch.arange(v, 3)` and `torch.full(.., v)`
    were int64 (eager: float32)."""
    def f(i, t, v):
        w = t.item()
        if w == 0 or v == 0:
            return i + w, i + v, torch.arange(v, 3), torch.full((2,), v), torch.tensor(w)
        return i * w, i * v, torch.arange(v, 3), torch.full((2,), v), torch.tensor(w)
    cf = ds.compile(f, dynamic=dynamic, backend=backend)
    for w, v in ((0.5, 0.5), (0.75, 0.25), (0.0, 0.0), (1.0, 1.0), (0.0, 2.0)):
        i = torch.arange(4, dtype=torch.int32)
        got, want = cf(i, torch.tensor(w), v), f(i, torch.tensor(w), v)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype, (w, v, a, b)
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dynamic, backend", MODES)
def test_a_float_form_decided_equal_to_zero_stays_a_float_with_its_sign(dynamic, backend):
    """`w = t.item() * 0; if w == 0:` substituted sympy's integer 0 for the form: `int_tensor + w` was
    int32 and `w` the int 0; an `.item()` of -0.0 decided `== 0` came back 0.0 (found by the numbers
    family of the fuzzer, seed 101)."""
    def f(x, t):
        w = t.item() * 0
        v = t.item()
        if w == 0 and v == 0:
            return (x > 0).int() + w, w, v
        return (x > 0).int() * w, w, v
    cf = ds.compile(f, dynamic=dynamic, backend=backend)
    for n, t in ((3, -2.5), (4, 1.5), (5, -0.0), (3, 0.0), (0, -3.0)):
        x = torch.randn(n, 3)
        got, want = cf(x, torch.tensor(t)), f(x, torch.tensor(t))
        assert got[0].dtype == want[0].dtype
        torch.testing.assert_close(got[0], want[0])
        assert [(type(a), math.copysign(1.0, a)) for a in got[1:]] == [(type(a), math.copysign(1.0, a)) for a in want[1:]]


@pytest.mark.parametrize("dynamic, backend", MODES)
def test_floor_and_ceil_of_an_infinite_item_raise_overflow_error_as_eager(dynamic, backend):
    """`math.floor(x.max().item())` of an infinity: the printed `int(v // 1)` raised ValueError (inf // 1
    is NaN) where eager's math.floor raises OverflowError (a hunt, sixth session)."""
    def f(x):
        return x + math.floor(x.max().item()) - math.ceil(x.min().item())
    cf = ds.compile(f, dynamic=dynamic, backend=backend)
    for row in ([1.5, 2.0], [1.5, -2.5, 3.0], [float("inf"), 1.0], [float("nan"), 1.0], [-float("inf"), 0.0]):
        x = torch.tensor(row)
        try:
            want = f(x)
        except (OverflowError, ValueError) as e:
            with pytest.raises(type(e)):
                cf(x)
        else:
            torch.testing.assert_close(cf(x), want)
