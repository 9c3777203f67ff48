"""Tests for dynashape/tracing/meta/nn.py: compiled (dynamic=True) vs eager over many shapes.

Modules are built once outside the compiled function (their parameters are
static); inputs vary in batch size, sequence length or image size, and every
test's cases share one compiled graph (`compiles=1`).
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynashape as ds
from tests.oracle import check_vs_eager

TOL = dict(atol=1e-4, rtol=1e-4)
IMAGES = [(5, 12, 15), (2, 9, 9), (3, 17, 8)]  # (batch, H, W): the first case's sizes are all distinct


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


def images(c, grad=False, sizes=IMAGES):
    return [(r(b, c, h, w, grad=grad),) for b, h, w in sizes]


def sequences(c, grad=False):
    return [(r(b, t, c, grad=grad),) for b, t in [(3, 11), (2, 5), (4, 3)]]


# ------------------------------------------------------------------ convolution
CONVS = {
    "plain": dict(),
    "stride_padding": dict(stride=2, padding=1),
    "dilation": dict(dilation=2, padding=2),
    "groups": dict(groups=2, stride=(2, 1)),
    "same": dict(padding="same", dilation=(1, 2)),
    "valid": dict(padding="valid", stride=3),
    "reflect_padding_mode": dict(padding=1, padding_mode="reflect"),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_conv2d_module_compiles_once_for_images_of_several_sizes(name):
    conv = nn.Conv2d(4, 6, 3, **CONVS[name])
    check_vs_eager(lambda x: conv(x), images(4), compiles=1, **TOL)


def test_conv2d_output_size_is_a_floor_division_in_the_graph():
    conv = nn.Conv2d(3, 2, 3, stride=2)
    cf = check_vs_eager(lambda x: conv(x), images(3), compiles=1, **TOL)
    assert "FloorDiv(s2 - 3, 2) + 1" in str(cf.entries[0].graph)


def test_conv1d_and_unbatched_conv2d_stay_symbolic():
    c1, c2 = nn.Conv1d(3, 5, 4, stride=2, padding=1), nn.Conv2d(3, 2, (2, 3))
    cases = [(r(b, 3, t), r(3, h, w)) for b, t, h, w in [(2, 9, 5, 7), (4, 13, 6, 6), (3, 6, 10, 4)]]
    check_vs_eager(lambda x, y: (c1(x), c2(y)), cases, compiles=1, **TOL)


def test_functional_conv2d_with_a_weight_input_of_varying_kernel_size():
    cases = [(r(b, 3, h, w), r(4, 3, k, k + 1)) for b, h, w, k in [(2, 12, 15, 5), (3, 9, 10, 3), (4, 8, 17, 2)]]
    check_vs_eager(lambda x, w: F.conv2d(x, w, stride=2), cases, compiles=1, **TOL)


def test_conv_transpose2d_with_stride_and_output_padding():
    convt = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
    check_vs_eager(lambda x: convt(x), images(4), compiles=1, **TOL)


def test_convolution_gradients_flow_through_compiled_code():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    check_vs_eager(lambda x: conv(x).relu(), images(3, grad=True), compiles=1, grad=True, **TOL)


# ------------------------------------------------------------------ pooling
POOLS = {
    "max": lambda x: F.max_pool2d(x, 2),
    "max_stride_padding_dilation": lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=1),
    "max_dilated": lambda x: F.max_pool2d(x, 2, stride=1, dilation=2),
    "max_ceil": lambda x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
    "max_ceil_padding": lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
    "max_ceil_last_window_in_padding": lambda x: F.max_pool2d(x, 2, stride=2, padding=1, ceil_mode=True),
    "avg_ceil_last_window_in_padding": lambda x: F.avg_pool2d(x, (2, 1), stride=(2, 3), padding=(1, 0),
                                                              ceil_mode=True),
    "max_indices": lambda x: F.max_pool2d(x, 2, return_indices=True),
    "max_with_indices": lambda x: F.max_pool2d_with_indices(x, (2, 3)),
    "max_module": nn.MaxPool2d(3, 2),
    "avg": lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
    "avg_ceil": lambda x: F.avg_pool2d(x, 2, ceil_mode=True),
    "adaptive_avg": lambda x: F.adaptive_avg_pool2d(x, (None, 3)),
    "adaptive_avg_module": nn.AdaptiveAvgPool2d((1, 1)),
    "adaptive_max": lambda x: F.adaptive_max_pool2d(x, 4),
    "adaptive_max_indices": lambda x: F.adaptive_max_pool2d(x, (2, None), return_indices=True),
    "lp": lambda x: F.lp_pool2d(x, 2, 3),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pool2d_compiles_once_for_images_of_several_sizes(name):
    pool = POOLS[name]
    check_vs_eager(lambda x: pool(x), images(3), compiles=1)


def test_pool1d_variants_compile_once_for_several_lengths():
    def f(x):
        return (F.max_pool1d(x, 3, 2, ceil_mode=True), F.avg_pool1d(x, 2), F.adaptive_avg_pool1d(x, 3),
                F.adaptive_max_pool1d(x, 2), F.max_pool1d(x, 2, return_indices=True))
    check_vs_eager(f, [(r(b, 3, t),) for b, t in [(2, 9), (4, 13), (5, 6)]], compiles=1)


@pytest.mark.parametrize("k, s, p", [(3, 2, 0), (2, 2, 1), (3, 3, 1)])
def test_ceil_mode_pooling_adds_no_guard_for_images_of_either_parity(k, s, p):
    sizes = [(5, 12, 15), (2, 9, 10), (3, 17, 8), (2, 13, 14)]
    cf = check_vs_eager(lambda x: F.max_pool2d(x, k, stride=s, padding=p, ceil_mode=True), images(3, sizes=sizes),
                        compiles=1)
    assert [g for g in cf.entries[0].guards if "//" in g] == []


def test_pooling_gradients_flow_through_compiled_code():
    check_vs_eager(lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), images(3, grad=True), compiles=1, grad=True)


# ------------------------------------------------------------------ normalization and embedding
NORMS = {
    "layer_norm": (nn.LayerNorm(6), "seq"),
    "layer_norm_no_affine": (nn.LayerNorm(6, elementwise_affine=False), "seq"),
    "rms_norm": (nn.RMSNorm(6), "seq"),
    "group_norm": (nn.GroupNorm(2, 6), "img"),
    "batch_norm_train": (nn.BatchNorm2d(6), "img"),
    "batch_norm_eval": (nn.BatchNorm2d(6).eval(), "img"),
    "batch_norm_1d": (nn.BatchNorm1d(6), "seq_t"),
    "instance_norm": (nn.InstanceNorm2d(6, affine=True), "img"),
    "local_response_norm": (nn.LocalResponseNorm(3), "img"),
}


@pytest.mark.parametrize("name", list(NORMS))
def test_normalization_modules_compile_once_and_train_through_compiled_code(name):
    mod, kind = NORMS[name]
    cases = {"seq": sequences(6, grad=True), "img": images(6, grad=True),
             "seq_t": [(x.transpose(1, 2).detach().requires_grad_(),) for (x,) in sequences(6)]}[kind]
    check_vs_eager(lambda x: mod(x), cases, compiles=1, grad=True, **TOL)


def test_layer_norm_over_symbolic_trailing_dims():
    check_vs_eager(lambda x: F.layer_norm(x, x.shape[-2:]), sequences(4), compiles=1, **TOL)


def test_normalize_keeps_the_input_shape():
    check_vs_eager(lambda x: F.normalize(x, dim=-1), sequences(5), compiles=1, **TOL)


def test_embedding_module_over_several_batch_sizes_and_sequence_lengths():
    emb = nn.Embedding(10, 4, padding_idx=0)
    cases = [(torch.randint(0, 10, (b, t)),) for b, t in [(2, 5), (4, 3), (3, 11)]]
    check_vs_eager(lambda i: emb(i), cases, compiles=1)


def test_embedding_of_symbolic_width_weights_and_its_gradient():
    cases = [(torch.randint(0, n, (b,)), r(n, d, grad=True)) for b, n, d in [(3, 7, 5), (6, 4, 9), (2, 8, 3)]]
    check_vs_eager(lambda i, w: F.embedding(i, w) + torch.embedding(w, i), cases, compiles=1, grad=True)


# ------------------------------------------------------------------ attention
def test_scaled_dot_product_attention_with_different_query_and_key_lengths():
    cases = [(r(b, 2, q, 4), r(b, 2, k, 4), r(b, 2, k, 3)) for b, q, k in [(5, 6, 7), (2, 9, 4), (4, 3, 3)]]
    check_vs_eager(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), cases, compiles=1, **TOL)


def test_causal_attention_with_grouped_query_heads_and_gradients():
    cases = [(r(b, 4, t, 8, grad=True), r(b, 2, t, 8, grad=True), r(b, 2, t, 8, grad=True))
             for b, t in [(3, 5), (2, 9)]]
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    check_vs_eager(f, cases, compiles=1, grad=True, **TOL)


def test_multihead_self_attention_module_serves_several_batch_sizes_and_lengths():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    check_vs_eager(lambda x: mha(x, x, x, need_weights=False)[0], sequences(8, grad=True), compiles=1, grad=True,
                   **TOL)


def test_multihead_cross_attention_module_serves_several_batch_sizes_and_lengths():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    cases = [(r(b, t, 8, grad=True), r(b, s, 8)) for b, t, s in [(2, 5, 3), (4, 3, 6), (3, 11, 7)]]
    check_vs_eager(lambda x, m: mha(x, m, m)[0], cases, compiles=1, grad=True, **TOL)


def test_transformer_encoder_layer_compiles_once():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    check_vs_eager(lambda x: layer(x), sequences(8), compiles=1, **TOL)


# ------------------------------------------------------------------ padding, one_hot, shuffles
PADS = {
    "constant": lambda x: F.pad(x, (1, 2, 0, 3), value=0.5),
    "negative": lambda x: F.pad(x, (-1, 2, 1, -1)),
    "reflect": lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
    "replicate": lambda x: F.pad(x, (2, 0, 1, 1), mode="replicate"),
    "circular": lambda x: F.pad(x, (1, 1, 0, 1), mode="circular"),
    "symbolic": lambda x: F.pad(x, (0, x.shape[-1] // 2, x.shape[-2], 0)),
    "module": nn.ZeroPad2d((1, 0, 2, 1)),
}


@pytest.mark.parametrize("name", list(PADS))
def test_padding_grows_each_padded_dim_by_its_two_pads(name):
    pad = PADS[name]
    check_vs_eager(lambda x: pad(x), images(2), compiles=1)


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("pad", [
    lambda x: F.pad(x, (0, x.size(-1) % 3)),
    lambda x: torch.constant_pad_nd(x, (x.size(-1) % 3, 0)),
    lambda x: F.pad(x, (0, -(x.size(-1) % 3))),
], ids=["F.pad", "constant_pad_nd", "negative"])
def test_constant_padding_of_a_transposed_input_lays_out_its_result_as_eager_for_every_amount(pad, backend):
    # no positive amount: the input's layout kept (a clone); else a row-major tensor: the strides read
    # in the function follow the amount, which is guarded (fuzz seed 25112940 returned the first's)
    def f(y):
        v = pad(y.transpose(0, 1))
        return v * 2, v.stride(), v.is_contiguous()

    cases = [(r(2, 3, 2, w),) for w in (3, 4, 6, 7, 5, 8)]  # amounts 0, 1, 0, 1, 2, 2
    check_vs_eager(f, cases)
    cf = ds.compile(f, dynamic=True, backend=backend)
    for (y,) in cases:
        assert cf(y)[1:] == f(y)[1:]


def test_constant_padding_of_a_row_major_input_does_not_guard_its_amounts():
    def f(x):
        v = F.pad(x, (0, x.size(-1) % 3))
        return v + 1, v.stride()

    cf = check_vs_eager(f, [(r(2, w),) for w in (3, 4, 6, 5, 9)], compiles=1)
    assert cf.stats.compiles == 1


def test_one_hot_with_explicit_and_symbolic_class_counts():
    cases = [(torch.randint(0, 3, (b, t)), r(n)) for b, t, n in [(2, 5, 7), (4, 3, 9), (3, 8, 4)]]
    check_vs_eager(lambda i, v: (F.one_hot(i, 6), F.one_hot(i, v.shape[0])), cases, compiles=1)


def test_one_hot_without_num_classes_has_a_data_dependent_class_count():
    cf = ds.compile(lambda i: F.one_hot(i) * 2, dynamic=True)
    for i in (torch.tensor([0, 2, 1]), torch.tensor([4, 0, 1, 1]), torch.tensor([0, 0])):
        torch.testing.assert_close(cf(i), F.one_hot(i) * 2)
    assert not cf.stats.graph_breaks and cf.stats.compiles == 1
    assert "i64[s0, u0]" in str(cf.entries[0].graph)  # the class count is data-dependent
    with pytest.raises(RuntimeError):  # eager's own error for an empty input
        cf(torch.tensor([], dtype=torch.long))


def test_pixel_shuffle_and_unshuffle_scale_the_image():
    cases = [(r(b, 8, h, w),) for b, h, w in [(2, 6, 4), (3, 4, 10), (5, 8, 2)]]
    check_vs_eager(lambda x: (F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2), nn.PixelShuffle(2)(x)),
                   cases, compiles=1)


def test_unfold_then_fold_round_trips_symbolic_image_sizes():
    def f(x):
        cols = F.unfold(x, 3, padding=1, stride=2)
        return cols, F.fold(cols, x.shape[-2:], 3, padding=1, stride=2)
    check_vs_eager(f, images(2), compiles=1, **TOL)


def test_c_level_spellings_of_nn_ops_stay_symbolic():
    nn_ = torch._C._nn
    w, rm, rv = r(4, 2, 3, 3), torch.zeros(2), torch.ones(2)  # closure tensors: graph inputs too

    def f(x):
        return (torch.layer_norm(x, [x.shape[-1]]), torch.conv2d(x, w, None, 1, 1),
                torch.batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5, False), torch.group_norm(x, 1),
                torch.max_pool2d(x, 2), nn_.max_pool2d_with_indices(x, [2, 2]), nn_.adaptive_avg_pool2d(x, [3, 2]),
                torch.constant_pad_nd(x, [1, 2]), nn_.reflection_pad2d(x, [1, 1, 2, 0]),
                nn_.upsample_nearest2d(x, None, [2.0, 1.5]), nn_.upsample_bilinear2d(x, [5, 7], False),
                nn_.im2col(x, [2, 2], [1, 1], [0, 0], [1, 1]))
    check_vs_eager(f, images(2), compiles=1, **TOL)


def test_c_level_losses_take_the_reduction_enum():
    def f(x, t, c):
        return (torch._C._nn.mse_loss(x, t, 0), torch._C._nn.l1_loss(x, t, 2), torch.kl_div(x, t, 0, log_target=True),
                torch.binary_cross_entropy_with_logits(x, t.sigmoid(), None, None, 0),
                torch._C._nn.cross_entropy_loss(x, c, None, 0), torch._C._nn.nll_loss_nd(x, c, None, 1))
    cases = [(r(n, k, grad=True), r(n, k), torch.randint(0, k, (n,))) for n, k in [(4, 6), (7, 3), (5, 9)]]
    check_vs_eager(f, cases, compiles=1, grad=True, **TOL)


# ------------------------------------------------------------------ interpolation
RESIZES = {
    "size": lambda x: F.interpolate(x, size=(5, 7)),
    "symbolic_size": lambda x: F.interpolate(x, size=(x.shape[-1], 2 * x.shape[-2]), mode="bilinear"),
    "scale_2": lambda x: F.interpolate(x, scale_factor=2.0),
    "scale_1_5_bilinear": lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
    "scale_half": lambda x: F.interpolate(x, scale_factor=(0.5, 0.75), mode="bicubic"),
    "scale_1_3": lambda x: F.interpolate(x, scale_factor=1.3, mode="nearest-exact"),
    "recompute": lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
    "area": lambda x: F.interpolate(x, scale_factor=0.5, mode="area"),
    "upsample_module": nn.Upsample(scale_factor=3, mode="nearest"),
}


@pytest.mark.parametrize("name", list(RESIZES))
def test_interpolate_by_size_or_scale_factor_compiles_once(name):
    resize = RESIZES[name]
    check_vs_eager(lambda x: resize(x), images(2), compiles=1, **TOL)


def test_interpolate_1d_and_its_gradient():
    cases = [(r(b, 3, t, grad=True),) for b, t in [(2, 5), (4, 9)]]
    check_vs_eager(lambda x: F.interpolate(x, scale_factor=2.5, mode="linear"), cases, compiles=1, grad=True,
                   **TOL)


# ------------------------------------------------------------------ losses
def _class_cases(extra=(), probs=False, grad=True):
    out = []
    for n, c, *rest in [(4, 5, *extra), (7, 3, *extra), (3, 6, *extra)]:
        x = r(n, c, *rest, grad=grad)
        t = torch.randn(n, c, *rest).softmax(1) if probs else torch.randint(0, c, (n, *rest))
        out.append((x, t))
    return out


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_with_class_indices_and_probabilities(reduction):
    check_vs_eager(lambda x, t: F.cross_entropy(x, t, reduction=reduction, label_smoothing=0.1),
                   _class_cases(), compiles=1, grad=True, **TOL)
    check_vs_eager(lambda x, t: F.cross_entropy(x, t, reduction=reduction), _class_cases(probs=True),
                   compiles=1, grad=True, **TOL)


def test_cross_entropy_and_nll_loss_over_spatial_targets():
    def f(x, t):
        return F.cross_entropy(x, t, reduction="none"), F.nll_loss(x.log_softmax(1), t, reduction="none")
    check_vs_eager(f, _class_cases(extra=(6,)), compiles=1, grad=True, **TOL)


def test_cross_entropy_module_with_class_weights_and_ignore_index():
    loss = nn.CrossEntropyLoss(weight=torch.rand(5) + 0.5, ignore_index=1)
    cases = [(r(n, 5, grad=True), torch.randint(0, 5, (n,))) for n in (4, 9, 3)]
    check_vs_eager(lambda x, t: loss(x, t), cases, compiles=1, grad=True, **TOL)


ELEMENTWISE = {
    "mse": F.mse_loss, "l1": F.l1_loss, "smooth_l1": F.smooth_l1_loss, "huber": F.huber_loss,
    "kl_div": lambda x, t, reduction: F.kl_div(x.log_softmax(-1), t.softmax(-1),
                                               reduction="batchmean" if reduction == "mean" else reduction),
    "bce": lambda x, t, reduction: F.binary_cross_entropy(x.sigmoid(), t.sigmoid(), reduction=reduction),
    "bce_logits": lambda x, t, reduction: F.binary_cross_entropy_with_logits(x, t.sigmoid(), reduction=reduction),
}


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_losses_under_every_reduction(name, reduction):
    loss = ELEMENTWISE[name]
    cases = [(r(b, t, 3, grad=True), r(b, t, 3)) for b, t in [(2, 5), (4, 3), (6, 7)]]
    check_vs_eager(lambda x, t: loss(x, t, reduction=reduction), cases, compiles=1, grad=True, **TOL)


def test_mse_loss_broadcasts_a_smaller_target():
    cases = [(r(b, t, grad=True), r(t)) for b, t in [(2, 5), (4, 3), (6, 7)]]
    with pytest.warns(UserWarning):
        check_vs_eager(lambda x, t: F.mse_loss(x, t, reduction="none"), cases, compiles=1, grad=True, **TOL)
