"""Differential tests: realistic programs compiled once with dynamic shapes must match eager on every shape.

Every program runs compiled and eager over several shapes through `check_vs_eager`, which also asserts
that no op fell back to specialization, nothing broke the graph, and every graph lints. In the first
case of each program unrelated sizes differ (duck sizing would unify equal ones), and every size is >= 2
(sizes 0 and 1 are specialized), so one graph (`compiles=1`) serves all cases.
"""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dynashape as ds
from tests.oracle import check_vs_eager


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


# ------------------------------------------------------------------ op families, one small program each
def unary_chain(x):
    return torch.sigmoid(x) * torch.tanh(x) + x.exp().log1p() - x.abs().sqrt() + x.sin() * x.cos() ** 2


def activations(x):
    return F.gelu(x) + F.silu(x) + F.leaky_relu(x, 0.1) + F.softplus(x) + F.elu(x) + F.hardtanh(x) + x.relu()


def where_clamp_masked_fill(x):
    y = torch.where(x > 0, x, 0.1 * x).clamp(-1.0, 1.0)
    return y.masked_fill(x < -0.5, 0.0), x.clamp(min=0.0), torch.clamp(x, max=0.2)


def reductions_keepdim(x):  # (B, T, C)
    z = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
    return z + x.amax(0, keepdim=True) + x.sum(dim=(0, 1), keepdim=True), x.var(1), x.norm(dim=-1, keepdim=True)


def indexed_reductions(x):  # (N, M)
    v, i = x.max(1)
    return v, i, x.argmax(-1), x.topk(2, dim=1).values, x.sort(dim=0).values, x.min(0, keepdim=True)[1]


def scans_and_softmax(x):  # (B, T)
    return x.cumsum(1), x.softmax(-1), F.log_softmax(x, dim=0), x.logsumexp(1, keepdim=True), torch.cumprod(x, 0)


def cat_stack_split_chunk(x, y):  # x (N, C), y (N, D)
    a, b = x.chunk(2, dim=1)
    head, tail = y.split([1, y.size(1) - 1], dim=1)
    z = torch.cat([a, y, b], dim=1)
    s = torch.stack([x.sum(1), y.sum(1), head.squeeze(1)], dim=-1)
    return z, s, tail * 2, torch.cat([x, x], 0)


def indexing(x, idx):  # x (N, M), idx: long (K,)
    return (x[:, 1:-1], x[..., ::2], x[0], x[-1, :2], x[idx], x.index_select(1, idx % x.size(1)),
            x.gather(1, x.argsort(1)), x[:, None, :2].expand(-1, 3, -1))


def creation(x):  # (B, T)
    z = torch.zeros(x.size(0), 3)
    pos = torch.arange(x.size(1))
    eye = torch.eye(x.size(1))
    return (torch.cat([x, z], 1), x + pos, x @ eye, torch.ones_like(x), x.new_zeros(x.shape[0]),
            torch.full((x.size(1),), 2.0), torch.linspace(0, 1, x.size(0)))


def linalg(a, b, w):  # a (B, N, K), b (B, K, M), w (M, K)
    return a @ b, torch.bmm(a, b), torch.einsum("bnk,bkm->bnm", a, b), F.linear(a, w), torch.outer(a[0, 0], w[0])


def nn_functional(x, w):  # x (B, C, L), w (D, C, 3)
    y = F.conv1d(x, w, padding=1)
    y = F.avg_pool1d(F.relu(y), 2, ceil_mode=True)
    y = F.layer_norm(y, y.shape[-1:])
    return y, F.pad(x, (1, 2)), F.interpolate(x, scale_factor=2.0, mode="nearest"), F.group_norm(x, 1)


def image_ops(x, w):  # x (B, 4, H, W), w (4, 2, 3, 3)
    up = F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)  # (B, 2, 2H, 2W)
    mp, idx = F.max_pool2d(x, 2, return_indices=True)
    return (up, F.pixel_shuffle(x, 2), F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
            F.pad(x, (1, 1, 2, 2), mode="reflect"), mp, idx, F.unfold(x, kernel_size=2, stride=2),
            F.avg_pool2d(x, 3, stride=1, padding=1), F.adaptive_max_pool2d(x, 1))


