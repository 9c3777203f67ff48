"""Outputs keep eager's types and are fresh objects per call (tracing/outputs.py)."""
import collections
import dataclasses
from collections import OrderedDict

import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor


def _no_fakes(obj, seen=None):
    """No FakeTensor or meta tensor anywhere in a returned value."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        assert type(obj) is not FakeTensor and obj.device.type != "meta", obj
        return
    if isinstance(obj, (list, tuple, set)):
        for x in obj:
            _no_fakes(x, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            _no_fakes(x, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for x in vars(obj).values():
            _no_fakes(x, seen)


@dataclasses.dataclass
class Output(OrderedDict):  # what transformers' ModelOutput is
    last_hidden_state: torch.Tensor = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    n: int


Pair = collections.namedtuple("Pair", "first second")


def test_a_dict_subclass_output_keeps_its_type_items_and_attributes():
    def f(x):
        out = Output(last_hidden_state=x * 2)
        out["last_hidden_state"] = x * 2
        return out

    cf = ds.compile(f)
    for n in (3, 4, 5):
        x = torch.randn(n)
        got, want = cf(x), f(x)
        assert type(got) is Output
        assert torch.equal(got.last_hidden_state, want.last_hidden_state)
        assert list(got) == ["last_hidden_state"] and torch.equal(got["last_hidden_state"], x * 2)


def test_ordered_dict_and_defaultdict_outputs_keep_their_types():
    cf = ds.compile(lambda x: (OrderedDict(b=x + 1, a=x), collections.defaultdict(list, k=x)))
    od, dd = cf(torch.ones(2))
    assert type(od) is OrderedDict and list(od) == ["b", "a"]
    assert type(dd) is collections.defaultdict and dd.default_factory is list and torch.equal(dd["k"], torch.ones(2))


def test_dataclass_namedtuple_and_size_outputs_keep_their_types():
    def f(x):
        return Frozen(x + 1, 3), Pair(x, x * 2), x.shape

    cf = ds.compile(f, dynamic=True)
    for n in (3, 5):
        fr, pair, size = cf(torch.ones(n))
        assert type(fr) is Frozen and fr.n == 3 and torch.equal(fr.a, torch.full((n,), 2.0))
        assert type(pair) is Pair and torch.equal(pair.second, torch.full((n,), 2.0))
        assert type(size) is torch.Size and size == (n,) and all(type(s) is int for s in size)
    assert cf.stats.compiles == 1


class Cache:  # reduced transformers DynamicCache
    def __init__(self):
        self.keys = None

    def update(self, k):
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=1)
        return self.keys


def test_an_object_created_in_the_trace_is_a_fresh_object_per_call_with_this_calls_tensors():
    def f(x):
        cache = Cache()
        cache.update(x * 2)
        return {"cache": cache, "again": cache}

    cf = ds.compile(f)
    a, b = cf(torch.ones(2, 3)), cf(torch.full((2, 3), 2.0))
    assert type(a["cache"]) is Cache and a["cache"] is not b["cache"]
    assert a["cache"] is a["again"]  # aliasing inside one output is kept
    assert torch.equal(a["cache"].keys, torch.full((2, 3), 2.0)) and torch.equal(b["cache"].keys, torch.full((2, 3), 4.0))
    _no_fakes(a)
    _no_fakes(b)


def test_an_argument_object_returned_is_the_callers_object_not_the_traced_one():
    def step(x, cache):
        cache.update(x)
        return cache

    cf = ds.compile(step)
    c1, c2 = Cache(), Cache()
    c1.keys, c2.keys = torch.zeros(1, 2), torch.ones(1, 2)
    assert cf(torch.ones(1, 1), c1) is c1
    assert cf(torch.ones(1, 1), c2) is c2
    assert torch.equal(c2.keys, torch.tensor([[1.0, 1.0, 1.0]]))


def test_a_returned_list_is_a_new_list_per_call():
    cf = ds.compile(lambda x: [x + 1])
    a, b = cf(torch.ones(1)), cf(torch.ones(1))
    assert a is not b and a == [torch.tensor([2.0])]
