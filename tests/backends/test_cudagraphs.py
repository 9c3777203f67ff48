"""CUDA graphs per size bucket (backends/cudagraphs.py). No GPU here: `SIMULATE` sends CPU tensors down
the same path, a "capture" keeping the static buffers and a "replay" rerunning the compiled function on
them, so the padding, the slicing and the proof that padding keeps rows apart are checked against eager."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynashape as ds
from dynashape.backends import cudagraphs


@pytest.fixture(autouse=True)
def _simulated():
    cudagraphs.SIMULATE[0] = True
    try:
        with ds.config.patch(cudagraphs="buckets"), torch.no_grad():
            yield
    finally:
        cudagraphs.SIMULATE[0] = False


def _graphs(e) -> list:
    """The Graphs of an entry, one per ds.config.cudagraphs mode it was called under."""
    g = getattr(e.fn, "graph_fn", e.fn)
    return list(g.modes.values()) if isinstance(g, cudagraphs.ByMode) else []


def graphs_of(cf) -> cudagraphs.Graphs:
    for e in cf.entries:
        if _graphs(e):
            return _graphs(e)[0]
    raise AssertionError("no entry runs through CUDA graphs")


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln, self.fc, self.out = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.out(F.gelu(self.fc(self.ln(x))))
        return torch.softmax(h + x, -1), h.amax(-1)


def test_row_wise_model_pads_batches_to_buckets_and_matches_eager_on_every_size():
    m = Block().eval()
    cf = ds.compile(m, dynamic=True)
    for n in (3, 3, 5, 6, 7, 3, 17, 20, 5):
        x = torch.randn(n, 16)
        torch.testing.assert_close(cf(x), m(x))
    g = graphs_of(cf)
    assert len(g.padded) == 1, g.cuda_graphs_report()  # the batch; the feature dim (dynamic=True) stays exact
    assert len(g.graphs) == 3  # buckets 4, 8 and 32 were seen twice each
    assert sorted(k[0][0][0] for k in g.graphs) == [4, 8, 32]


def test_a_call_with_no_rows_is_never_padded_to_a_row():
    """Ops raise or decide at 0 elements where they do not at 1: `reshape(n, -1)` of an empty tensor is
    ambiguous (eager raises), but padded to one row the replay ran it (fuzz seed 25112958, buckets)."""
    def f(x, y):
        y.reshape(y.size(-3), -1)
        return x * 1
    cf = ds.compile(f, backend="fused")
    for shape in [(0, 0, 0), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1)]:
        x, y = torch.randn(shape), torch.randn(shape)
        if 0 in shape:
            with pytest.raises(RuntimeError, match="ambiguous"):
                f(x, y)
            with pytest.raises(RuntimeError, match="ambiguous"):
                cf(x, y)
        else:
            torch.testing.assert_close(cf(x, y), f(x, y))
    assert cudagraphs.bucket(0, None) == 0 and cudagraphs.bucket(3, None) == 4


def test_a_sum_over_the_rows_keeps_the_size_exact_and_says_why():
    def f(x):
        return (x * 2).sum(0), x.relu()
    cf = ds.compile(f, dynamic=True)
    for n in (3, 3, 5, 5, 6):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x), f(x))
    g = graphs_of(cf)
    assert not g.padded and "reduces or joins over the rows" in " ".join(g.why_exact.values())
    assert len(g.graphs) == 2  # exact sizes 3 and 5
    assert any("stays exact" in line for line in g.cuda_graphs_report())
    assert "stays exact: sum at" in ds.explain(cf, print_report=False)


@pytest.mark.parametrize("body,why", [
    (lambda x: x / x.shape[0], "as a number"),
    (lambda x: x.t() @ x, "other than its rows"),
    (lambda x: x.mean(), "reduces or joins"),
    (lambda x: torch.cat([x, x], 0), "reduces or joins"),
    (lambda x: x.reshape(-1), "other than its rows"),
    (lambda x: x.split(2)[0] * 2, "splits the rows"),
    (lambda x: x.chunk(2)[1] + 1, "splits the rows"),
    (lambda x: x.narrow(0, 1, 2) + 1, "splits the rows"),
    (lambda x: x.unbind(0)[1] + 1, "splits the rows"),
    (lambda x: x.select(0, 1) + 1, "splits the rows"),
    (lambda x: torch.stack([x, x * 2], 0), "reduces or joins"),
])
def test_programs_that_mix_rows_are_never_padded(body, why):
    cf = ds.compile(body, dynamic=True)
    for n in (3, 3, 5, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x), body(x))
    assert why in " ".join(graphs_of(cf).why_exact.values())


class Attention(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.h, self.qkv = h, nn.Linear(d, 3 * d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a.transpose(1, 2).reshape(B, T, C), q.narrow(2, 0, 1).select(-1, 0)


def test_splits_and_views_along_other_dims_keep_rows_apart_and_pad():
    """An attention block's qkv split on the last dim and its view(B, T, h, C // h) kept the batch
    exact on an H100 ("split ... not known to keep rows apart")."""
    m = Attention().eval()
    cf = ds.compile(m, dynamic=True)
    for n in (3, 3, 4, 4, 5, 7, 6):
        x = torch.randn(n, 5, 16)
        torch.testing.assert_close(cf(x), m(x))
    g = graphs_of(cf)
    assert list(g.padded) and g.replays >= 4, g.cuda_graphs_report()
    assert sorted(k[0][0][0] for k in g.graphs) == [4, 8], g.cuda_graphs_report()


@pytest.mark.parametrize("body", [lambda x: torch.cat([x, x * 2], -1), lambda x: torch.stack([x, x * 2], -1)])
def test_joins_along_other_dims_pad(body):
    # the fuzzer (--cudagraphs buckets): cat's tensors sit in a list, and the analysis crashed the call
    cf = ds.compile(body, dynamic=True)
    for n in (3, 3, 4, 5, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x), body(x))
    assert graphs_of(cf).padded and graphs_of(cf).replays == 3


def test_a_failed_analysis_runs_the_entry_as_compiled_and_says_why(monkeypatch):
    def broken(*a, **k):
        raise IndexError("a gap")
    monkeypatch.setattr(cudagraphs, "Graphs", broken)
    f = lambda x: x * 2  # noqa: E731
    cf = ds.compile(f, dynamic=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), f(x))
    assert "CUDA graphs: none (analysing the graph failed: IndexError: a gap)" in ds.explain(cf, print_report=False)


def test_int_and_float_arguments_are_part_of_a_graphs_key():
    def f(x, n, a):
        return x * n + a
    cf = ds.compile(f, dynamic=True)
    for n, a in ((2, 0.5), (2, 0.5), (3, 0.5), (3, 1.5), (4, 2.5), (3, 1.5)):
        x = torch.randn(5, 4)
        torch.testing.assert_close(cf(x, n, a), f(x, n, a))


def test_non_contiguous_inputs_run_as_compiled():
    def f(x):
        return x.relu() * 2
    cf = ds.compile(f, dynamic=True)
    for n in (3, 3, 3):
        x = torch.randn(4, n).t()
        torch.testing.assert_close(cf(x), f(x))


def test_a_matmul_pads_its_left_rows_only():
    def f(x, w):
        return x @ w, F.linear(x, w.t())
    cf = ds.compile(f, dynamic=True)
    w = torch.randn(4, 6)
    for n in (3, 3, 5, 5, 9, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x, w), f(x, w))
    assert graphs_of(cf).padded


def test_a_bucket_is_capped_by_the_largest_size_the_user_allows():
    m = Block().eval()
    cf = ds.compile(m)
    for n in (5, 5, 6, 6):
        x = torch.randn(n, 16)
        ds.mark_dynamic(x, 0, min=2, max=6)
        torch.testing.assert_close(cf(x), m(x))
    g = graphs_of(cf)
    assert sorted({k[0][0][0] for k in g.graphs}) == [6]  # 8 would be past max=6


def test_inputs_that_require_grad_under_grad_mode_run_without_graphs():
    m = Block()
    cf = ds.compile(m, dynamic=True)
    with torch.enable_grad():
        for n in (3, 3, 5):
            x = torch.randn(n, 16, requires_grad=True)
            out = cf(x)[0]
            out.sum().backward()
    assert not graphs_of(cf).graphs


def test_parameters_that_require_grad_under_grad_mode_run_without_graphs_and_give_eagers_gradients():
    m = Block()
    cf = ds.compile(m, dynamic=True)
    with torch.enable_grad():
        for n in (3, 3, 3):
            x = torch.randn(n, 16)
            m.zero_grad()
            cf(x)[0].square().sum().backward()
            got = [p.grad.clone() for p in m.parameters()]
            m.zero_grad()
            m(x)[0].square().sum().backward()
            torch.testing.assert_close(got, [p.grad for p in m.parameters()])
    g = graphs_of(cf)
    assert not g.graphs and "autograd records" in g.why_none


@pytest.mark.parametrize("body,why", [
    (lambda x: x.add_(1) * 2, "in place"),
    (lambda x: x * torch.rand_like(x), "random numbers"),
    (lambda x: F.dropout(x, 0.5, training=True), "random numbers"),
    (lambda x: x[1:], "view of an input"),
    (lambda x: (x * 2, x.t()), "view of an input"),
    # a piece of a split is a view of its input (the fuzzer: x.chunk(1, 0)[-1].zero_() left x unchanged)
    (lambda x: x.chunk(2, 1)[0].zero_() + 1, "in place"),
    (lambda x: x.unbind(1)[1].mul_(2) * 3, "in place"),
    (lambda x: x.split(2, 1)[1], "view of an input"),
])
def test_programs_that_change_inputs_or_draw_random_numbers_get_no_graphs(body, why):
    cf = ds.compile(body, dynamic=True)
    for n in (3, 3, 3):
        torch.manual_seed(0)
        x = torch.randn(n, 4)
        mine, theirs = x.clone(), x.clone()
        got = cf(mine)
        torch.manual_seed(0)
        torch.randn(n, 4)
        torch.testing.assert_close(got, body(theirs))
        torch.testing.assert_close(mine, theirs)
    g = graphs_of(cf)
    assert not g.graphs and why in g.why_none


def test_least_recently_used_graphs_are_freed_past_the_pool_limit():
    def f(x):
        return x * 2 + 1
    cf = ds.compile(f, dynamic=True)
    with ds.config.patch(cudagraph_pool_mb=1):
        for n in (1000, 1000, 3000, 3000, 60000, 60000):  # 4, 16 and 256 KiB buckets... then 1 MiB
            x = torch.randn(n, 4)
            torch.testing.assert_close(cf(x), f(x))
    g = graphs_of(cf)
    assert 0 < len(g.graphs) < 3


def test_outputs_are_fresh_tensors_not_the_graphs_memory():
    def f(x):
        return x + 1
    cf = ds.compile(f, dynamic=True)
    a = cf(torch.zeros(3, 2))
    b = cf(torch.zeros(3, 2))
    c = cf(torch.ones(3, 2))  # a replay: must not change b
    assert b.eq(1).all() and c.eq(2).all() and a.eq(1).all()


def test_config_cudagraphs_rejects_unknown_modes():
    with pytest.raises(ValueError, match="'off', 'exact', 'buckets'"):
        ds.config.cudagraphs = "on"


# ------------------------------------------------------------------ what a graph reads where it lives
class Scaled(nn.Module):
    """A parameter, a buffer changed in place on every call, and a float attribute."""

    def __init__(self):
        super().__init__()
        self.fc, self.s = nn.Linear(4, 4), 0.5
        self.register_buffer("calls", torch.zeros(4))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x) * self.s + self.calls


def test_buffers_changed_in_place_replay_into_the_modules_own_memory():
    m, ref = Scaled(), Scaled()
    ref.load_state_dict(m.state_dict())
    cf = ds.compile(m, dynamic=True)
    for n in (3, 3, 3, 5, 5, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x), ref(x))
        torch.testing.assert_close(m.calls, ref.calls)
    g = graphs_of(cf)
    assert g.why_none is None and len(g.graphs) == 2, g.cuda_graphs_report()


def test_numbers_and_tensors_read_from_attributes_are_part_of_a_graphs_key():
    # a capture bakes in the float it read and the parameter's address: another value, or a parameter
    # replaced by another tensor, is another graph, never a replay of the old one
    m, ref = Scaled(), Scaled()
    ref.load_state_dict(m.state_dict())
    cf = ds.compile(m, dynamic=True)
    x = torch.randn(3, 4)

    def check():
        for _ in range(2):
            torch.testing.assert_close(cf(x), ref(x))
    check()
    m.s = ref.s = 2.0
    check()
    w = torch.randn(4, 4)
    m.fc.weight, ref.fc.weight = nn.Parameter(w.clone()), nn.Parameter(w.clone())
    check()
    with torch.no_grad():  # changed in place: the same memory, the same graph, the new values
        m.fc.bias.add_(1), ref.fc.bias.add_(1)
    check()
    assert sum(len(graphs_of_entry.graphs) for graphs_of_entry in _all_graphs(cf)) == 3


def _all_graphs(cf):
    return [g for e in cf.entries for g in _graphs(e)]


class Cache:
    """A static KV cache as transformers' StaticCache keeps one: fixed-size tensors written in place."""

    def __init__(self, length=16, d=8):
        self.k = torch.zeros(length, d)


