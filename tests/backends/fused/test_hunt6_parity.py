"""Kernels against eager where eager's arithmetic has a rule of its own: integers wrap (two's complement), a
symbolic exponent takes the shortcut pow takes for its value, float32 var/std work in float64, hardtanh is
clamp, bool tensors some kernels refuse, and float32 sums past float32's range."""
import importlib.util

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds

from .oracle import bitwise_vs_eager as _check

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


# ---------------------------------------------------------------- 1. integers wrap
def _overflowing(x):
    return (x + 1) > x, x.abs() >= 0, (x * x) >= 0, (x - 1) < x, torch.square(x) >= 0, -x < 0, x * 3


def _extremes(dtype):
    ii = torch.iinfo(dtype)
    big = 3037000500 if dtype == torch.int64 else 46341  # its square wraps negative
    return [(torch.tensor(v, dtype=dtype),) for v in ([ii.max, ii.min, 3, -4, big], [7, ii.max, ii.min, big, 0, -1, 5])]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_overflow_wraps_as_eager_and_is_not_folded(dtype):
    # signed overflow is undefined in C++: g++ -O3 folded `x + 1 > x` and `abs(x) >= 0` to true (-fwrapv)
    _check(_overflowing, _extremes(dtype))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_overflow_wraps_as_eager_through_triton(dtype):
    with ds.config.patch(triton="cpu"):
        _check(_overflowing, _extremes(dtype))


# ---------------------------------------------------------------- 2. x ** c, c symbolic
SPECIAL = [-0.0, 0.0, -float("inf"), float("inf"), 4.0, 0.25, -1.0, 16.0, float("nan"), -2.0]


def _pow_cases(dtype, exponents):
    return [(torch.tensor(SPECIAL, dtype=dtype), c) for c in exponents]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_a_symbolic_exponent_takes_eagers_pow_shortcut_for_its_value(dtype):
    # 0.5: sqrt (sqrt(-0.0) = -0.0, sqrt(-inf) = NaN, where pow gives +0.0, +inf), -0.5: rsqrt, -1: 1 / x,
    # 2, 3, -2: products; bfloat16 compares the rounded exponent (2.004 squares); 0.5 + 1e-12 is pow's
    _check(lambda x, c: (x * 1) ** c * 1, _pow_cases(dtype, [2.0, 0.5, -0.5, -1.0, 3.0, -2.0, 0.5, 1.0, 0.0]))
    if dtype == torch.bfloat16:
        _check(lambda x, c: (x * 1) ** c * 1, _pow_cases(dtype, [2.0, 2.004, -2.004, 3.001]))


def test_a_symbolic_exponent_close_to_a_shortcut_is_pow():
    _check(lambda x, c: (x * 1) ** c * 1, _pow_cases(torch.float32, [0.5, 0.5 + 1e-12, -0.5 - 1e-12, -1.0]))


def test_a_symbolic_int_exponent_takes_eagers_pow_shortcut():
    _check(lambda x, n: (x * 1) ** n * 1, _pow_cases(torch.float32, [2, -1, 3, -2, 1, 0]))


@needs_triton
def test_a_symbolic_exponent_takes_eagers_pow_shortcut_through_triton():
    # the kernel compares c - 0.5 (computed by the wrapper in float64) with 0: Triton reads floats as float32
    with ds.config.patch(triton="cpu"):
        _check(lambda x, c: (x * 1) ** c * 1, _pow_cases(torch.float32, [2.0, 0.5, -0.5, -1.0, 0.5 + 1e-12]))


# ---------------------------------------------------------------- 3. float32 var/std work in float64
def _var_std(x):
    y = x * 1
    return y.std(-1), y.var(-1, keepdim=True) * 1e30, y.std(-1, correction=0) / y.abs().amax(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [1e-25, 1e-21, 1e21, 1e25])
def test_float32_std_and_var_of_tiny_and_huge_values_are_eagers(dtype, scale):
    # eager's CPU kernel (WelfordOps<float, double>) squares the deviations in float64: in float32 they
    # were 0 below 1e-19 and inf past 1.8e19
    if dtype == torch.bfloat16 and scale > 1e20:
        scale = 1e30  # (bfloat16 holds 1e38)
    g = torch.Generator().manual_seed(0)
    ds.reset()
    cf = ds.compile(_var_std, dynamic=True, backend="fused")
    for shape in ((4, 6), (3, 9), (2, 33)):
        x = (torch.randn(shape, generator=g) * scale).to(dtype)
        torch.testing.assert_close(cf(x), _var_std(x))
    assert any(e.fn.fused for e in cf.entries)