def sequence_views(x):  # (B, T, C)
    return (F.normalize(x, dim=-1), x.flip(1), x.roll(1, 1), torch.tril(x[0]), x.diagonal(dim1=1, dim2=2),
            x.unfold(1, 2, 1), x.narrow(1, 1, x.size(1) - 1), x.select(2, -1), x.repeat(1, 2, 1), torch.tile(x, (2,)))


def losses(logits, target, pred, ref):  # logits (N, K), target (N,), pred/ref (N, D)
    return F.cross_entropy(logits, target), F.mse_loss(pred, ref), F.nll_loss(logits.log_softmax(-1), target), \
        F.smooth_l1_loss(pred, ref, reduction="none"), F.one_hot(target, 5)


def sdpa(q, k, v):  # (B, H, T, D)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v)


OP_FAMILIES = [
    (unary_chain, [(r(2, 3),), (r(5, 7),), (r(9, 4),)]),
    (activations, [(r(3, 5, 2),), (r(6, 2, 4),), (r(2, 9, 3),)]),
    (where_clamp_masked_fill, [(r(2, 5),), (r(7, 3),), (r(4, 4),)]),
    (reductions_keepdim, [(r(2, 3, 4),), (r(5, 6, 2),), (r(3, 3, 8),)]),
    (indexed_reductions, [(r(3, 5),), (r(6, 2),), (r(4, 9),)]),
    (scans_and_softmax, [(r(3, 5) / 4,), (r(6, 2) / 4,), (r(2, 9) / 4,)]),
    (cat_stack_split_chunk, [(r(3, 4), r(3, 5)), (r(6, 7), r(6, 2)), (r(2, 6), r(2, 9))]),
    (indexing, [(r(4, 5), torch.tensor([0, 3, 1])), (r(7, 3), torch.tensor([6, 2])),
                (r(3, 8), torch.tensor([2, 2, 0, 1, 1]))]),
    (creation, [(r(3, 5),), (r(6, 2),), (r(2, 7),)]),
    (linalg, [(r(2, 3, 4), r(2, 4, 5), r(5, 4)), (r(3, 6, 2), r(3, 2, 7), r(7, 2)),
              (r(4, 2, 3), r(4, 3, 6), r(6, 3))]),
    (nn_functional, [(r(2, 4, 8), r(5, 4, 3)), (r(4, 4, 11), r(5, 4, 3)), (r(3, 4, 6), r(5, 4, 3))]),
    (image_ops, [(r(b, 4, h, w), r(4, 2, 3, 3)) for b, h, w in [(5, 6, 8), (3, 4, 10), (2, 12, 6)]]),
    (sequence_views, [(r(2, 5, 3),), (r(3, 4, 7),), (r(4, 9, 2),)]),
    (losses, [(r(3, 5), torch.tensor([0, 4, 2]), r(3, 2), r(3, 2)),
              (r(6, 5), torch.tensor([1, 1, 3, 0, 2, 4]), r(6, 4), r(6, 4)),
              (r(2, 5), torch.tensor([3, 0]), r(2, 7), r(2, 7))]),
    (sdpa, [(r(2, 3, 5, 4), r(2, 3, 5, 4), r(2, 3, 5, 4)), (r(3, 3, 9, 4), r(3, 3, 9, 4), r(3, 3, 9, 4)),
            (r(4, 3, 2, 4), r(4, 3, 2, 4), r(4, 3, 2, 4))]),
]


@pytest.mark.parametrize("fn,cases", OP_FAMILIES, ids=[f.__name__ for f, _ in OP_FAMILIES])
def test_each_op_family_program_matches_eager_over_shapes_with_one_graph(fn, cases):
    check_vs_eager(fn, cases, compiles=1)


DIFFERENTIABLE = OP_FAMILIES[:7]  # unary_chain .. cat_stack_split_chunk: float inputs only


