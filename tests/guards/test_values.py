"""Guards on non-tensor values and global settings: exact values, and every setting the trace read."""
import math

import torch

import dynashape as ds


def test_negative_zero_is_not_zero():
    def f(x, eps):
        return x * math.copysign(1.0, eps)
    cf = ds.compile(f)
    for eps in (0.0, -0.0, 0.0, -0.0):
        torch.testing.assert_close(cf(torch.ones(2), eps), f(torch.ones(2), eps))
    assert cf.stats.compiles == 2


def test_a_float_guard_rejects_an_int_of_the_same_value():
    def f(x, k):
        return x * (k / 2) if isinstance(k, float) else x * (k // 2)
    cf = ds.compile(f)
    for k in (3.0, 3, 3.0):
        torch.testing.assert_close(cf(torch.ones(2), k), f(torch.ones(2), k))


def test_a_global_setting_the_function_read_is_guarded():
    def g(x):
        return x * 2 if torch.are_deterministic_algorithms_enabled() else x * 3
    cg = ds.compile(g)
    cg(torch.ones(2))
    torch.use_deterministic_algorithms(True)
    try:
        torch.testing.assert_close(cg(torch.ones(2)), g(torch.ones(2)))
    finally:
        torch.use_deterministic_algorithms(False)
    torch.testing.assert_close(cg(torch.ones(2)), g(torch.ones(2)))
    assert cg.stats.compiles == 2
    assert "torch.are_deterministic_algorithms_enabled() == False failed" in cg.stats.recompile_reasons[0]


def test_the_default_dtype_is_always_guarded():
    def f(x):
        return x + torch.ones(2) * 0.5  # the factory's dtype is the default dtype
    cf = ds.compile(f)
    cf(torch.ones(2, dtype=torch.float64))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = cf(torch.ones(2, dtype=torch.float64))
        want = f(torch.ones(2, dtype=torch.float64))
    finally:
        torch.set_default_dtype(old)
    assert got.dtype == want.dtype
    assert cf.stats.compiles == 2