# ---------------------------------------------------------------- 4. hardtanh is clamp; elu's zeros
def _hardtanh(x):
    return (F.hardtanh(x * 1, float("nan"), 1.0) * 1, torch._C._nn.hardtanh(x * 1, 0.5, 0.25) * 1,
            F.hardtanh(x * 1, -0.0, 0.0) * 1, F.hardtanh(x * 1, -float("inf"), 0.5))


def _signed(dtype, n):
    x = torch.linspace(-2, 2, n).to(dtype)
    x[0], x[1] = -0.0, float("nan")
    return (x,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_hardtanh_is_clamp_with_a_nan_bound_and_reversed_bounds(dtype):
    # eager: min(max(x, min_val), max_val) (NaN bound -> NaN; min_val > max_val -> max_val), not
    # `x < lo ? lo : (x > hi ? hi : x)`
    _check(_hardtanh, [_signed(dtype, n) for n in (5, 9)])


@needs_triton
def test_hardtanh_is_clamp_through_triton():
    with ds.config.patch(triton="cpu"):
        _check(_hardtanh, [_signed(torch.float32, n) for n in (5, 9)])


def test_hardtanh_with_symbolic_bounds_checks_them_each_call():
    # F.hardtanh raises ValueError for min_val > max_val at each call; torch._C._nn.hardtanh clamps
    cases = [(torch.linspace(-2, 2, 7), a, b) for a, b in ((-0.5, 0.5), (0.5, 0.25), (float("nan"), 1.0))]
    _check(lambda x, a, b: F.hardtanh(x * 1, a, b) * 1, cases, fused=False)
    _check(lambda x, a, b: torch._C._nn.hardtanh(x * 1, a, b) * 1, cases)


def _exact_for_elu(n):  # values whose elu is exact (expm1(-inf) = -1): no ulp of expm1 in the comparison
    return (torch.tensor([-0.0, 0.0, float("nan"), -float("inf"), 1.5, 2.0] * n),)


@pytest.mark.parametrize("alpha", [float("nan"), -0.0, float("inf"), 2.0])
def test_elu_of_a_zero_is_the_zero_whatever_alpha(alpha):
    _check(lambda x: F.elu(x * 1, alpha) * 1, [_exact_for_elu(n) for n in (1, 7)])


def test_elu_with_scale_and_input_scale_is_eagers():
    # torch._C._nn.elu(x, alpha, scale, input_scale): the kernel has no scales, torch's call applies them
    _check(lambda x: torch._C._nn.elu(x * 1, 1.0, 2.0, 3.0) * 1, [_exact_for_elu(2)], fused=False)
    _check(lambda x: F.elu(x * 1, 0.5, False) * 1, [_exact_for_elu(2)])


# ---------------------------------------------------------------- 5. bool tensors eager's kernels refuse
BOOL_TENSOR_CALLS = {
    "clamp_both": lambda b, c: (b | c).clamp(min=b, max=c) | b,  # "clamp_cpu" not implemented for 'Bool'
    "clamp_min": lambda b, c: (b | c).clamp(b) | b,  # runs (clamp_min's kernel takes bool)
    "clamp_max": lambda b, c: torch.clamp(b & c, max=c) & b,
    "pow": lambda b, c: ((b | c) ** c) | b,  # "pow" not implemented for 'Bool'
    "maximum": lambda b, c: torch.maximum(b | c, c) & b,
}


@pytest.mark.parametrize("name", sorted(BOOL_TENSOR_CALLS))
def test_bool_tensor_arguments_eager_refuses_raise_as_eager(name):
    g = torch.Generator().manual_seed(3)
    cases = [(torch.rand(s, generator=g) > 0.5, torch.rand(s, generator=g) > 0.3) for s in ((3, 5), (2, 7))]
    _check(BOOL_TENSOR_CALLS[name], cases, fused=False)


# ---------------------------------------------------------------- 6. float32 sums past float32's range
def _sums(x):
    y = x * 1
    return y.sum(-1), y.mean(-1), y.sum(0), y.mean(0), y.mean(), y.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_float32_sum_past_float32s_range_is_inf_as_eagers(dtype):
    # no cancellation (one sign a tensor): eager's partial sums overflow in any order, and the kernel's
    # float64 total does once rounded; a column mean is that sum divided (it was float64 sum / n, finite)
    big = torch.finfo(dtype).max * 0.75
    rows = torch.tensor([[big, big, big], [1.0, 2.0, 3.0], [big, 1.0, 2.0]], dtype=dtype)
    _check(_sums, [(x,) for x in (rows, -rows, rows.t().contiguous(), torch.cat([rows, rows], 1))])
