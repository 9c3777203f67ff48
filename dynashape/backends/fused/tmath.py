"""Math the generated Triton kernels call as `TM.name(x)` (imported only where triton is).

On a GPU these are libdevice's functions. Triton's interpreter (TRITON_INTERPRET=1, how the
suite runs every Triton kernel on the CPU) has no libdevice, so there the same names are
formulas over the functions it has, chosen to keep their accuracy: log1p and expm1 by the
classic corrections of log(1 + x) and exp(x) - 1, tanh through expm1.
"""
import os

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def floordiv(a, b):
    """Python's a // b (0 where b == 0: only lanes computing nothing divide by a size 0)."""
    bs = tl.where(b == 0, 1, b)
    q = tl.abs(a) // tl.abs(bs)  # non-negative operands: truncation is floor
    q = tl.where((a < 0) != (bs < 0), -q - tl.where(q * tl.abs(bs) == tl.abs(a), 0, 1), q)
    return tl.where(b == 0, 0, q)


@triton.jit
def mod(a, b):
    bs = tl.where(b == 0, 1, b)
    return tl.where(b == 0, 0, a - floordiv(a, bs) * bs)


@triton.jit
def _bf16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN), as torch rounds; the
    interpreter's own conversion truncates, so both places use this. A float64 (a cross-entropy's
    loss) goes through float32 first, as torch's conversion does."""
    u = x.to(tl.float32).to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return tl.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, r)


@triton.jit
def to_bf16(x):
    return _bf16_bits(x).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def bf16_round(x):
    """x rounded to bfloat16, in float32."""
    return (_bf16_bits(x) << 16).to(tl.float32, bitcast=True)


if INTERPRETED:
    @triton.jit
    def log1p(x):
        u = 1.0 + x
        return tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))

    @triton.jit
    def expm1(x):
        u = tl.exp(x)
        r = tl.where(u == 1.0, x, (u - 1.0) * (x / tl.log(u)))
        r = tl.where(u - 1.0 == -1.0, -1.0, r)
        return tl.where(x > 80.0, u, r)

    @triton.jit
    def tanh(x):
        a = tl.abs(x)
        e = expm1(-2.0 * tl.where(a > 20.0, 20.0, a))
        r = -e / (e + 2.0)
        return tl.where(x < 0, -r, tl.where(x != x, x, r))

    @triton.jit
    def tan(x):
        return tl.sin(x) / tl.cos(x)

    @triton.jit
    def trunc(x):
        return tl.where(x < 0, tl.ceil(x), tl.floor(x))

    @triton.jit
    def pow(a, b):  # C's pow on the special values: -inf and -0.0 are negative bases a fraction may raise
        r = tl.exp(b * tl.log(tl.abs(a)))
        whole = tl.floor(b) == b
        odd = whole & (tl.floor(b * 0.5) * 2.0 != b)
        neg = (a < 0) | ((a == 0) & (1.0 / a < 0))  # -0.0 too: pow(-0.0, -1) = -inf
        r = tl.where(neg & odd, -r, r)
        r = tl.where((a < 0) & (a > float("-inf")) & (whole == 0), float("nan"), r)
        r = tl.where((a == -1.0) & (tl.abs(b) == float("inf")), 1.0, r)
        r = tl.where(b == 0, 1.0, r)
        return tl.where((a == 1.0), 1.0, r)
else:
    from triton.language.extra import libdevice

    @triton.jit
    def log1p(x):
        return libdevice.log1p(x)

    @triton.jit
    def expm1(x):
        return libdevice.expm1(x)

    @triton.jit
    def tanh(x):
        return libdevice.tanh(x)

    @triton.jit
    def tan(x):
        return libdevice.tan(x)

    @triton.jit
    def trunc(x):
        return libdevice.trunc(x)

    @triton.jit
    def pow(a, b):
        return libdevice.pow(a, b)
