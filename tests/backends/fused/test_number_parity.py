"""Python numbers and 0-d tensors in fused ops, against eager: the type eager computes in (a 0-d tensor of
the same category as a dimensioned operand takes that operand's type: `int32 > tensor(2**33)` compares in
int32, with the wrapped 0), the value it computes with (a half-type op casts such an operand to the half
type first, `1.1 ** x` in float16 raises 1.099609375 to x; a mul's or div's second operand is read in
float32 as given), and the numbers eager refuses to convert (`masked_fill(m, 2**40)` of an int32 tensor
raises "value cannot be converted to type int without overflow"), constant or symbolic."""
import importlib.util

import pytest
import torch

import dynashape as ds

from .oracle import bitwise_vs_eager as _check, outcome as _outcome, same_values as _same

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

HALF = [torch.float16, torch.bfloat16]
SHAPES = [(0,), (1,), (1, 1), (3, 5), (4, 33)]


# ---------------------------------------------------------------- 1. half types: the value of a number
NUMS = [1.1, 0.1, 3.3, 1e-4, 257.3]


def _half_ops(x, t):
    out = []
    for c in NUMS + [t, t.double()]:
        out += [c ** x, x ** c, torch.pow(x.abs(), c), x + c, c - x, x * c, c * x, x / c, c / (x.abs() + 1),
                torch.lerp(x, x * 2, c), x > c, c >= x]
    return tuple(v * 1 for v in out)


def _half_cases(dtype):
    g = torch.Generator().manual_seed(0)
    return [((torch.randn(s, generator=g) * 4).to(dtype), torch.tensor(1.1)) for s in SHAPES]


@pytest.mark.parametrize("dtype", HALF)
def test_half_ops_cast_numbers_and_0d_tensors_as_eager(dtype):
    # rpow, pow, add, sub and a 0-d tensor's mul or div (first operand) round the number to the half type,
    # mul/div by a number (second operand) and lerp by a number weight read it in float32
    _check(_half_ops, _half_cases(dtype))


@needs_triton
@pytest.mark.parametrize("dtype", HALF)
def test_half_ops_cast_numbers_and_0d_tensors_as_eager_through_triton(dtype):
    with ds.config.patch(triton="cpu"):
        _check(_half_ops, _half_cases(dtype))


@pytest.mark.parametrize("dtype", HALF)
def test_bfloat16_pow_shortcuts_follow_the_rounded_exponent(dtype):
    # eager's bfloat16 pow picks x * x * x (x * x rounded) for 3.001, whose bfloat16 value is 3
    _check(lambda x: (x ** 3.001 * 1, x ** 2.001 * 1, x ** -2 * 1, x ** 0.5 * 1, x ** -0.5 * 1, x ** -1 * 1),
           [((torch.randn(s, generator=torch.Generator().manual_seed(1)) * 3).to(dtype),) for s in SHAPES])


# ---------------------------------------------------------------- 2. 0-d tensors in type promotion
def _zero_dim_ops(x, t):
    return (x * 1 > t, t <= x * 1, x * 1 == t, (x * 1) + t, torch.where(x > 0, x * 2, t), (x * 1).clamp(min=t),
            (x * 1).masked_fill(x > 2, t))


def _zero_dim_cases(dtype, values, tdtype):
    g = torch.Generator().manual_seed(2)
    cases = []
    for s in SHAPES:
        x = (torch.randn(s, generator=g) * 4).to(dtype)
        if dtype.is_floating_point:  # values a comparison in the 0-d tensor's wider type would tell apart
            x = torch.where(torch.rand(s, generator=g) < 0.5, x, torch.tensor(values[0]).to(dtype))
        cases += [(x, torch.tensor(v, dtype=tdtype)) for v in values]
    return cases


ZERO_DIM = [(torch.int32, [2 ** 33, 2 ** 31 + 5, -2 ** 40, 3], torch.int64),
            (torch.float32, [0.1, 1 / 3, 1e-40], torch.float64),
            (torch.float16, [0.1, 1.1, 1e-5], torch.float32), (torch.bfloat16, [0.1, 3.3], torch.float64)]


@pytest.mark.parametrize("dtype,values,tdtype", ZERO_DIM, ids=lambda v: str(v))
def test_a_0d_tensor_of_the_same_category_takes_the_dimensioned_type(dtype, values, tdtype):
    fn = _zero_dim_ops if not dtype.is_floating_point else (lambda x, t: _zero_dim_ops(x, t)[:4])
    _check(fn, _zero_dim_cases(dtype, values, tdtype))