def decode_step(x, pos, cache):
    cache.k.index_copy_(0, pos, x)
    w = torch.softmax(x @ cache.k.t(), -1)
    return w @ cache.k


def test_a_cache_held_by_an_object_argument_is_written_in_place_by_the_replay():
    cf = ds.compile(decode_step, dynamic=True)
    c, ref = Cache(), Cache()
    for p in range(8):
        x = torch.randn(1, 8)
        pos = torch.tensor([p])
        torch.testing.assert_close(cf(x, pos, c), decode_step(x, pos, ref))
        torch.testing.assert_close(c.k, ref.k)
    g = graphs_of(cf)
    assert g.why_none is None and len(g.graphs) == 1, g.cuda_graphs_report()


def test_tensors_passed_as_keyword_items_are_copied_not_keyed_by_address():
    def f(x, **kw):
        return x * kw["scale"] + kw["shift"]
    cf = ds.compile(f, dynamic=True)
    for _ in range(4):  # a new tensor each call: one graph, the values copied in
        x, scale = torch.randn(3, 4), torch.randn(4)
        torch.testing.assert_close(cf(x, scale=scale, shift=1.5), f(x, scale=scale, shift=1.5))
    g = graphs_of(cf)
    assert len(g.graphs) == 1 and [s.pretty() for s in g.copied] == ["x", "kw['scale']"], g.copied


