"""The kernels round as eager's kernels do, bit for bit: a product and a sum of two ops are two roundings
(g++ contracted them into one fused multiply-add), the ops whose eager kernel fuses them (add and sub
with alpha, addcmul, lerp) fuse them too, and a float converted to an integer gives x86's answers (NaN
and out of range: the minimum integer; a narrower type: the int32's low bits; -0.5 -> 0, never -0.0).
Each program runs as C++ kernels and as Triton kernels (Triton's interpreter on CPU tensors)."""
import importlib.util

import pytest
import torch

import dynashape as ds
from dynashape.backends.fused import triton_run

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in Triton's interpreter: NaN casts

HALF = (torch.float16, torch.bfloat16)
INF, NAN = float("inf"), float("nan")


@pytest.fixture(params=["cpp", "triton"])
def kernels(request):
    if request.param == "triton" and importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    with ds.config.patch(triton="cpu" if request.param == "triton" else "off", fused_sync=True):
        yield request.param


def _bitwise(got, want):
    """Same dtype and values, NaN where eager has NaN, and the sign of every zero."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if want.is_floating_point():
        num = want == want
        assert torch.equal(torch.signbit(got[num]), torch.signbit(want[num])), (got, want)


def _run(fn, *args, fused=True):
    """fn compiled (fresh: no entry of an earlier test's lambda) against eager, on these args and on
    their first elements (a vector loop and its scalar tail)."""
    ds.reset()
    cf = ds.compile(fn, backend="fused", dynamic=True)
    launches = triton_run.counters["launches"]
    for n in (args[0].shape[0], 7):
        a = [x[:n] for x in args]
        _bitwise(cf(*[x.clone() for x in a]), fn(*[x.clone() for x in a]))
    if fused:
        assert cf.entries[0].fn.fused, cf.entries[0].fn.error
        if ds.config.triton == "cpu":
            assert triton_run.counters["launches"] > launches, "no Triton kernel ran"


def _randn(dt, n=67):
    return torch.randn(n, dtype=torch.float64).to(dt)


# ---------------------------------------------------------------- products and sums
TWO_ROUNDINGS = {
    "sign(a * b - c)": lambda a, b, c: torch.sign(a * b - c),  # c = eager's a * b: 0 everywhere
    "a * b - c == 0": lambda a, b, c: (a * b - c) == 0,
    "a * 2.5 + b * 3": lambda a, b, c: a * 2.5 + b * 3,
    "a * b + c": lambda a, b, c: a * b + c,
    "c - a * b": lambda a, b, c: c - a * b,
}


@pytest.mark.parametrize("name", sorted(TWO_ROUNDINGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_a_product_and_a_sum_round_twice_as_eager(kernels, dtype, name):
    fn = TWO_ROUNDINGS[name]
    a, b = _randn(dtype), _randn(dtype)
    _run(fn, a, b, a * b)
    if dtype in HALF:  # a half-type product read in float32 by the sum: the kernel computes both in float
        _run(fn, a, b.float(), (a * b).float())


FUSED_BY_EAGER = {
    "add alpha": lambda a, b, c: torch.add(a * 1, b, alpha=0.3),
    "sub alpha": lambda a, b, c: torch.sub(a * 1, b, alpha=0.3),
    "rsub alpha": lambda a, b, c: torch.rsub(a * 1, b, alpha=0.3),
    "addcmul": lambda a, b, c: torch.addcmul(c * 1, a, b, value=0.5),
    "addcmul value 1": lambda a, b, c: torch.addcmul(c * 1, a, b),
    "lerp 0.3": lambda a, b, c: torch.lerp(a * 1, b, 0.3),
    "lerp 0.7": lambda a, b, c: torch.lerp(a * 1, b, 0.7),
    "lerp -2.5": lambda a, b, c: torch.lerp(a * 1, b, -2.5),
    "lerp tensor": lambda a, b, c: torch.lerp(a * 1, b, c),  # |weight| on both sides of 0.5
}


@pytest.mark.parametrize("name", sorted(FUSED_BY_EAGER))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_ops_whose_eager_kernel_fuses_a_multiply_add_round_once_as_it_does(kernels, dtype, name):
    # (in a half type, add with alpha stays a torch call: compared with eager all the same)
    _run(FUSED_BY_EAGER[name], _randn(dtype), _randn(dtype), _randn(dtype), fused=dtype not in HALF)


# ---------------------------------------------------------------- float -> integer
EDGES = [NAN, INF, -INF, -0.5, 0.5, -0.0, 0.0, -0.99, 0.99, 1e10, -1e10, 2.0 ** 31, -2.0 ** 31, 2.0 ** 31 - 128,
         -2.0 ** 31 - 1000, 2.0 ** 32 + 5, -2.0 ** 32 - 5, 2.0 ** 63, -2.0 ** 63, 9.2e18, -9.2e18, 1e20, 3.7, -3.7,
         255.9, -129.0, 300.0, -200.0, 65536.5, 127.5, -128.5, 32767.9, -32768.9, 4294967040.0]


def _edges(dt):
    x = torch.tensor(EDGES, dtype=torch.float64)
    if dt == torch.float64:  # the values next to int32's limits, in double
        x = torch.cat([x, torch.tensor([2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5, -2.0 ** 31 - 1, 2.0 ** 31 - 1.5])])
    return torch.cat([x, x.flip(0), x]).to(dt)  # long enough for the vector loop, in different lanes


CASTS = {
    "x.to(dt)": lambda x, dt: (x * 1).to(dt),
    "x.to(dt).to(x.dtype)": lambda x, dt: (x + 0).to(dt).to(x.dtype) * 2,
    "1 / x.to(dt).float()": lambda x, dt: 1 / (x * 1).to(dt).float(),  # -inf where -0.5 came back -0.0
    "x.to(dt) + 1": lambda x, dt: (x * 1).to(dt) + 1 if dt != torch.bool else (x * 1).to(dt) | (x > 0),
}


@pytest.mark.parametrize("name", sorted(CASTS))
@pytest.mark.parametrize("target", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_a_float_to_integer_cast_gives_eagers_answers_at_nan_infinities_and_out_of_range(kernels, dtype, target,
                                                                                        name):
    fn = CASTS[name]
    # int8, uint8 and int16 are no kernel's types: those programs stay torch calls
    _run(lambda x: fn(x, target), _edges(dtype), fused=target in (torch.int32, torch.int64, torch.bool))
