"""Lowering oracles: every op family the loop IR expresses, fused vs eager over many shapes
(odd sizes, non-contiguous inputs, broadcasting, dtypes); sizes 0 and 1 (specialized) too."""
import re

import pytest
import torch
import torch.nn.functional as F

from .oracle import check_fused, regions

SHAPES = [(3, 5), (8, 33), (17, 64), (2, 130)]


def cases2d(*extra, dtype=torch.float32):
    return [(torch.randn(*s, dtype=dtype),) + tuple(e(s) for e in extra) for s in SHAPES]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def unary_chain(x):
    return (torch.sigmoid(x) * torch.tanh(x) + x.exp().log1p() - x.abs().sqrt() + x.sin() * x.cos() ** 2
            + torch.rsqrt(x.abs() + 1) + x.expm1() / 3 + torch.erf(x) - x.reciprocal().clamp(-2, 2))


def activations(x):
    return (F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x) + F.leaky_relu(x, 0.1) + F.softplus(x)
            + F.elu(x) + F.hardtanh(x) + x.relu() + F.relu6(x * 4) + F.hardsigmoid(x) + F.hardswish(x) + F.mish(x))


def where_masks(x):
    y = torch.where(x > 0, x, 0.1 * x).clamp(-1.0, 1.0)
    return y.masked_fill(x < -0.5, 0.0) + 1, (x >= 0.2) & (x != 0.3), torch.maximum(x, -x * 2) - torch.minimum(x, y)


def scalars_and_pow(x):
    return 1 - x, 2 / (x.abs() + 1), x ** 2 + x.pow(3) - (x.abs() + 1) ** 0.5 + (x.abs() + 1).pow(1.7), -x * 3


@pytest.mark.parametrize("fn", [unary_chain, activations, where_masks, scalars_and_pow])
def test_pointwise_families_match_eager(fn):
    check_fused(fn, cases2d())


def broadcast(x, w, b):
    return F.gelu(x * w + b) * torch.sigmoid(x)


def test_broadcast_operands_of_lower_rank():
    cases = [(torch.randn(4, s, c), torch.randn(c), torch.randn(s, 1)) for s, c in [(3, 5), (7, 16), (2, 9)]]
    check_fused(broadcast, cases)


def test_non_contiguous_inputs_take_the_strided_path():
    cases = [(torch.randn(c, r).t(), torch.randn(c)[None].expand(r, c), torch.randn(2 * c)[::2])
             for r, c in [(3, 5), (9, 31)]]
    assert not cases[0][0].is_contiguous()
    check_fused(broadcast, cases)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_dtypes_compute_exactly_or_in_float32(dtype):
    def f(x, w):
        return F.silu(x * w) + x.softmax(-1) * 2
    cases = [(torch.randn(s, c, dtype=dtype), torch.randn(c, dtype=dtype)) for s, c in [(3, 5), (8, 40)]]
    check_fused(f, cases)


def test_casts_integers_and_bools():
    def f(x, i):
        m = x > 0
        return (x * 3).long() + i, m.float() * x, (i * 2).double() / 3, x.to(torch.float16).float() + x.half()
    cases = [(torch.randn(s, c), torch.randint(-5, 5, (s, c))) for s, c in [(3, 5), (6, 11)]]
    check_fused(f, cases)


def reductions(x):  # (B, T)
    z = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
    return (z * 2, x.sum(-1) + x.amax(-1), (x * x).amin(1, keepdim=True) - 1, x.var(1, unbiased=False) * 3,
            torch.logsumexp(x * 2, -1), x.exp().mean(1) + 1)


def test_reductions_over_the_last_dim():
    check_fused(reductions, cases2d())


def test_reductions_over_trailing_dims():
    def f(x):
        return x - x.mean((1, 2), keepdim=True) + x.var(dim=(-2, -1), keepdim=True, correction=0)
    check_fused(f, [(torch.randn(4, s, c),) for s, c in [(3, 5), (6, 17)]])


