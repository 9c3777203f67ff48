"""An exported program returns the container types the module returned (export/outtypes.py):
namedtuples, OrderedDict, transformers' ModelOutput, as eager and torch.export do."""
import collections
import io

import pytest
import torch

import dynashape as ds
from dynashape import Dim

Pair = collections.namedtuple("Pair", "a b")


class Nested(torch.nn.Module):
    def forward(self, x):
        return Pair(x + 1, collections.OrderedDict(c=x * 2, d=[x.sum(), Pair(x, 3)])), {"plain": x}


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    else:
        assert got == want


def test_namedtuples_and_dict_subclasses_come_back_as_the_module_returned_them():
    m = Nested()
    ep = ds.export(m, (torch.randn(4),), dynamic_shapes=({0: Dim("n")},))
    for n in (4, 7, 2):
        x = torch.randn(n)
        out = ep.module()(x)
        _same(out, m(x))
    buf = io.BytesIO()
    ds.save(ep, buf)
    buf.seek(0)
    _same(ds.load(buf).module()(x), m(x))  # the types are found among the modules already imported


def test_a_saved_program_whose_output_type_is_not_imported_returns_plain_containers(monkeypatch):
    import sys
    ep = ds.export(Nested(), (torch.randn(3),))
    buf = io.BytesIO()
    ds.save(ep, buf)
    buf.seek(0)
    monkeypatch.delitem(sys.modules, __name__)  # loading never imports a module to find a type
    out = ds.load(buf).module()(torch.randn(3))
    # Pair's module is gone: a plain tuple; OrderedDict's (collections) is imported: kept
    assert type(out[0]) is tuple and type(out[0][1]) is collections.OrderedDict and torch.is_tensor(out[0][0])


def test_an_exported_hf_model_returns_its_model_output():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=32)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 50, (2, 6))
    ep = ds.export(model, (ids,), {"use_cache": False}, dynamic_shapes=({1: Dim("t", max=32)}, None))
    for t in (6, 9):
        x = torch.randint(0, 50, (2, t))
        got, want = ep.module()(x, use_cache=False), model(x, use_cache=False)
        assert type(got) is type(want)
        torch.testing.assert_close(got.logits, want.logits)
        torch.testing.assert_close(got[0], want[0])
        assert got.past_key_values is None and list(got.keys()) == list(want.keys())