def test_a_static_cache_decode_loop_of_a_tiny_llama_replays_one_graph_and_gives_eagers_tokens():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()

    def generate(fwd, steps=6):
        cache = transformers.StaticCache(config=cfg, max_cache_len=32)
        pos = torch.arange(4)
        logits = fwd(input_ids=torch.tensor([[1, 5, 7, 9]]), past_key_values=cache, cache_position=pos).logits
        tokens = []
        for _ in range(steps):
            tokens.append(logits[:, -1].argmax(-1, keepdim=True))
            pos = pos[-1:] + 1
            logits = fwd(input_ids=tokens[-1], past_key_values=cache, cache_position=pos).logits
        return torch.cat(tokens, 1), logits

    with ds.config.patch(cudagraphs="exact"):
        cf = ds.compile(model, dynamic=True)
        got = generate(cf)
    torch.testing.assert_close(got, generate(model))
    decode = _all_graphs(cf)[0]  # newest entry: one token at a time, the cache written in place
    assert decode.why_none is None and len(decode.graphs) == 1, decode.cuda_graphs_report()
    assert decode.written, "the cache's index_copy_ is an in-place write the replay makes"


def test_running_statistics_updated_in_training_mode_are_updated_once_per_call():
    # batch_norm in training mode writes its running mean and variance in place without a `_` name;
    # the warm-up run before a capture must not count as a call
    torch.manual_seed(0)
    m, ref = nn.BatchNorm1d(4), nn.BatchNorm1d(4)
    cf = ds.compile(m, dynamic=True)
    for n in (3, 3, 3, 5, 5, 5, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cf(x), ref(x))
        torch.testing.assert_close((m.running_mean, m.running_var, m.num_batches_tracked),
                                   (ref.running_mean, ref.running_var, ref.num_batches_tracked))
    g = graphs_of(cf)
    assert g.why_none is None and len(g.graphs) == 2 and g.written, g.cuda_graphs_report()


