"""Every rule family against torch over random shapes (hypothesis).

For each drawn example the op is traced afresh with every size symbolic: the
tracer checks on every call that the rule's shape, evaluated at the example,
equals torch's; here we also check that the entry's guards accept the example
it was traced with, that no op fell back to specializing, and that the compiled
result equals eager's.
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import dynashape as ds

dims = st.integers(0, 9)  # 0 and 1 included: specialized, or symbolic under backed_size_oblivious


def r(*shape):
    return torch.randn(*shape)


# name -> (strategy of argument tuples, program)
CASES = {
    "broadcasting add": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1]), r(s[1]))), lambda x, b: x + b),
    "where": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1]),)), lambda x: torch.where(x > 0, x, -x)),
    "sum keepdim": (st.tuples(dims, dims, dims).map(lambda s: (r(*s),)), lambda x: x.sum(1, keepdim=True)),
    "max with dim": (st.tuples(dims, dims).map(lambda s: (r(*s),)), lambda x: x.max(dim=0)),
    "softmax": (st.tuples(dims, dims).map(lambda s: (r(*s),)), lambda x: x.log_softmax(-1)),
    "view -1": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1], 4),)), lambda x: x.view(-1, 4)),
    "permute flatten": (st.tuples(dims, dims, dims).map(lambda s: (r(*s),)),
                        lambda x: x.permute(2, 0, 1).flatten(1)),
    "cat and split": (st.tuples(dims, dims, dims).map(lambda s: (r(s[0], s[2]), r(s[1], s[2]))),
                      lambda x, y: torch.cat([x, y]).split(2)),
    "slicing": (st.tuples(dims, dims).map(lambda s: (r(*s),)), lambda x: x[1:, ::2]),
    "index_select": (st.tuples(dims, dims).map(lambda s: (r(*s), torch.randint(0, max(s[0], 1), (3,)))),
                     lambda x, i: x.index_select(0, i)),
    "matmul batched": (st.tuples(dims, dims, dims).map(lambda s: (r(s[0], s[1], s[2]), r(s[2], 3))),
                       lambda a, b: a @ b),
    "linear": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1], 6), r(5, 6), r(5))),
               lambda x, w, b: F.linear(x, w, b)),
    "conv2d": (st.tuples(dims, st.integers(5, 12), st.integers(5, 12)).map(
        lambda s: (r(s[0], 3, s[1], s[2]), r(4, 3, 3, 3))), lambda x, w: F.conv2d(x, w, stride=2, padding=1)),
    "conv1d, channels from the input": (st.tuples(dims, dims, st.integers(3, 9)).map(lambda s: (r(*s),)),
                                        lambda x: F.conv1d(x, torch.ones(2, x.size(1), 3))),
    "max_pool2d": (st.tuples(dims, st.integers(4, 12), st.integers(4, 12)).map(
        lambda s: (r(s[0], 2, s[1], s[2]),)), lambda x: F.max_pool2d(x, 2)),
    "adaptive_avg_pool2d": (st.tuples(dims, st.integers(3, 12), st.integers(3, 12)).map(
        lambda s: (r(s[0], 2, s[1], s[2]),)), lambda x: F.adaptive_avg_pool2d(x, (2, 3))),
    "layer_norm": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1], 8),)), lambda x: F.layer_norm(x, (8,))),
    "sdpa": (st.tuples(dims, dims, dims).map(lambda s: (r(s[0], 2, s[1], 4), r(s[0], 2, s[2], 4))),
             lambda q, kv: F.scaled_dot_product_attention(q, kv, kv)),
    "pad": (st.tuples(dims, dims).map(lambda s: (r(*s),)), lambda x: F.pad(x, (1, 2, 0, 1))),
    "embedding": (st.tuples(dims, dims).map(lambda s: (torch.randint(0, 10, s), r(10, 4))),
                  lambda i, w: F.embedding(i, w)),
    "cross_entropy": (st.tuples(dims, dims).map(lambda s: (r(s[0], s[1]), torch.randint(0, max(s[1], 1), (s[0],)))),
                      lambda x, t: F.cross_entropy(x, t)),
    "arange from a size": (st.tuples(dims).map(lambda s: (r(s[0], 3),)),
                           lambda x: x + torch.arange(x.size(0))[:, None]),
    "zeros like a size": (st.tuples(dims, dims).map(lambda s: (r(*s),)), lambda x: torch.zeros(x.size(1), 2)),
}


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - the program's own error: compiled must raise it too
        return None, e


@pytest.mark.parametrize("oblivious", [False, True], ids=["sizes", "oblivious-sizes"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_torch_on_random_shapes(name, oblivious):
    strategy, program = CASES[name]

    @settings(max_examples=8, deadline=None)
    @given(args=strategy, more=st.lists(strategy, min_size=1, max_size=3))
    def check(args, more):
        with ds.config.patch(backed_size_oblivious=oblivious):
            cf = ds.compile(program, dynamic=True)
            for i, a in enumerate([args] + more):  # the first traces; the others may reuse its graph
                want, err = _run(program, a)
                if err is not None:
                    with pytest.raises(type(err)):
                        cf(*a)
                    continue
                torch.testing.assert_close(cf(*a), want, equal_nan=True)
                assert any(e.guard_set.fn(cf._bind(a, {})) for e in cf.entries)
        assert cf.stats.graph_breaks == []
        for e in cf.entries:
            e.graph.lint()

    check()
