"""Tiny random Hugging Face models (no downloads) and the checks the model suite shares."""
import sys
import time

import pytest
import torch


def _hide_broken_torchvision():
    """transformers imports torchvision when installed; a build that does not match the local torch
    fails to import, which would make every model class fail: hide it then."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision"] = None


_hide_broken_torchvision()
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

V = 1000  # vocabulary
TEXT = dict(vocab_size=V, bos_token_id=0, eos_token_id=1, pad_token_id=1)
DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, **TEXT)


def make(name: str) -> torch.nn.Module:
    T = transformers
    torch.manual_seed(0)
    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, **TEXT))
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(**DECODER))
    if name == "qwen2":
        return T.Qwen2ForCausalLM(T.Qwen2Config(**DECODER))
    if name == "mistral":
        return T.MistralForCausalLM(T.MistralConfig(**DECODER))  # sliding window 4096: above every length here
    if name == "bert":
        return T.BertModel(T.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=256, **TEXT))
    if name == "bert-mlm":
        return T.BertForMaskedLM(T.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                              num_attention_heads=4, max_position_embeddings=256, **TEXT))
    if name == "distilbert":
        return T.DistilBertModel(T.DistilBertConfig(dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                                                    max_position_embeddings=256, vocab_size=V, pad_token_id=1))
    if name == "t5":
        return T.T5Model(T.T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, **TEXT))
    if name == "vit":
        return T.ViTModel(T.ViTConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, image_size=32, patch_size=8))
    if name == "whisper":
        return T.WhisperModel(T.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                                              encoder_attention_heads=4, decoder_attention_heads=4,
                                              encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                                              max_source_positions=64, max_target_positions=64,
                                              **TEXT)).get_encoder()
    raise KeyError(name)


SHAPES = [(1, 5), (2, 8), (4, 16), (3, 33), (8, 128), (2, 7), (1, 64), (5, 12), (8, 20), (2, 100), (6, 9)]


def inputs(name: str, b: int, t: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed * 1000 + b * 131 + t)
    if name == "vit":
        return {"pixel_values": torch.randn(b, 3, 32, 32, generator=g)}
    if name == "whisper":  # mel frames: the encoder's positions cover 2 * max_source_positions frames
        return {"input_features": torch.randn(b, 16, 128, generator=g)}
    ids = torch.randint(2, V, (b, t), generator=g)
    mask = torch.ones_like(ids)
    if b > 1:
        mask[0, : t // 3] = 0  # left padding in one row: the mask matters
    kw = {"input_ids": ids, "attention_mask": mask}
    if name == "t5":
        kw["decoder_input_ids"] = ids[:, : max(1, t // 2)]
    return kw


def assert_same(got, want, path="out"):
    """Same types all the way down, tensors close."""
    assert type(got) is type(want), f"{path}: {type(got).__name__} vs {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=path)
    elif isinstance(want, dict):
        assert list(got) == list(want), path
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{path}[{i}]")
    elif hasattr(want, "__dict__") and not isinstance(want, type):
        assert got is not want, f"{path}: the trace-time object itself"
        assert_same(dict(vars(got)), dict(vars(want)), path)
    else:
        assert got == want, path


def steady(fn, kw, reps=5) -> float:
    """Median seconds per call once warm."""
    fn(**kw)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(**kw)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]