@pytest.mark.parametrize("fn,cases", DIFFERENTIABLE, ids=[f.__name__ for f, _ in DIFFERENTIABLE])
def test_each_differentiable_op_family_program_matches_eager_gradients(fn, cases):
    cases = [tuple(a.detach().requires_grad_(True) for a in args) for args in cases]
    check_vs_eager(fn, cases, compiles=1, grad=True)


def test_gradients_off_eager_by_rounding_pass_only_when_no_less_accurate_than_eager():
    # std over a dim of 2 near-equal values: gradients ~40 whose float32 rounding depends on the order
    # of the sums (a CI machine's fused backward landed 5e-5 from eager, nearer float64 than eager)
    from tests.oracle import _float64_grads, _no_less_accurate
    x = torch.tensor([[[1.0, 1.05]], [[0.3, -0.2]]]).repeat(1, 3, 1)
    want = torch.func.grad(lambda t: sum(o.sum() for o in reductions_keepdim(t)))(x)
    (exact,) = _float64_grads(reductions_keepdim, (x.requires_grad_(True),), 0)
    _no_less_accurate(exact.float(), want, exact)
    with pytest.raises(AssertionError, match="against float64"):
        _no_less_accurate(want + 1e-3 * exact.abs().max(), want, exact)
    check_vs_eager(reductions_keepdim, [(x.detach().requires_grad_(True),)], grad=True)


# ------------------------------------------------------------------ views, broadcasting, shape arithmetic
def test_views_with_minus_one_permute_transpose_flatten_squeeze_and_expand_match_eager():
    def f(x):  # (B, T, C)
        B, T, C = x.shape
        y = x.reshape(B, -1).view(-1, T, C).permute(2, 0, 1)  # (C, B, T)
        y = y.transpose(0, 2).flatten(1)  # (T, B*C)
        y = y.unflatten(1, (B, C)).unsqueeze(0).squeeze(0)  # (T, B, C)
        z = x[:, :1, :].expand(B, T, C).contiguous().view(B * T, C)
        return y.movedim(0, 1) + z.view(B, T, C), x.mT.shape[-1], torch.flatten(x, 0, 1).t()

    check_vs_eager(f, [(r(2, 3, 4),), (r(5, 2, 6),), (r(3, 7, 2),), (r(4, 4, 4),)], compiles=1)


def test_shape_unpacking_arithmetic_reshapes_with_one_graph():
    def f(x):
        B, T, C = x.shape
        h = x.view(B * T, C) @ torch.ones(C, 2 * C)  # (B*T, 2C)
        return h.view(B, T, 2, C).sum(2) / (T * C), B * T + C

    check_vs_eager(f, [(r(2, 3, 4),), (r(6, 5, 3),), (r(3, 9, 2),)], compiles=1)


def test_broadcast_bias_add_and_outer_product_via_unsqueeze_match_eager():
    def f(x, bias, a, b):  # x (B, T, C), bias (C,), a (N,), b (M,)
        outer = a.unsqueeze(1) * b.unsqueeze(0)  # (N, M)
        return x + bias, x * bias[None, None, :] - bias.view(1, 1, -1), outer, outer + a[:, None]

    check_vs_eager(f, [(r(2, 3, 4), r(4), r(5), r(6)), (r(5, 2, 3), r(3), r(7), r(2)),
                       (r(3, 6, 8), r(8), r(2), r(9))], compiles=1)


# ------------------------------------------------------------------ in-place
def test_in_place_ops_on_a_clone_leave_the_input_untouched():
    def f(x):
        y = x.clone()
        y.add_(1.0)
        y.mul_(2.0)
        y[..., 0] = 0
        y[:, 1:] += x[:, :-1]
        return y

    check_vs_eager(f, [(r(3, 4),), (r(6, 2),), (r(2, 7),)], compiles=1)


