"""Hugging Face models compiled end to end (tiny random configs): outputs, types, graphs, generate(),
a hand-written KV-cache loop and training steps, each against eager.

Slow cases carry `@pytest.mark.slow` (skipped by the default run; `pytest -m slow tests/models` runs
them); a quick subset runs by default."""
import pytest
import torch

import dynashape as ds
from .hf import DECODER, SHAPES, assert_same, inputs, make, transformers

ALL = ["gpt2", "llama", "qwen2", "mistral", "bert", "distilbert", "t5", "vit", "whisper"]
QUICK = ["gpt2", "bert"]


def _run_forward(name, shapes):
    m = make(name).eval()
    cm = ds.compile(m)
    with torch.no_grad():
        for b, t in shapes:
            kw = inputs(name, b, t)
            assert_same(cm(**kw), m(**kw))
    assert cm.stats.graph_breaks == []
    assert 1 <= cm.stats.compiles <= 3, cm.stats.recompile_reasons
    return cm


@pytest.mark.parametrize("name", QUICK)
def test_quick_model_forward_equals_eager_with_one_dynamic_graph(name):
    _run_forward(name, SHAPES[:4])


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_model_forward_equals_eager_over_batches_and_lengths(name):
    _run_forward(name, SHAPES)


@pytest.mark.slow
def test_mistral_beyond_its_sliding_window_equals_eager():
    torch.manual_seed(0)
    m = transformers.MistralForCausalLM(transformers.MistralConfig(sliding_window=16, **DECODER)).eval()
    cm = ds.compile(m)
    with torch.no_grad():
        for b, t in [(2, 8), (2, 12), (2, 40), (2, 64)]:
            kw = inputs("mistral", b, t)
            assert_same(cm(**kw), m(**kw))
    assert cm.stats.graph_breaks == []


GEN = dict(max_new_tokens=20, min_new_tokens=20, do_sample=False, pad_token_id=1)


def _generate(name, prompts):
    m = make(name).eval()
    want = [m.generate(p, attention_mask=torch.ones_like(p), **GEN) for p in prompts]
    cf = m.forward = ds.compile(m.forward)
    compiles = []
    for p, w in zip(prompts, want):
        assert torch.equal(m.generate(p, attention_mask=torch.ones_like(p), **GEN), w)
        compiles.append(cf.stats.compiles)
    assert cf.stats.graph_breaks == []
    # the first generate: prefill + decode at most twice (static, then dynamic for every length);
    # a later prompt of another length adds at most a dynamic prefill
    assert compiles[0] <= 3 and cf.stats.compiles <= 4, cf.stats.recompile_reasons
    return cf


def test_quick_gpt2_generate_greedy_tokens_equal_eager():
    _generate("gpt2", [torch.randint(2, 1000, (2, 7), generator=torch.Generator().manual_seed(1))])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_generate_greedy_20_tokens_equal_eager_and_decode_compiles_at_most_twice(name):
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(2, 1000, (2, 7), generator=g), torch.randint(2, 1000, (2, 12), generator=g)]
    _generate(name, prompts)


def test_hand_written_kv_cache_loop_equals_eager():
    m = make("llama").eval()
    cm = ds.compile(m)
    ids = torch.randint(2, 1000, (2, 6), generator=torch.Generator().manual_seed(3))

    def decode(fn):
        out = fn(input_ids=ids, use_cache=True)
        cache, toks = out.past_key_values, [out.logits[:, -1].argmax(-1)]
        for _ in range(8):
            out = fn(input_ids=toks[-1][:, None], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            toks.append(out.logits[:, -1].argmax(-1))
        return torch.stack(toks, 1), out.logits

    with torch.no_grad():
        want_toks, want_logits = decode(m)
        got_toks, got_logits = decode(cm)
    assert torch.equal(got_toks, want_toks)
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-4, atol=1e-5)
    assert cm.stats.graph_breaks == [] and cm.stats.compiles <= 3


def _train_step(name, kw_of):
    m = make(name).train()
    torch.manual_seed(0)
    kw = kw_of()
    with torch.random.fork_rng():
        m(**kw).loss.backward()
    want = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad(set_to_none=True)
    cm = ds.compile(m)
    with torch.random.fork_rng():
        cm(**kw).loss.backward()
    got = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys()
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-5, msg=n)
    assert cm.stats.graph_breaks == [] and cm.stats.compiles == 1


def _lm_batch():
    ids = torch.randint(2, 1000, (2, 10), generator=torch.Generator().manual_seed(4))
    return {"input_ids": ids, "labels": ids}


def test_bert_training_step_gradients_equal_eager():
    _train_step("bert-mlm", _lm_batch)


@pytest.mark.slow
def test_gpt2_training_step_gradients_equal_eager():
    _train_step("gpt2", _lm_batch)
