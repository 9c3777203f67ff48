"""Bugs the differential suite, the fuzzer and the model suite found with backend='fused',
one test each, reduced to the smallest program that showed them."""
import torch

import dynashape as ds

from .oracle import check_fused


def test_a_dynamic_float_argument_reaches_the_kernel_as_a_double():
    # specialize_float=False: `scale` is a symbol zf0; ctypes refused a float for an int64 slot
    def f(x, scale):
        return x * scale + scale

    with ds.config.patch(specialize_float=False):
        check_fused(f, [(torch.randn(3, 5), s) for s in (0.5, 1.5, -2.25)], compiles=1)


def test_clamp_with_a_nan_bound_gives_nan_as_torch_does():
    # the kernel's `x < lo ? lo : x` kept x where torch.clamp returns the NaN bound
    nan = float("nan")
    check_fused(lambda x: (x * 2).clamp(min=nan) + 1, [(torch.randn(4, 5),)], equal_nan=True)
    check_fused(lambda x: (x * 2).clamp(max=nan) + 1, [(torch.randn(4, 5),)], equal_nan=True)
    check_fused(lambda x, lo: (x * 2).clamp(min=lo) + 1,
                [(torch.randn(4, 5), torch.full((4, 5), nan)), (torch.randn(6, 3), torch.randn(6, 3))], equal_nan=True)


def test_int32_amax_and_amin_start_from_the_int32_limits():
    # the accumulator started at INT64_MIN truncated to int32, i.e. 0: the amax of negative rows was 0
    def f(x):
        v = (x * 10).int()
        return v.amax(-1) + 1, v.amin(-1) - 1

    check_fused(f, [(-torch.rand(4, 5) - 1,), (torch.rand(6, 7) + 1,)])
