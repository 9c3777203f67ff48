"""produce_guards drops a guard only when what it emits implies it (issue 10, item 1)."""
import math

import pytest
import sympy
import torch

import dynashape as ds
from dynashape.symbolic.guard_output import compile_guards, produce_guards
from dynashape.symbolic.shape_env import ShapeEnv
from dynashape.symbolic.sources import LocalSource, SizeSource

from tests.oracle import check_vs_eager


def _sizes(env, *hints):
    return [env.create_symbol(h, SizeSource(LocalSource(n), 0)) for h, n in zip(hints, "xyz")]


def _accepts(env, **sizes):
    fn = compile_guards(produce_guards(env))
    return fn({k: torch.empty(v) for k, v in sizes.items()})


def test_relational_guard_survives_specializing_one_side():
    env = ShapeEnv(duck_shape=False)
    s0, s1 = _sizes(env, 3, 4)
    env.evaluate(sympy.Lt(s0, s1))  # x.size(0) < y.size(0): True on the example
    env.guard_int(s0)  # range(x.size(0)): s0 == 3, the guard becomes 3 < s1
    assert _accepts(env, x=3, y=4) and _accepts(env, x=3, y=9)
    assert not _accepts(env, x=3, y=3) and not _accepts(env, x=3, y=2)


def test_a_bound_already_in_the_range_is_not_repeated():
    env = ShapeEnv()
    (s0,) = _sizes(env, 9)
    env.evaluate(sympy.Gt(s0, 4))
    assert [g.code for g in produce_guards(env)] == ["5 <= L['x'].size()[0]"]


def _numel_then_len(x):
    if x.numel() > 50:
        x = x + 100
    if len(x) > 3:
        x = x * 2
    return x


@pytest.mark.parametrize("fn", [
    lambda x, y: x.sum() * 0 + (1 if x.size(0) < y.size(0) else 2) + len(range(x.size(0))),
    lambda x, y: x.sum() * 0 + float(min(x.size(0), y.size(0))),
    lambda x, y: x.sum() * 0 + math.sqrt(max(x.size(0), y.size(0))),
    lambda x, y: x.sum() * 0 + int(min(x.size(0), y.size(0))),
])
@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_equals_eager_when_a_related_size_is_specialized(fn, dynamic):
    cases = [(torch.ones(a), torch.ones(b)) for a, b in [(3, 2), (3, 4), (6, 17), (6, 3), (6, 40), (13, 3)]]
    check_vs_eager(fn, cases, dynamic=dynamic, allow_fallback=True)


def test_numel_guard_survives_len_specialization():
    check_vs_eager(_numel_then_len, [(torch.zeros(s),) for s in [(4, 7), (5, 16), (5, 7), (5, 3)]], dynamic=None)
