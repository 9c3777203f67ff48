"""A traced tensor's identity and class as the user's code asks for them (tracing/identity.py,
fake.py): `id(x)`, `hash(x)`, a dict keyed by the tensor, `x.__class__`. Before, `id(x)` was the
FakeTensor's (a constant of the graph), a global dict keyed by the input kept FakeTensor keys,
and `x.__class__ is torch.Tensor` took the other branch."""
import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor

MEMO: dict = {}


def _keyed_by_the_input(x):
    MEMO[x] = x.shape[0]
    return x * 2


def _id_of_the_input(x):
    return x * 2, id(x)


def _hash_of_the_input(x):
    return x + 1, hash(x)


def test_id_and_hash_of_a_traced_tensor_run_eagerly_with_the_reason():
    for fn, word in ((_id_of_the_input, "id()"), (_hash_of_the_input, "hashed")):
        cf = ds.compile(fn)
        for n in (3, 5):
            x = torch.ones(n)
            got, want = cf(x), fn(x)
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1]
        assert word in cf.stats.graph_breaks[0], cf.stats.graph_breaks


def test_a_dict_keyed_by_the_input_keeps_the_caller_s_tensors():
    MEMO.clear()
    cf = ds.compile(_keyed_by_the_input)
    xs = [torch.ones(n) for n in (3, 5, 7)]
    for x in xs:
        torch.testing.assert_close(cf(x), x * 2)
        assert any(k is x for k in MEMO)
        assert not any(isinstance(k, FakeTensor) for k in MEMO)
    assert "dict or set keyed by the tensor" in cf.stats.graph_breaks[0]
    MEMO.clear()


def test_class_of_a_traced_tensor_is_the_tensor_s_class():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            k = 2 if x.__class__ is torch.Tensor else 3
            j = 5 if isinstance(self.w, torch.nn.Parameter) else 7
            return x * k * j, x.__class__.__name__, self.w.__class__.__name__
    m = M()
    cf = ds.compile(m)
    for n in (3, 3):
        x = torch.ones(n)
        got, want = cf(x), m(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] == ("Tensor", "Parameter")
    assert not cf.stats.graph_breaks


def test_library_code_hashing_a_tensor_still_compiles():
    def f(x):
        y = torch.cat([x, x * 2])  # torch's own code may put tensors in sets (aliasing checks)
        return torch.nn.functional.layer_norm(y, y.shape[-1:])
    cf = ds.compile(f)
    for n in (3, 5):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x), f(x))
    assert not cf.stats.graph_breaks