def test_in_place_ops_on_the_input_itself_mutate_it_like_eager():
    def f(x, y):
        x.mul_(2.0)
        x[..., 0] = 0
        x.t()[1].add_(1.0)  # through views: the input sees it
        x.view(-1)[:2].zero_()
        y.add_(x.sum(0))
        return x.sum() + y.sum()

    check_vs_eager(f, [(r(3, 4), r(4)), (r(6, 2), r(2)), (r(2, 7), r(7))], compiles=1)


# ------------------------------------------------------------------ arguments and structure
def test_kwargs_and_default_arguments_match_eager_whether_given_or_not():
    def f(x, scale=2.0, *, bias=None, dim=-1):
        y = x * scale
        if bias is not None:
            y = y + bias
        return y.softmax(dim)

    check_vs_eager(f, [(r(3, 4),), (r(6, 2),), (r(5, 7),)], compiles=1)
    cf = ds.compile(f, dynamic=True)
    for n, m in [(3, 4), (6, 2), (5, 7)]:
        x, b = r(n, m), r(m)
        torch.testing.assert_close(cf(x, 0.5, bias=b, dim=0), f(x, 0.5, bias=b, dim=0))
    assert cf.stats.compiles == 1, cf.stats.recompile_reasons


def test_nested_inputs_a_dict_and_a_list_of_tensors_match_eager():
    def f(batch, extras):
        x, mask = batch["x"], batch["mask"]  # (B, T, C), (B, T)
        h = torch.where(mask[..., None], x, 0.0).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return h + sum(e.mean(0) for e in extras)

    def case(b, t, c):
        return ({"x": r(b, t, c), "mask": torch.rand(b, t) > 0.3}, [r(5, c), r(7, c)])

    check_vs_eager(f, [case(2, 3, 4), case(6, 5, 2), case(3, 9, 8)], compiles=1)


def test_nested_outputs_dicts_tuples_and_lists_with_tensors_and_ints_match_eager():
    def f(x):
        n, m = x.shape
        return {"y": x * 2, "n": n, "parts": [x.sum(0), (m, x.mean())], "area": (n * m, x.numel())}

    cf = check_vs_eager(f, [(r(3, 4),), (r(6, 2),), (r(5, 7),)], compiles=1)
    out = cf(r(4, 9))
    assert type(out["n"]) is int and out["area"] == (36, 36)  # sizes come back as plain ints


def test_integer_arguments_are_dynamic_and_compile_one_graph():
    def f(x, n, k):
        return x[:, :n] * n + torch.arange(n) + x.size(0) * k, torch.zeros(n, k), n * k

    check_vs_eager(f, [(r(3, 8), 4, 5), (r(5, 9), 2, 3), (r(2, 6), 6, 7), (r(4, 7), 3, 2)], compiles=1)


def test_a_shape_branch_compiles_one_graph_per_side():
    def f(x):
        if x.size(0) > 8:
            return x.sum(0)
        return x.mean(0) * x.size(0)

    cf = check_vs_eager(f, [(r(n, 3),) for n in (4, 6, 12, 16, 2, 9)], compiles=2)
    assert len(cf.stats.recompile_reasons) == 1 and "L['x'].size()[0]" in cf.stats.recompile_reasons[0]


def test_arange_positions_add_a_learned_positional_embedding_over_sequence_length():
    pos = nn.Embedding(64, 8)

    def f(x):  # (B, T, 8)
        p = torch.arange(x.size(1))
        return x + pos(p)[None], x + pos(p.unsqueeze(0).expand(x.size(0), -1))

    check_vs_eager(f, [(r(2, 5, 8),), (r(3, 11, 8),), (r(6, 2, 8),)], compiles=1)


# ------------------------------------------------------------------ modules
def mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 3)).eval()