def composites(x, w, b):
    return (F.layer_norm(x, (x.size(-1),), w, b).relu() + x, x.softmax(-1) * 3, F.log_softmax(x * 2, dim=-1),
            F.rms_norm(x, (x.size(-1),), w) * 2, F.layer_norm(x * 2, (x.size(-1),)) - 1)


def test_composites_softmax_layer_norm_rms_norm():
    cases = [(torch.randn(s, c), torch.randn(c), torch.randn(c)) for s, c in [(3, 5), (9, 64), (4, 129)]]
    check_fused(composites, cases)


def test_softmax_of_masked_scores_with_inf():
    def f(x):
        mask = torch.ones(x.size(-2), x.size(-1)).tril() == 0
        return (x * 0.5).masked_fill(mask, float("-inf")).softmax(-1)
    check_fused(f, [(torch.randn(2, s, s),) for s in (3, 8, 17)])


def test_views_become_index_arithmetic():
    def f(x):  # (B, T, C) with C even
        y = (x * 2).view(x.size(0), x.size(1), 2, x.size(2) // 2).transpose(1, 2)
        z = y.reshape(x.size(0), 2, -1) + 1
        return z.sigmoid(), (x.permute(0, 2, 1) * 3).contiguous().exp(), (x.unsqueeze(1) + 1).squeeze(1).relu()
    check_fused(f, [(torch.randn(2, t, c),) for t, c in [(3, 4), (5, 10)]])


def test_eval_dropout_and_gated_mlp_pieces_fuse():
    def f(h, g):
        return F.dropout(F.silu(g) * h, p=0.1, training=False) * 2, F.gelu(g) * h
    cases = [(torch.randn(s, c), torch.randn(s, c)) for s, c in [(3, 8), (7, 50)]]
    cf = check_fused(f, cases)
    assert regions(cf)


@pytest.mark.parametrize("shape", [(0, 5), (1, 7), (5, 1), (1, 1)])
def test_sizes_zero_and_one(shape):
    check_fused(reductions if shape[0] and shape[1] > 1 else broadcast_self, [(torch.randn(*shape),)], fused=False, compiles=None)


def broadcast_self(x):
    return F.gelu(x * 2 + 1) * torch.sigmoid(x)


def test_scalar_tensors_and_symbolic_scalars():
    def f(x, s):
        return (x * x.size(1) + s).relu() * (x.size(0) + 0.5)
    check_fused(f, [(torch.randn(a, b), torch.tensor(2.0)) for a, b in [(3, 4), (6, 9)]])


def test_nans_propagate_through_reductions_like_eager():
    def f(x):
        return x.amax(-1), x.amin(-1, keepdim=True) * 2, (x * 2).softmax(-1), torch.logsumexp(x + 1, -1)
    x = torch.randn(4, 9)
    x[1, 3] = float("nan")
    x[2, :] = float("-inf")
    check_fused(f, [(x,)], equal_nan=True)


def test_infinite_rows_give_eager_results_in_logsumexp_softmax_and_cross_entropy():
    # logsumexp shifts by a finite max (an all -inf row gives -inf, a +inf gives +inf); softmax and
    # cross-entropy shift by the raw max (a +inf gives NaN, as torch's kernels do)
    def f(x, t):
        y = x * 2
        return torch.logsumexp(y, -1), (x + 1).softmax(-1), F.cross_entropy(y, t, reduction="none")
    x = torch.randn(5, 7)
    x[1, :] = float("-inf")
    x[2, 4] = float("inf")
    x[3, 0] = float("-inf")
    x[4, :] = float("inf")
    check_fused(f, [(x, torch.tensor([0, 1, 2, 3, 4]))], equal_nan=True)


def half_precision_rounding(dtype):
    """Each op of a half-type tensor rounds its result to that type in eager: integer casts,
    comparisons, floor and casts to another type of the fused result see the same values (it kept
    float32's: `(x * 10).long()` of a bfloat16 x gave other integers)."""
    def f(x, w):
        y = x * 10
        return y.long(), y.to(torch.int32) % 7, (x * w > 1.5), (x * 7 + w).floor(), (x * 3).float(), \
            (x / 3).to(torch.float16 if dtype == torch.bfloat16 else torch.bfloat16), (y * y).sum(-1).long()
    return f, [(torch.randn(n, 257, dtype=dtype), torch.randn(257, dtype=dtype)) for n in (3, 40)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_results_are_rounded_per_op_as_eager_s(dtype):
    f, cases = half_precision_rounding(dtype)
    check_fused(f, cases, rtol=0, atol=0)


def test_bitwise_ops_on_integers_and_same_dtype_casts_keep_eager_semantics():
    def f(x, i):
        y = x * 2
        return (i & 6) + 1, (i | 1) * 2, y.float(), (y + 1).exp()
    x, i = torch.randn(4, 5), torch.randint(0, 9, (4, 5))
    cf = check_fused(f, [(x, i)])
    assert cf(x, i)[2] is not None


def test_cross_entropy_is_one_pass_over_the_logits():
    def f(x, t):
        return (F.cross_entropy(x, t), F.cross_entropy(x * 2, t, reduction="sum"),
                F.cross_entropy(x, t, reduction="none", ignore_index=1))
    cases = []
    for n, c in [(3, 5), (8, 70), (5, 1000)]:
        t = torch.randint(0, c, (n,))
        t[0] = 1
        cases.append((torch.randn(n, c), t))
    cf = check_fused(f, cases)
    assert any("cross_entropy" in r[-1] for r in regions(cf))


def cross_entropy_edge_cases(cf, f):
    """Non-finite logits give eager's NaN/inf from the kernel itself (no result rejected, so no read-back
    or rerun); a target out of range, ignored or not, gives eager's error through torch's calls."""
    from dynashape.backends.fused import counters
    nan, inf = float("nan"), float("inf")
    for case in range(6):
        x, t = torch.randn(6, 40), torch.randint(0, 40, (6,))
        x[[0, 1, 2, 3, 4, 5][case], :] = [0.5, nan, inf, -inf, -inf, nan][case]  # a row all one value
        x[1, 3], x[2, t[2]], x[3, t[3]] = nan, -inf, inf
        t[5] = 1  # the ignored target
        before = counters["rejected"]
        torch.testing.assert_close(cf(x, t), f(x, t), equal_nan=True)
        assert counters["rejected"] == before, "a kernel result with no bad target was rejected"
    for bad in (40, -1, 10 ** 6):
        t[4] = bad
        with pytest.raises(IndexError) as want:
            f(x, t)
        before = counters["rejected"]
        with pytest.raises(IndexError) as got:
            cf(x, t)
        assert str(got.value) == str(want.value) and counters["rejected"] == before + 1


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_over_non_finite_logits_keeps_the_kernel_result_and_a_bad_target_raises_eager_s_error(reduction):
    def f(x, t):
        return F.cross_entropy(x * 1.5, t, reduction=reduction, ignore_index=1)
    x, t = torch.randn(6, 40), torch.randint(0, 40, (6,))
    cross_entropy_edge_cases(check_fused(f, [(x, t)]), f)


def test_the_device_check_of_cross_entropy_targets_raises_only_on_a_minus_inf_row():
    """On CUDA the wrapper asserts on the device (as eager's nll_loss does) instead of reading back;
    the assertion itself runs here on CPU tensors."""
    from dynashape.backends.fused.backend import XENT_RANGE, assert_targets_in_range
    nan, inf = float("nan"), float("inf")
    assert_targets_in_range(torch.tensor([0.5, nan, inf, 0.0]))
    with pytest.raises(RuntimeError, match=re.escape(XENT_RANGE)):
        assert_targets_in_range(torch.tensor([0.5, nan, -inf, 0.0]))


def test_cross_entropy_with_a_bad_target_raises_torchs_error():
    import dynashape as ds
    cf = ds.compile(lambda x, t: F.cross_entropy(x, t), dynamic=True, backend="fused")
    with pytest.raises(IndexError, match="out of bounds"):
        cf(torch.randn(4, 6), torch.tensor([0, 1, 9, 2]))