def test_dropout_in_eval_mode_returns_its_input_itself_as_eager_does():
    # F.dropout(x, training=False) (and p=0) is x: a replay's copy would not be; aliasing.FRESH said
    # dropout always made new memory
    def g(x):
        return F.dropout(x, 0.5, training=False)
    cf = ds.compile(g, dynamic=True)
    for n in (3, 3, 3):
        x = torch.randn(n)
        assert cf(x) is x


def test_the_mode_of_each_call_decides_even_for_entries_compiled_under_another():
    """ds.compile(f) twice shares entries: on an H100, bench/gpu.py's "ours + buckets" ran the entries
    "ours" had compiled with graphs off, and no graph was ever captured; turning graphs off after a
    compile under "buckets" went on replaying."""
    def f(x):
        return (x * 2).relu() + 1
    with ds.config.patch(cudagraphs="off"):
        plain = ds.compile(f, dynamic=True)
        x = torch.randn(6, 4)
        plain(x)
    graphs = ds.compile(f, dynamic=True)
    for _ in range(3):
        torch.testing.assert_close(graphs(x), f(x))
    g = graphs_of(graphs)
    assert len(g.graphs) == 1 and g.replays == 2, g.cuda_graphs_report()  # captured at the second call
    with ds.config.patch(cudagraphs="off"):
        torch.testing.assert_close(plain(x), f(x))
    assert g.replays == 2
    assert "1 captured, 2 replays" in ds.explain(graphs, print_report=False)