class TransformerBlock(nn.Module):
    def __init__(self, d=16, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):  # (B, T, d)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CausalSelfAttention(nn.Module):
    def __init__(self, d=16, heads=4, p=0.1):
        super().__init__()
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.heads, self.drop = heads, nn.Dropout(p)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        H = self.heads
        q, k, v = (lin(x).view(B, T, H, C // H).transpose(1, 2) for lin in (self.q, self.k, self.v))  # (B,H,T,D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, H, T, T)
        mask = torch.triu(torch.ones(T, T), diagonal=1).bool()
        att = self.drop(att.masked_fill(mask, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(16 * 2 * 2, 5)

    def forward(self, x):  # (B, 3, H, W)
        x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        x = F.adaptive_avg_pool2d(F.relu(self.c2(x)), (2, 2))
        return self.fc(torch.flatten(x, 1))


class BagOfEmbeddings(nn.Module):
    def __init__(self, vocab=50, d=12, classes=4):
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab, d), nn.Linear(d, classes)

    def forward(self, tokens):  # (B, T) long
        return self.out(self.emb(tokens).mean(1))


def tokens(b, t):
    return torch.randint(0, 50, (b, t))


def test_compiled_mlp_sequential_module_matches_eager_over_batch_sizes():
    check_vs_eager(mlp(), [(r(n, 6),) for n in (3, 8, 2, 33)], compiles=1)


def test_a_function_calling_a_module_matches_eager_over_batch_sizes():
    net = mlp()

    def f(x, y):
        return net(x).softmax(-1), net(y.flatten(0, 1)).view(y.size(0), y.size(1), -1)

    check_vs_eager(f, [(r(3, 6), r(2, 4, 6)), (r(7, 6), r(5, 3, 6)), (r(2, 6), r(9, 2, 6))], compiles=1)


def test_transformer_block_matches_eager_over_batch_and_sequence_length():
    check_vs_eager(TransformerBlock().eval(), [(r(b, t, 16),) for b, t in [(2, 5), (4, 3), (3, 11), (6, 2)]],
                   compiles=1, atol=1e-5, rtol=1e-5)


def test_hand_written_causal_self_attention_matches_eager_over_sequence_length():
    check_vs_eager(CausalSelfAttention().eval(), [(r(2, t, 16),) for t in (5, 9, 3, 17)], compiles=1,
                   atol=1e-5, rtol=1e-5)


def test_causal_self_attention_with_dropout_in_training_mode_matches_eager_under_a_fixed_seed():
    check_vs_eager(CausalSelfAttention(p=0.3).train(), [(r(3, t, 16),) for t in (5, 9, 4)], compiles=1,
                   atol=1e-5, rtol=1e-5)


def test_small_cnn_matches_eager_over_batch_and_image_sizes():
    check_vs_eager(SmallCNN().eval(), [(r(b, 3, h, w),) for b, h, w in [(2, 12, 16), (4, 10, 10), (3, 17, 9)]],
                   compiles=1, atol=1e-5, rtol=1e-5)


def test_embedding_mean_over_time_linear_model_matches_eager_over_batch_and_length():
    check_vs_eager(BagOfEmbeddings().eval(), [(tokens(b, t),) for b, t in [(2, 7), (5, 3), (3, 12)]], compiles=1)


def test_a_function_calling_the_transformer_block_and_an_mlp_head_matches_eager():
    block, head = TransformerBlock().eval(), nn.Linear(16, 3)

    def f(x, lengths):  # lengths: (B,) long
        h = block(x)
        keep = torch.arange(x.size(1))[None, :] < lengths[:, None]  # (B, T)
        pooled = (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return head(pooled).log_softmax(-1)

    check_vs_eager(f, [(r(2, 5, 16), torch.tensor([5, 3])), (r(3, 8, 16), torch.tensor([1, 8, 4])),
                       (r(5, 3, 16), torch.tensor([3, 3, 2, 1, 2]))], compiles=1, atol=1e-5, rtol=1e-5)


def test_stacked_torch_transformer_encoder_layers_match_eager_over_batch_and_length():
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    check_vs_eager(enc, [(r(b, t, 16),) for b, t in [(2, 5), (4, 3), (3, 12)]], compiles=1, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dynamic,compiles", [(None, 2), (False, 4), (True, 1)])
def test_transformer_block_compile_count_follows_the_dynamic_policy(dynamic, compiles):
    check_vs_eager(TransformerBlock().eval(), [(r(b, t, 16),) for b, t in [(2, 5), (4, 3), (3, 11), (6, 9)]],
                   dynamic=dynamic, compiles=compiles, atol=1e-5, rtol=1e-5)


def test_multihead_attention_with_causal_and_key_padding_masks_matches_eager_with_one_graph():
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()

    def f(x, lengths):  # x (B, T, 16), lengths (B,)
        T = x.size(1)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        padding = torch.arange(T)[None, :] >= lengths[:, None]  # (B, T)
        return mha(x, x, x, attn_mask=causal, key_padding_mask=padding, need_weights=False)[0]

    check_vs_eager(f, [(r(2, 5, 16), torch.tensor([5, 3])), (r(3, 8, 16), torch.tensor([2, 8, 4])),
                       (r(4, 3, 16), torch.tensor([3, 3, 2, 1]))], compiles=1, atol=1e-5, rtol=1e-5)


def test_grouped_query_attention_repeating_kv_heads_matches_eager_over_sequence_length():
    def f(q, kv):  # q (B, 4, T, D), kv (B, 2, T, D): two query heads share each kv head
        k = kv.repeat_interleave(q.size(1) // kv.size(1), dim=1)
        return F.scaled_dot_product_attention(q, k, k, is_causal=True)

    check_vs_eager(f, [(r(2, 4, t, 8), r(2, 2, t, 8)) for t in (5, 9, 3)], compiles=1)


def test_cosine_similarity_retrieval_scores_match_eager_over_query_and_key_counts():
    def f(queries, keys):  # (N, D), (M, D)
        scores = F.cosine_similarity(queries.unsqueeze(1), keys.unsqueeze(0), dim=-1)  # (N, M)
        return scores.topk(2, dim=1).indices, scores.softmax(-1)

    check_vs_eager(f, [(r(3, 8), r(5, 8)), (r(7, 8), r(4, 8)), (r(2, 8), r(9, 8))], compiles=1)


# ------------------------------------------------------------------ autograd and training
def test_gradients_of_a_loss_with_respect_to_inputs_match_eager():
    def loss(x, w, target):  # x (N, C), w (C, K), target (N,)
        logits = (x @ w).tanh() * 3
        return F.cross_entropy(logits, target) + (x.pow(2).mean(1, keepdim=True) * logits.softmax(-1)).sum()

    check_vs_eager(loss, [(r(3, 4, grad=True), r(4, 5, grad=True), torch.tensor([0, 4, 2])),
                          (r(6, 2, grad=True), r(2, 5, grad=True), torch.tensor([1, 1, 3, 0, 2, 4])),
                          (r(2, 7, grad=True), r(7, 5, grad=True), torch.tensor([3, 0]))], compiles=1, grad=True)


def _param_grads(fn, module, args):
    module.zero_grad()
    fn(*args).sum().backward()
    return {n: p.grad.clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize("make,shapes", [
    (mlp, [(3, 6), (8, 6), (2, 6)]),
    (lambda: TransformerBlock().eval(), [(2, 5, 16), (4, 3, 16), (3, 9, 16)]),
    (lambda: CausalSelfAttention().eval(), [(2, 5, 16), (2, 9, 16), (3, 4, 16)]),
    (lambda: SmallCNN().train(), [(2, 3, 12, 16), (4, 3, 10, 10), (3, 3, 17, 9)]),
], ids=["mlp", "transformer_block", "causal_attention", "cnn_train_batchnorm"])
def test_gradients_with_respect_to_parameters_and_inputs_match_eager(make, shapes):
    model = make()
    ref = copy.deepcopy(model)
    cm = ds.compile(model, dynamic=True)
    for s in shapes:
        x = r(*s)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        want, got = _param_grads(ref, ref, (x1,)), _param_grads(cm, model, (x2,))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(x2.grad, x1.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dict(model.named_buffers()), dict(ref.named_buffers()))  # batchnorm stats
    assert cm.stats.compiles == 1, cm.stats.recompile_reasons
    assert cm.stats.fallbacks == [] and cm.stats.graph_breaks == []


def test_a_training_step_with_backward_outside_tracks_eager_parameters_over_varying_batches():
    # BatchNorm over a batch of 2 is ill-conditioned (x_hat = +-d / sqrt(d*d + 4*eps) for a difference d): for some
    # data eager's own float32 parameters land 1e-3 from float64 after a few steps. Where ours differs from eager
    # past assert_close's tolerance, it must be as near a float64 replica as eager is (twice eager's error: over a
    # trajectory either run's rounding may drift first). A CI run on unseeded data (the fused copies of this
    # suite missed the `_seeded` fixture) landed 1.2e-5 from eager.
    from tests.oracle import _no_less_accurate

    def step_loss(model, x, y):
        return F.cross_entropy(model(x), y)

    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    ref, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    compiled_loss = ds.compile(step_loss, dynamic=True)
    runs = [(m, torch.optim.SGD(m.parameters(), lr=0.1), fn) for m, fn in
            ((model, compiled_loss), (ref, step_loss), (exact, step_loss))]
    for step, n in enumerate((4, 9, 2, 7, 16)):
        x, y = r(n, 6), torch.randint(0, 3, (n,))
        for m, o, loss_fn in runs:
            o.zero_grad()
            torch.manual_seed(step)  # the same dropout masks
            loss_fn(m, x.to(next(m.parameters()).dtype), y).backward()
            o.step()
        for (name, p), q, e in zip(model.named_parameters(), ref.parameters(), exact.parameters()):
            try:
                torch.testing.assert_close(p, q, msg=lambda m: f"{name}: {m}")
            except AssertionError:
                _no_less_accurate(p, q, e.detach(), slack=2.0)
        torch.testing.assert_close(dict(model.named_buffers()), dict(ref.named_buffers()))
    assert compiled_loss.stats.compiles == 1, compiled_loss.stats.recompile_reasons
    assert compiled_loss.stats.fallbacks == [] and compiled_loss.stats.graph_breaks == []


def test_a_full_training_step_returning_loss_and_logits_matches_eager_gradients():
    net = mlp().train()

    def f(x, y, w):  # per-sample weights w (N,)
        logits = net(x)
        loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum()
        return loss, logits.detach().argmax(-1)

    check_vs_eager(f, [(r(n, 6, grad=True), torch.randint(0, 3, (n,)), torch.rand(n) + 0.1) for n in (3, 8, 5)],
                   compiles=1, grad=True)


# ------------------------------------------------------------------ more realistic snippets
def test_rms_norm_and_swiglu_feed_forward_match_eager():
    w1, w2, w3, g = r(8, 24), r(24, 8), r(8, 24), r(8)

    def f(x):  # (B, T, 8)
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g
        return x + (F.silu(h @ w1) * (h @ w3)) @ w2

    check_vs_eager(f, [(r(2, 5, 8),), (r(4, 3, 8),), (r(3, 10, 8),)], compiles=1, atol=1e-4, rtol=1e-4)


def test_masked_mean_pooling_with_padding_lengths_matches_eager():
    def f(x, lengths):  # x (B, T, C), lengths (B,)
        mask = torch.arange(x.size(1)).expand(x.size(0), -1) < lengths.unsqueeze(1)
        logits = x.sum(-1).masked_fill(~mask, float("-inf"))
        w = torch.softmax(logits, dim=1)
        return torch.einsum("bt,btc->bc", w, x), mask.sum(1)

    check_vs_eager(f, [(r(2, 5, 3), torch.tensor([5, 2])), (r(4, 7, 3), torch.tensor([1, 7, 3, 4])),
                       (r(3, 2, 3), torch.tensor([2, 1, 2]))], compiles=1)


def test_pairwise_distances_and_top_k_neighbours_match_eager():
    def f(a, b):  # a (N, D), b (M, D)
        d = (a.unsqueeze(1) - b.unsqueeze(0)).pow(2).sum(-1)  # (N, M)
        vals, idx = d.topk(2, dim=1, largest=False)
        return vals, idx, d.sqrt()

    check_vs_eager(f, [(r(3, 4), r(5, 4)), (r(7, 4), r(2, 4)), (r(4, 4), r(9, 4))], compiles=1)


def test_rotary_style_half_split_and_cat_match_eager_over_sequence_length():
    def f(x):  # (B, T, D) with D even
        T, D = x.shape[1], x.shape[2]
        freqs = torch.arange(T).float()[:, None] * torch.arange(D // 2).float()[None, :] / D  # (T, D/2)
        cos, sin = freqs.cos(), freqs.sin()
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    check_vs_eager(f, [(r(2, 5, 8),), (r(3, 9, 8),), (r(4, 3, 6),)], compiles=1)


def test_patchify_images_with_views_and_permutes_matches_eager():
    def f(img, p: int = 2):  # (B, C, H, W) -> (B, H/p * W/p, C*p*p)
        B, C, H, W = img.shape
        x = img.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(B, (H // p) * (W // p), C * p * p)

    check_vs_eager(f, [(r(2, 3, 8, 6),), (r(5, 3, 4, 10),), (r(3, 3, 12, 12),)], compiles=1)


def test_cnn_called_from_a_function_with_a_classifier_softmax_matches_eager():
    cnn = SmallCNN().eval()

    def f(x, temperature=2.0):
        return (cnn(x) / temperature).softmax(-1)

    check_vs_eager(f, [(r(2, 3, 9, 13),), (r(5, 3, 16, 8),), (r(3, 3, 11, 11),)], compiles=1, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ hypothesis: one graph for every drawn shape
_BLOCK = TransformerBlock().eval()
_BLOCK_CF = ds.compile(_BLOCK, dynamic=True)
_ATTN = CausalSelfAttention().eval()
_ATTN_CF = ds.compile(_ATTN, dynamic=True)


def _warm(cf, shape):  # the first compile on distinct sizes: no duck-sizing coincidence
    if cf.stats.compiles == 0:
        cf(r(*shape))


@settings(max_examples=12, deadline=None)
@given(b=st.integers(2, 8), t=st.integers(2, 24))
def test_transformer_block_compiled_once_matches_eager_for_every_drawn_batch_and_length(b, t):
    _warm(_BLOCK_CF, (3, 7, 16))
    x = r(b, t, 16)
    torch.testing.assert_close(_BLOCK_CF(x), _BLOCK(x), atol=1e-5, rtol=1e-5)
    assert _BLOCK_CF.stats.compiles == 1, _BLOCK_CF.stats.recompile_reasons


@settings(max_examples=12, deadline=None)
@given(b=st.integers(2, 6), t=st.integers(2, 32))
def test_causal_attention_compiled_once_matches_eager_for_every_drawn_shape(b, t):
    _warm(_ATTN_CF, (3, 7, 16))
    x = r(b, t, 16)
    torch.testing.assert_close(_ATTN_CF(x), _ATTN(x), atol=1e-5, rtol=1e-5)
    assert _ATTN_CF.stats.compiles == 1, _ATTN_CF.stats.recompile_reasons


def _views_program(x):  # (B, T, C)
    B, T, C = x.shape
    y = x.permute(2, 0, 1).reshape(C, -1)  # (C, B*T)
    return y.softmax(-1).view(C, B, T).transpose(0, 1).sum(-1, keepdim=True), torch.cat([x, x], 1).chunk(2, 1)[0]


_VIEWS_CF = ds.compile(_views_program, dynamic=True)


@settings(max_examples=15, deadline=None)
@given(dims=st.lists(st.integers(2, 9), min_size=3, max_size=3))
def test_views_and_reductions_compiled_once_match_eager_for_every_drawn_shape(dims):
    _warm(_VIEWS_CF, (2, 3, 4))
    x = r(*dims)
    torch.testing.assert_close(_VIEWS_CF(x), _views_program(x))
    assert _VIEWS_CF.stats.compiles == 1, _VIEWS_CF.stats.recompile_reasons
