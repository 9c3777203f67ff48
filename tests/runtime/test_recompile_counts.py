"""How many graphs we compile against torch.compile on the same calls (a counting backend on its side),
with results equal to eager's (issue 22: users switching from torch.compile keep the behaviour they
know). We may compile fewer where that is sound; compiling more is a bug unless README lists it among
the differences on purpose."""
import math
import random

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from tests.oracle import torch_compile_graphs
from tests.runtime.test_policy import Repeats


def X(*shape):
    return torch.randn(*shape)


# name: (fn, calls, dynamic)
SAME = {
    "an int argument": (lambda x, n: x * n, [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int argument beside a size": (lambda x, n: x.sum() + x.size(0) + n, [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int argument as a size": (lambda x, n: torch.zeros(n) + x.sum(), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int argument as a slice bound": (lambda x, n: x[:n] * 2, [(X(8), n) for n in (2, 3, 4, 5)], None),
    "an int argument in view": (lambda x, n: x.view(n, -1), [(X(12), n) for n in (2, 3, 4, 6)], None),
    "an int argument in reshape": (lambda x, n: x.reshape(n, -1) + 1, [(X(12), n) for n in (2, 3, 4, 6)], None),
    "an int argument in range()": (lambda x, n: sum(x * i for i in range(n)), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int argument that is 0 and 1 first": (lambda x, n: x * n, [(X(3), n) for n in (0, 1, 2, 3, 4)], None),
    "a negative int argument": (lambda x, n: x * n, [(X(3), n) for n in (-2, 3, -4, 5)], None),
    "an int keyword": (lambda x, n=1: x * n, [(X(3), n) for n in (2, 3, 4, 5)], None),
    "two int arguments": (lambda x, a, b: x * a + b, [(X(3), a, a + 1) for a in (2, 3, 4, 5)], None),
    "ints in a list": (lambda x, ns: x * ns[0] + ns[1], [(X(3), [a, a + 1]) for a in (2, 3, 4, 5)], None),
    "an int in a dict": (lambda x, d: x * d["k"], [(X(3), {"k": n}) for n in (2, 3, 4, 5)], None),
    "an int in arange": (lambda x, n: torch.arange(n) * x.sum(), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int in expand": (lambda x, n: x.expand(n, -1) + 1, [(X(1, 3), n) for n in (2, 3, 4, 5)], None),
    "an int in F.pad": (lambda x, n: F.pad(x, (n, n)), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int in repeat": (lambda x, n: x.repeat(n), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int in a branch": (lambda x, n: x * 2 if n > 3 else x * 3, [(X(3), n) for n in (2, 3, 4, 5, 6)], None),
    "an int as a dim": (lambda x, n: x.sum(n), [(X(2, 3, 4), n) for n in (0, 1, 2, 0)], None),
    "an int in a tensor": (lambda x, n: torch.tensor([n, 1]) + x.sum(), [(X(3), n) for n in (2, 3, 4, 5)], None),
    "an int times a size": (lambda x, n: x.view(-1)[: n * x.size(0)], [(X(4, 3), n) for n in (1, 2, 3, 2)], None),
    "an int under dynamic=True": (lambda x, n: x * n, [(X(3), n) for n in (2, 3, 4, 5)], True),
    "an int under dynamic=False": (lambda x, n: x * n, [(X(3), n) for n in (2, 3, 4, 5)], False),
    "a float argument": (lambda x, s: x * s + s, [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "a float formula": (lambda x, s: x * (s * 0.1 * 3), [(X(3), s) for s in (0.1, 0.2, 0.3, 0.7)], None),
    "math.sqrt of a float": (lambda x, s: x * math.sqrt(s), [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "math.sqrt of a size": (lambda x: x / math.sqrt(x.size(-1)), [(X(2, n),) for n in (3, 5, 7, 9)], None),
    "a float in a branch": (lambda x, s: x * 2 if s > 1.0 else x * 3, [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)],
                            None),
    "a float in clamp": (lambda x, s: x.clamp(min=s), [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "a float in torch.full": (lambda x, s: torch.full((3,), s) + x, [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "a float in pow": (lambda x, s: x.abs().pow(s), [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "a float in leaky_relu": (lambda x, s: F.leaky_relu(x, s), [(X(3), s) for s in (0.5, 1.5, 2.5, 3.5)], None),
    "a float in a tensor": (lambda x, s: torch.tensor([s, 1.0]) + x.sum(), [(X(3), s) for s in (0.5, 1.5, 2.5)],
                            None),
    "a bool argument": (lambda x, b: x * 2 if b else x + 1, [(X(3), b) for b in (True, False, True, False)], None),
    "a changing size": (lambda x: x * 2, [(X(n),) for n in (2, 3, 4, 5)], None),
    "sizes of two dims": (lambda x: x.sum(1), [(X(n, m),) for n, m in ((2, 3), (3, 3), (3, 4), (5, 6))], None),
    "two inputs of one size": (lambda x, y: x + y, [(X(n), X(n)) for n in (2, 3, 4, 5)], None),
    "two inputs of two sizes": (lambda x, y: x.sum() + y.sum(), [(X(n), X(n + 1)) for n in (2, 3, 4, 5)], None),
    # a rank change makes every size of the tensor dynamic, in any rank (torch's automatic dynamic)
    "an input whose rank changes": (lambda x: x + 1, [(torch.randn(s),) for s in ((), (3,), (4,), (3, 3), (4, 4), (5, 6))],
                                    None),
    "torch.diff with prepend": (lambda x: torch.diff(x, prepend=x[:, :1] - 1, dim=-1),
                                [(X(n, n + 1),) for n in (3, 5, 7)], True),
}
# sizes 0 and 1 share the dynamic graph here (size-oblivious, README: Controlling dynamism); eval dropout's p
FEWER = {
    "a size that becomes 1": (lambda x: x * 2, [(X(n),) for n in (2, 3, 1, 5)], None),
    "sizes 1 and 0": (lambda x: x * 2, [(X(n),) for n in (2, 3, 1, 0, 5)], None),
    "a float in eval dropout": (lambda x, s: F.dropout(x, s, training=False), [(X(3), s) for s in (0.1, 0.2, 0.3)],
                                None),
}


def _ours(fn, calls, dynamic):
    cf = ds.compile(fn, dynamic=dynamic, backend="eager")
    for args in calls:
        torch.testing.assert_close(cf(*args), fn(*args))
    return cf


@pytest.mark.parametrize("name", list(SAME))
def test_we_compile_as_many_graphs_as_torch_compile(name):
    fn, calls, dynamic = SAME[name]
    cf = _ours(fn, calls, dynamic)
    theirs = torch_compile_graphs(fn, calls, dynamic=dynamic)
    assert cf.stats.compiles == theirs, (cf.stats.compiles, theirs, cf.stats.recompile_reasons)


@pytest.mark.parametrize("name", list(FEWER))
def test_we_compile_fewer_graphs_than_torch_compile_where_sound(name):
    fn, calls, dynamic = FEWER[name]
    cf = _ours(fn, calls, dynamic)
    theirs = torch_compile_graphs(fn, calls, dynamic=dynamic)
    assert cf.stats.compiles < theirs, (cf.stats.compiles, theirs)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5

    def forward(self, x):
        return x * self.scale + self.scale


def _module_counts(cls, attr, values, unspec_ints=False):
    import torch._dynamo
    counts = []
    for ours in (True, False):
        m = cls()
        if ours:
            cm = ds.compile(m, backend="eager")
        else:
            torch._dynamo.reset()
            n = [0]

            def counting(gm, example_inputs):
                n[0] += 1
                return gm.forward
            cm = torch.compile(m, backend=counting)
        with ds.config.patch(allow_unspec_int_on_nn_module=unspec_ints), \
                torch._dynamo.config.patch(allow_unspec_int_on_nn_module=unspec_ints):
            for v in values:
                setattr(m, attr, v)
                x = X(2, 3)
                torch.testing.assert_close(cm(x), m(x))
        counts.append(cm.stats.compiles if ours else n[0])
    torch._dynamo.reset()
    return counts


@pytest.mark.parametrize("cls,attr,values,unspec", [
    (Repeats, "k", (2, 3, 4, 5), False),  # torch guards a module's int attributes by value
    (Repeats, "k", (2, 3, 4, 5), True),
    (Scaled, "scale", (0.5, 1.5, 2.5, 3.5), False),  # but not its floats (was 4 graphs, one per value)
], ids=["int attribute", "int attribute, allow_unspec_int_on_nn_module", "float attribute"])
def test_module_attributes_recompile_as_under_torch_compile(cls, attr, values, unspec):
    ours, theirs = _module_counts(cls, attr, values, unspec)
    assert ours == theirs


def test_int_of_a_float_argument_guards_the_int_not_the_float():
    # int() must return a real int, so the traced value is specialized: torch.compile keeps it
    # symbolic (README: where we differ). The guard is on the truncated value: 1.5, 1.6 and 1.7 share
    # a graph (each value had its own before)
    def f(x, s):
        return torch.zeros(int(s * 4)) + x.sum()

    cf = _ours(f, [(X(3), s) for s in (0.5, 1.5, 1.6, 1.7, 2.5)], None)
    assert cf.stats.compiles == 3
    assert "int(L['s'] * 4) == 6" in cf.stats.recompile_reasons[1]


FORMULAS = {
    "s * 0.1 * 3": lambda t, s: t * (s * 0.1 * 3),
    "0.1 * s * 3": lambda t, s: t * (0.1 * s * 3),
    "s + 0.1 + 0.2": lambda t, s: t + (s + 0.1 + 0.2),
    "s / 3 * 3": lambda t, s: t * (s / 3 * 3),
    "(s - 0.1) * 10": lambda t, s: t * ((s - 0.1) * 10),
    "(s + 1e16) - 1e16": lambda t, s: t * ((s + 1e16) - 1e16),
    "s*s*0.1 - s*0.1*s": lambda t, s: t * (s * s * 0.1 - s * 0.1 * s),
    "s * n * 0.1 of a size": lambda t, s: t * (s * t.size(0) * 0.1),
    "s // 0.1 and s % 0.3": lambda t, s: t * (s // 0.1) + (s % 0.3),
    "math.sqrt(s * s)": lambda t, s: t * math.sqrt(s * s + 0.1),
    "relu chain": lambda t, s: (t * (s * 0.1 * 3)).relu() + (s + 0.1 + 0.2),
}


@pytest.mark.parametrize("backend", ["eager", "fused"])
@pytest.mark.parametrize("name", list(FORMULAS))
def test_float_formulas_round_as_eager_bit_for_bit(name, backend):
    # formulas of a float symbol were sympy expressions, reassociated and cancelled: s*0.1*3 became
    # 0.3*s (an ulp off eager for half the values) and (s + 1e16) - 1e16 became s
    fn = FORMULAS[name]
    rng = random.Random(0)
    cf = ds.compile(fn, backend=backend)
    for s in [rng.uniform(-10, 10) for _ in range(12)] + [0.1, 0.7, 3.0, 1e-300]:
        t = torch.full((3,), 1.5, dtype=torch.float64)
        want = fn(t, s)
        assert torch.equal(cf(t, s), want), (s, cf(t, s), want)
    assert cf.stats.compiles == 2 and not cf.stats.graph_breaks
