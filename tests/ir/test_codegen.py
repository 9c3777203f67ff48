"""Generated code computes what eager computes: integer sizes stay ints, every constant round-trips."""
import numpy as np
import pytest
import torch

import dynashape as ds

from tests.oracle import check_vs_eager

NEG_INF = float("-inf")


def _half_of_doubled(x):
    h = torch.cat([x[x.size(0) // 2:]] * 2).flatten()
    k = h.size(0) // 2
    return torch.full((2,), k), k, h.split(k)


@pytest.mark.parametrize("dynamic", [None, True])
def test_floor_division_of_sizes_stays_an_int(dynamic):
    cf = ds.compile(_half_of_doubled, dynamic=dynamic)
    for n in (5, 6, 7, 9, 12):
        x = torch.randn(n, 3)
        want, got = _half_of_doubled(x), cf(x)
        assert type(got[1]) is int and got[1] == want[1]
        assert got[0].dtype == torch.int64
        torch.testing.assert_close(got, want)


def test_infinite_global_constants_round_trip():
    check_vs_eager(lambda x: x.masked_fill(x < 0, NEG_INF).softmax(-1), [(torch.randn(2, n),) for n in (4, 4, 5)],
                   dynamic=None, equal_nan=True)


@pytest.mark.parametrize("v", [float("inf"), float("-inf"), float("nan"), 1.5])
def test_non_finite_float_arguments_compile_once(v):
    cf = check_vs_eager(lambda x, v: x.clamp(max=v) + v, [(torch.ones(3), v)] * 3, dynamic=None, equal_nan=True)
    assert cf.stats.compiles == 1


@pytest.mark.parametrize("v", [np.float64(2.0), np.float32(0.5), np.int64(3)])
def test_numpy_scalar_arguments_compile_once(v):
    cf = check_vs_eager(lambda x, s: x * s, [(torch.ones(3), v), (torch.ones(3), type(v)(v))], dynamic=None)
    assert cf.stats.compiles == 1


def test_generated_code_that_reads_a_name_it_does_not_define_is_refused():
    from dynashape.ir.codegen import UndefinedNameError, exec_source
    ns = {"torch": torch}
    exec_source("def f(a):\n    b = torch.relu(a)\n    return b\n", "test", ns)  # defined: fine
    with pytest.raises(UndefinedNameError, match="size"):
        exec_source("def g(a):\n    return torch.nn.functional.layer_norm(a, size)\n", "test", dict(ns))


def _global_reads_by_dis(code):
    import dis
    import types
    loads, stores, todo = set(), set(), [code]
    while todo:
        c = todo.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                loads.add(ins.argval)
            elif ins.opname in ("STORE_NAME", "STORE_GLOBAL"):
                stores.add(ins.argval)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return loads - stores


def test_the_bytecode_scan_for_global_reads_agrees_with_dis():
    import inspect

    from dynashape.ir import codegen
    from dynashape.runtime import compile as compile_module
    sources = [inspect.getsource(codegen), inspect.getsource(compile_module),
               # past 256 names: EXTENDED_ARG prefixes; nested code; globals stored and read
               "def f():\n" + "".join(f"    x{i} = g{i}.a + h{i}\n" for i in range(400)) + "    return [k for k in z]\n"
               "global_y = 1\nprint(global_y)\n"]
    for src in sources:
        code = compile(src, "<test>", "exec")
        assert codegen._global_reads(code) == _global_reads_by_dis(code)


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_an_argument_named_like_a_symbol_does_not_shadow_it(backend):
    # the int argument `s1` took the variable name s1, the node binding symbol s1 became `s1_1`,
    # and code that read the symbol as `s1` failed once the argument's variable was deleted
    def f(x, s1, s0):
        return x.sin() * 2 + s1 + s0 * x.size(0)

    cf = ds.compile(f, dynamic=True, backend=backend)
    for n, a, b in [(3, 2, 5), (0, 4, 1), (4, 5, 7)]:
        x = torch.randn(n)
        torch.testing.assert_close(cf(x, a, b), f(x, a, b))


def _activation_programs():
    w, b = torch.randn(6, 4), torch.randn(6)

    def only_reader(x):  # the product's result is read by the activation alone: overwritten in place
        return torch.relu(torch.nn.functional.linear(x, w, b)) + torch.sigmoid(x @ w.t()) + torch.mm(x, w.t()).tanh()

    def also_returned(x):  # returned as well: must keep its own values
        h = torch.nn.functional.linear(x, w, b)
        return torch.relu(h), h

    def read_again(x):  # read by a later call too
        h = x @ w.t()
        return torch.sigmoid(h) * h

    def integer(x):  # sigmoid of an integer product is a float: no in-place variant
        n = (x * 10).long()
        return torch.sigmoid(n @ n.t()), torch.relu(n @ n.t())
    return [only_reader, also_returned, read_again, integer]


@pytest.mark.parametrize("fn", _activation_programs(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("grad", [False, True])
def test_activations_overwrite_a_product_only_when_nothing_else_reads_it(fn, grad):
    cf = ds.compile(fn, dynamic=True, backend="eager")
    for n in (1, 3, 5):
        x = torch.randn(n, 4, requires_grad=grad)
        with torch.set_grad_enabled(grad):
            got, want = cf(x), fn(x)
        torch.testing.assert_close(got, want)
    src = "\n".join(e.fn.source for e in cf.entries if hasattr(e.fn, "source"))
    found = {op for op in ("relu_(", "sigmoid_(", "tanh_(") if op in src}
    want = {"only_reader": {"relu_(", "sigmoid_(", "tanh_("}, "integer": {"relu_("}}.get(fn.__name__, set())
    assert found == (set() if grad else want), src