@needs_triton
@pytest.mark.parametrize("dtype,values,tdtype", ZERO_DIM, ids=lambda v: str(v))
def test_a_0d_tensor_of_the_same_category_takes_the_dimensioned_type_through_triton(dtype, values, tdtype):
    fn = _zero_dim_ops if not dtype.is_floating_point else (lambda x, t: _zero_dim_ops(x, t)[:4])
    with ds.config.patch(triton="cpu"):
        _check(fn, _zero_dim_cases(dtype, values, tdtype))


def _wrapping(x):  # numbers eager wraps into the integer type without a check
    return x * 1 + 2 ** 40, x * 1 > 2 ** 40, 2 ** 63 + x * 1, x * 1 - 2 ** 32 * 3, (x * 1) * (2 ** 62 + 3)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_numbers_wrap_as_eager(dtype):
    _check(_wrapping, [(torch.arange(-3, -3 + s[0], dtype=dtype).reshape(s[0], 1),) for s in SHAPES])


@needs_triton
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_numbers_wrap_as_eager_through_triton(dtype):
    with ds.config.patch(triton="cpu"):
        _check(_wrapping, [(torch.arange(-3, -3 + s[0], dtype=dtype).reshape(s[0], 1),) for s in SHAPES])


# ---------------------------------------------------------------- 3. numbers eager refuses to convert
OVERFLOW = {  # (tensor type, number): eager raises for these calls
    "where": lambda x, c: torch.where(x > 0, x * 3, c) * 1,
    "where_first": lambda x, c: torch.where(x > 0, c, x * 3) * 1,
    "masked_fill": lambda x, c: (x * 3).masked_fill(x > 0, c) * 1,
    "clamp": lambda x, c: (x * 3).clamp(max=c) * 1,
    "clamp_min": lambda x, c: (x * 3).clamp_min(c) * 1,
    "pow": lambda x, c: (x * 3) ** c * 1,
    "alpha": lambda x, c: torch.add(x * 1, x, alpha=c),
}
TOO_BIG = [(torch.int32, 2 ** 40), (torch.int32, -2 ** 31 - 1), (torch.int64, 2 ** 63), (torch.float16, 1e6),
           (torch.float32, 1e39), (torch.bfloat16, 1e39), (torch.int64, -2 ** 63 - 1)]


@pytest.mark.parametrize("dtype,c", TOO_BIG, ids=lambda v: str(v))
@pytest.mark.parametrize("name", sorted(OVERFLOW))
def test_a_number_that_does_not_fit_raises_as_eager(name, dtype, c):
    fn = OVERFLOW[name]
    ds.reset()
    for s in [(2, 4), (1,)]:
        x = torch.arange(-4, -4 + s[-1], dtype=torch.int32).repeat(s[0] if len(s) > 1 else 1).reshape(s).to(dtype)
        with ds.config.patch(fused_sync=True):
            _same(_outcome(ds.compile(lambda x: fn(x, c), backend="fused"), x), _outcome(fn, x, c))


@pytest.mark.parametrize("dtype,big", [(torch.int32, 2 ** 40), (torch.float16, 70000.0), (torch.float32, 1e39)],
                         ids=lambda v: str(v))
def test_a_symbolic_number_that_does_not_fit_raises_as_eager(dtype, big):
    # the number is an argument (symbolic with dynamic=True): the kernel serves the values that fit, the
    # others run the torch calls, which raise as eager does
    def f(x, c):
        return (x * 3).masked_fill(x > 0, c) * 1, (x * 2).clamp(max=c), torch.where(x > 1, c, x * 1)

    small = 5 if isinstance(big, int) else 1.5
    x = torch.arange(-4, 4, dtype=torch.int32).reshape(2, 4).to(dtype)
    cases = [(x, small), (x, big), (x, -big), (x[:1], small), (x, small)]
    _check(f, cases)


@needs_triton
def test_a_number_that_does_not_fit_raises_as_eager_through_triton():
    with ds.config.patch(triton="cpu"):
        test_a_symbolic_number_that_does_not_fit_raises_as_eager(torch.int32, 2 ** 40)
        for name in ("masked_fill", "where", "clamp"):
            test_a_number_that_does_not_fit_raises_as_eager(name, torch.int32, 2 ** 40)
