"""float16 and bfloat16 regions against eager on the CPU, to the bit: what eager computes in float32
and where it rounds to the half type (each op's result; a Python number added or compared in
the half type, multiplied or divided by in float32; a norm's default eps float32's), forward and
backward. A rounding in another place moves a value by an ulp of the half type (0.4% in bfloat16),
which a comparison, an integer cast or a floor turns into another answer."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds

HALF = [torch.bfloat16, torch.float16]


def _run(fn, x, y, grad):
    x, y = x.clone().requires_grad_(grad), y.clone().requires_grad_(grad)
    out = fn(x, y)
    if not grad:
        return [out]
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(99)).to(out.dtype)
    out.backward(w)
    return [out.detach(), x.grad, y.grad]


def mismatches(fn, dtype, grad=False, scale=2.0):
    """Elements (of the outputs and, with `grad`, the inputs' gradients) where the fused kernels
    differ from eager, over a few shapes; the compiled entry must run its kernels."""
    cf = ds.compile(fn, dynamic=True, backend="fused")
    bad = 0
    for seed, shape in enumerate([(8, 64), (5, 33), (3, 7)]):
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(shape, generator=g) * scale).to(dtype)
        y = torch.randn(shape, generator=g).to(dtype)
        for a, b in zip(_run(fn, x, y, grad), _run(cf, x, y, grad)):
            if a is None and b is None:
                continue
            assert b is not None and a.dtype == b.dtype and a.shape == b.shape
            bad += int(((a != b) & ~(a.isnan() & b.isnan())).sum())
    assert all(e.fn.fused for e in cf.entries), [e.fn.error for e in cf.entries]
    return bad


@pytest.mark.parametrize("dtype", HALF)
def test_rms_norm_without_eps_uses_float32s_eps_as_eager_does(dtype):
    # eager's default eps is float32's machine epsilon (1.2e-7) for half inputs; the half type's own
    # (7.8e-3 for bfloat16) made inputs of scale 1e-2 come out 3.9 off where the largest is 4.5
    def f(x, y):
        return F.rms_norm(x, x.shape[-1:]) * 2

    assert mismatches(f, dtype, scale=1e-2) == 0
    cf = ds.compile(f, dynamic=True, backend="fused")
    g = torch.Generator().manual_seed(1)
    x, w = (torch.randn(4, 16, generator=g) * 1e-2).to(dtype), torch.randn(4, 16, generator=g)
    (g1,), (g2,) = (torch.autograd.grad((fn(x.requires_grad_(), x).float() * w).sum(), x) for fn in (f, cf))
    # the same eps: an ulp or two of the half type apart at most (with the half type's eps: 9x apart)
    torch.testing.assert_close(g2, g1, rtol=2 ** -6, atol=2 ** -7 * float(g1.float().abs().max()))


@pytest.mark.parametrize("dtype", HALF)
def test_comparisons_with_a_python_number_compare_with_it_in_the_half_type(dtype):
    # `x > 0.1` in bfloat16 compares with bfloat16(0.1) = 0.10009765625: x = 0.1 (that value) is not
    # above it; against float32's 0.1 it was
    cs = [0.1, 0.3, 0.7, -0.1, 1 / 3, 2.5, 1e-3]
    vals = torch.tensor([c * k for c in cs for k in (1.0, 1.001, 0.999)]).to(dtype)

    def f(x):
        return [x > c for c in cs] + [x >= c for c in cs] + [x < c for c in cs] + [x <= c for c in cs] + \
               [x == c for c in cs] + [(x * 2) != c for c in cs] + [c < x for c in cs]

    cf = ds.compile(f, dynamic=True, backend="fused")
    for x in (vals, vals.repeat(5)):
        assert all(torch.equal(a, b) for a, b in zip(f(x), cf(x)))
    assert cf.entries[0].fn.fused


ELEMENTWISE = {  # a Python number in a half-type op: eager narrows it for add/sub, not for mul/div
    "add": lambda x, y: x + 0.1, "sub": lambda x, y: x - 0.3, "rsub": lambda x, y: 0.7 - x,
    "mul": lambda x, y: x * 0.1, "div": lambda x, y: x / 0.3, "div3": lambda x, y: x / 3,
    "rdiv": lambda x, y: 3 / (y.abs() + 0.5), "rdiv_int": lambda x, y: 3 / (x * 4).long().clamp(min=1),
    "cube": lambda x, y: x.pow(3), "sum_of_rounded_products": lambda x, y: y * x + y * (1 - x),
}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_ops_round_where_eager_rounds(dtype, name):
    # rdiv: `3 / t` is t.reciprocal() * 3 in eager (two roundings); cube: bfloat16's rounds x * x first;
    # sum_of_rounded_products: g++ 12 with AVX512-FP16 (-march=native) kept float16 products unrounded
    f = ELEMENTWISE[name]
    assert mismatches(lambda x, y: f(x, y) * 2, dtype) == 0


GRADS = {  # the rules whose rounding is not one op's (and a few that are, as controls)
    "exp": lambda x, y: x.exp(), "sin": lambda x, y: x.sin(), "tanh": lambda x, y: x.tanh(),
    "sigmoid": lambda x, y: x.sigmoid(), "silu": lambda x, y: F.silu(x), "log": lambda x, y: (x.abs() + 0.5).log(),
    "sqrt": lambda x, y: (x.abs() + 0.5).sqrt(), "reciprocal": lambda x, y: (x.abs() + 0.5).reciprocal(),
    "mul": lambda x, y: x * y, "div": lambda x, y: x / (y.abs() + 0.5), "rdiv": lambda x, y: 3 / (y.abs() + 0.5),
    "pow3": lambda x, y: x.pow(3), "where": lambda x, y: torch.where(x > y, x, y * 2),
    "sum": lambda x, y: x.sum(-1, keepdim=True) * y, "mean": lambda x, y: x.mean(-1, keepdim=True) * y,
    "softmax": lambda x, y: x.softmax(-1) * y, "broadcast": lambda x, y: x * y[0],
    "chain": lambda x, y: (x * y).sigmoid() * x, "reused": lambda x, y: x.sigmoid() * x,
}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(GRADS))
def test_generated_backward_rounds_where_eagers_backward_rounds(dtype, name):
    # eager's backward kernels for tanh, sigmoid (bfloat16), silu, gelu, the softmaxes and the norms compute
    # in float32 and round once; its formulas (reciprocal: -g * (r * r)) round after each op, in their order
    # (gelu, erf, rsqrt: the same formulas, but float32 erf/tanh/exp implementations apart by a few ulps
    # round a few elements in a thousand to the neighbouring half value: not here)
    f = GRADS[name]
    assert mismatches(lambda x, y: f(x, y) * 2, dtype, grad=True) == 0


@pytest.mark.parametrize("dtype", HALF)
def test_a_zero_dim_tensor_of_another_type_is_narrowed_like_a_number(dtype):
    # type promotion keeps x's half type, and eager casts the 0-d operand to it before a sub or add
    def f(x, t, n):
        return (t - x) * 2, (x + n) * 2, (x * t) * 2

    cf = ds.compile(f, dynamic=True, backend="fused")
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(0)) * 2).to(dtype)
    for t, n in ((torch.tensor(0.1), torch.tensor(257)), (torch.tensor(0.3, dtype=torch.float64), torch.tensor(3))):
        assert all(torch.equal(a, b) for a, b in zip(f(x, t, n), cf(x, t, n)))
    assert all(e.fn.fused for e in cf.entries)


@pytest.mark.parametrize("dtype", HALF)
def test_an_integer_tensor_in_a_half_type_op_is_rounded_to_the_half_type_first(dtype):
    # eager casts the operands to the op's type: x + positions adds 256 for 257 in bfloat16
    def f(x, i):
        return (x + i) * 2, (x * i) * 2, x > i, (i - x) * 2, torch.where(i > 300, x, i)

    cf = ds.compile(f, dynamic=True, backend="fused")
    g = torch.Generator().manual_seed(0)
    for n in (8, 33):
        x = (torch.randn(n, 16, generator=g) * 4).to(dtype)
        i = torch.randint(-3000, 3000, (n, 16), generator=g)
        assert all(torch.equal(a, b) for a, b in zip(f(x, i), cf(x, i)))
    assert all(e.fn.fused for e in cf.entries)