def test_a_zero_dim_tensor_argument_is_copied_whole():
    # its static buffer has no rows to slice: the capture raised IndexError
    def f(x, s):
        return x * s + 1
    cf = ds.compile(f, dynamic=True)
    for n, v in ((3, 2.0), (3, -1.0), (4, 0.5), (4, 3.0)):
        x, s = torch.randn(n, 2), torch.tensor(v)
        torch.testing.assert_close(cf(x, s), f(x, s))
    assert graphs_of(cf).replays == 3


def test_a_grad_mode_set_for_good_inside_starts_each_run_from_the_callers():
    # the fuzzer (train, --cudagraphs buckets): the warm-up run left grad mode on, and the run that
    # followed recorded autograd history through a parameter under the caller's no_grad
    lin = nn.Linear(4, 4)

    def f(y):
        v0 = lin(y.clamp(-1, 1))
        torch.set_grad_enabled(False)
        v0.exp()
        torch.set_grad_enabled(True)
        return v0 * 2
    cf = ds.compile(f, dynamic=True)
    for n in (3, 3, 4, 4):
        y = torch.randn(n, 4)
        torch.set_grad_enabled(False)
        got = cf(y)
        assert torch.is_grad_enabled()  # as eager leaves it
        torch.set_grad_enabled(False)
        want = f(y)
        torch.set_grad_enabled(False)
        assert (got.requires_grad, got.grad_fn) == (want.requires_grad, want.grad_fn) == (False, None)
        torch.testing.assert_close(got, want)
    g = graphs_of(cf)
    assert g.replays >= 2 and g.exit_grad is True  # a real replay runs no Python: it sets the mode itself


def test_an_output_that_requires_grad_made_inside_gets_no_graph():
    def f(x):
        w = torch.ones(x.shape[-1], requires_grad=True)
        return x * w
    cf = ds.compile(f, dynamic=True)
    with torch.enable_grad():
        for n in (3, 3):
            x = torch.randn(n, 4)
            got = cf(x)
            assert got.requires_grad and got.grad_fn is not None
            torch.testing.assert_close(got, f(x))
    assert "requires grad" in graphs_of(cf).why_none


def test_a_fused_regions_backward_runs_without_graphs():
    # the generated backward is compiled by dynashape and runs inside autograd's backward (grad mode
    # off): it got graphs, and a 0-dim gradient crashed the capture
    f = lambda x, w: (x * w).tanh().sum()  # noqa: E731
    cf = ds.compile(f, dynamic=True, backend="fused")
    captures = cudagraphs.counters["captures"]
    with ds.config.patch(fused_sync=True), torch.enable_grad():
        for n in (3, 3, 5):
            x, w = torch.randn(n, 4, requires_grad=True), torch.randn(4, requires_grad=True)
            cf(x, w).backward()
            gx, gw = x.grad, w.grad
            x.grad = w.grad = None
            f(x, w).backward()
            torch.testing.assert_close((gx, gw), (x.grad, w.grad))
    assert cudagraphs.counters["captures"] == captures


def test_an_argument_that_requires_grad_is_never_copied_even_under_no_grad():
    # the fuzzer (train, no_grad phase): the static copy did not require grad, so a view of it could
    # not retain_grad() where eager's view of the argument can
    def f(w):
        v = w.view_as(w)
        v.retain_grad()
        return v * 2, v.requires_grad
    cf = ds.compile(f, dynamic=True)
    with torch.no_grad():
        for n in (3, 3, 3):
            w = torch.randn(n, requires_grad=True)
            torch.testing.assert_close(cf(w), f(w))
    assert not graphs_of(cf).graphs


def test_a_bucket_captured_while_its_kernels_compiled_is_captured_again_once_they_are_ready(monkeypatch):
    """Triton compiles in the background; a capture meanwhile records the region's torch calls, which
    every replay of that bucket would run for good: the bucket is captured again, once, when the
    compiles are done."""
    pytest.importorskip("triton")
    from dynashape.backends.fused import build, triton_run
    monkeypatch.setattr(triton_run, "compiles_async", lambda dev: True)
    held = []  # compiles held back until the test lets them run
    compile_ = triton_run.TritonKernel._compile
    monkeypatch.setattr(triton_run.TritonKernel, "_compile", lambda self, *a: held.append((self, a)))
    f = lambda x: torch.softmax(x * 2, -1) + 1
    with ds.config.patch(triton="cpu", fused_sync=True, backend="fused"):
        cf = ds.compile(f, dynamic=True)
        x = torch.randn(5, 8)
        captures, launches = cudagraphs.counters["captures"], triton_run.counters["launches"]
        for _ in range(4):  # warm-up call, capture (the kernel compiling), replays
            torch.testing.assert_close(cf(x), f(x))
        g = graphs_of(cf)
        assert cudagraphs.counters["captures"] == captures + 1 and next(iter(g.graphs.values())).provisional
        build.worker.wait_idle()  # the held-back job runs on the worker, after what other tests queued there
        assert held and triton_run.counters["launches"] == launches
        for kernel, a in held:
            compile_(kernel, *a)
        for _ in range(3):  # captured again (now launching the kernel), then replayed
            torch.testing.assert_close(cf(x), f(x))
        assert not next(iter(g.graphs.values())).provisional and g.recaptured
        assert cudagraphs.counters["captures"] == captures + 2 and triton_run.counters["launches"] > launches
