"""dynashape.compile end to end: the seed examples, modules, arguments, guards, graph breaks."""
import asyncio
import functools
import re

import pytest
import torch

import dynashape as ds
from tests.oracle import check_vs_eager


def times_size(x):
    return x * x.size()[0]


def specializing(x):
    if x.size()[0] == 10:
        return x * 10
    if x.size()[0] <= 30:
        return x * 200
    return x * x.size()[0]


def cat_then_branch(x, y):
    z = torch.cat([x, y])
    if z.size(0) > 2:
        return z.mul(2)
    else:
        return z.add(2)


@pytest.mark.parametrize("dynamic,compiles", [(False, 4), (True, 1), (None, 2)])
def test_seed_size_times_input_compile_counts(dynamic, compiles):
    check_vs_eager(times_size, [(torch.rand(n),) for n in (10, 20, 30, 40)], dynamic=dynamic, compiles=compiles)


def test_seed_specialization_example_compiles_three_graphs():
    cf = check_vs_eager(specializing, [(torch.rand(n),) for n in (10, 20, 30, 40, 50)], compiles=3)
    guards = [g for e in cf.entries for g in e.guards]
    assert "L['x'].size()[0] == 10" in guards
    assert any(g.endswith("L['x'].size()[0] <= 30") for g in guards)
    assert "L['x'].size()[0] != 10" in guards


def test_seed_cat_example_guards_the_intermediate_size_in_terms_of_inputs():
    cf = check_vs_eager(cat_then_branch, [(torch.rand(n, 3), torch.rand(m, 3)) for n, m in [(2, 5), (4, 7), (6, 2)]],
                        compiles=1)
    (e,) = cf.entries
    assert any("L['x'].size()[0] + L['y'].size()[0] > 2" in g or "2 < L['x'].size()[0] + L['y'].size()[0]" in g
               for g in e.guards) or all("+" not in g for g in e.guards)
    assert "torch.cat" in str(e.graph)


def test_graph_prints_symbolic_shapes_and_the_user_line():
    cf = ds.compile(cat_then_branch, dynamic=True)
    cf(torch.rand(3, 4), torch.rand(5, 4))
    text = str(cf.entries[0].graph)
    assert "= torch.cat([%x, %y])  # test_compile.py:" in text
    assert re.search(r"f32\[s\d \+ s\d, s\d\]", text), text


def test_generated_code_is_readable_python_with_user_lines():
    cf = ds.compile(times_size, dynamic=True)
    cf(torch.rand(5))
    code = cf.entries[0].code
    assert "def forward(L" in code and "x.mul(s0)" in code
    assert "# test_compile.py:" in code and "return x * x.size()[0]" in code


def test_module_compiles_and_reads_parameters_at_each_call():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cm = ds.compile(m, dynamic=True)
    for b in (3, 5, 7):
        x = torch.randn(b, 8)
        torch.testing.assert_close(cm(x), m(x))
    assert cm.stats.compiles == 1
    with torch.no_grad():
        m[0].weight.mul_(2)  # an in-place update is visible without recompiling
    x = torch.randn(4, 8)
    torch.testing.assert_close(cm(x), m(x))
    assert cm.stats.compiles == 1


def test_module_training_flag_is_guarded():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    cm = ds.compile(m, dynamic=True)
    x = torch.randn(3, 4)
    m.eval()
    torch.testing.assert_close(cm(x), m(x))
    m.train()
    torch.manual_seed(1)
    want = m(x)
    torch.manual_seed(1)
    torch.testing.assert_close(cm(x), want)
    assert cm.stats.compiles == 2


def test_kwargs_defaults_and_nested_outputs():
    def f(x, *, scale=2, extra=None):
        out = {"a": x * scale, "b": [x + 1, (x.sum(), x.size(0))]}
        if extra is not None:
            out["c"] = extra
        return out

    check_vs_eager(lambda x: f(x), [(torch.rand(n, 2),) for n in (3, 4)], compiles=1)
    cf = ds.compile(f, dynamic=True)
    x = torch.rand(3, 2)
    torch.testing.assert_close(cf(x, scale=3), f(x, scale=3))
    torch.testing.assert_close(cf(x, scale=3, extra=5), f(x, scale=3, extra=5))


def test_int_argument_is_symbolic_with_dynamic_true():
    def f(x, n):
        return x.repeat(n, 1) * n

    check_vs_eager(f, [(torch.rand(2, 3), n) for n in (2, 3, 5)], compiles=1, allow_fallback=True)


def test_inplace_on_input_mutates_the_callers_tensor():
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    cf = ds.compile(f, dynamic=True)
    out = cf(x)
    assert torch.equal(x, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))


def test_output_aliasing_an_input_is_the_same_object():
    cf = ds.compile(lambda x: x, dynamic=True)
    x = torch.rand(3)
    assert cf(x) is x


def test_autograd_through_compiled_code_matches_eager():
    w = torch.randn(4, 4, requires_grad=True)

    def f(x):
        return (x @ w).tanh().sum(1)

    check_vs_eager(f, [(torch.randn(n, 4, requires_grad=True),) for n in (2, 3)], grad=True, compiles=1)


def test_no_grad_region_inside_the_function_is_replayed():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return x * 3 + y

    cf = ds.compile(f, dynamic=True)
    x = torch.ones(3, requires_grad=True)
    out = cf(x)
    out.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))
    assert torch.is_grad_enabled()


def test_dtype_change_recompiles_with_a_reason():
    cf = ds.compile(times_size, dynamic=True)
    cf(torch.rand(4))
    cf(torch.rand(4, dtype=torch.float64))
    assert cf.stats.compiles == 2
    assert cf.stats.recompile_reasons == ["tensor 'x' dtype mismatch. expected float32, actual float64"]


def test_rank_change_recompiles_with_a_reason():
    cf = ds.compile(times_size, dynamic=True)
    cf(torch.rand(4))
    cf(torch.rand(4, 2))
    assert cf.stats.recompile_reasons == ["tensor 'x' rank mismatch. expected 1, actual 2"]


def test_shape_guard_failure_names_the_line():
    cf = ds.compile(specializing, dynamic=True)
    cf(torch.rand(20))
    cf(torch.rand(40))
    (reason,) = cf.stats.recompile_reasons
    assert reason.startswith("L['x'].size()[0] <= 30 failed (x.size(0) = 40); added at test_compile.py:")
    assert "if x.size()[0] <= 30:" in reason


@ds.config.patch(speculate_data_branches=False)  # speculation off: the branch is a graph break
def test_graph_break_runs_eagerly_and_is_recorded():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    cf = ds.compile(f, dynamic=True)
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats.compiles == 0 and len(cf.stats.graph_breaks) == 1
    assert "test_compile.py" in cf.stats.graph_breaks[0]


@ds.config.patch(speculate_data_branches=False)  # speculation off: the branch is a graph break
def test_fullgraph_graph_break_raises_with_the_user_line_and_advice():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    cf = ds.compile(f, dynamic=True, fullgraph=True)
    with pytest.raises(ds.GraphBreakError) as e:
        cf(torch.ones(3))
    msg = str(e.value)
    assert "test_compile.py" in msg and "if x.sum() > 0:" in msg
    assert "What to do" in msg
    assert "dynashape/" not in msg and "tracer.py" not in msg


def test_a_generator_or_coroutine_function_runs_eagerly_with_its_reason():
    def gen(x):
        for i in range(3):
            yield x * i

    async def coro(x):
        return x * 2

    cg, cc = ds.compile(gen), ds.compile(coro)
    for n in (3, 5, 7):
        x = torch.randn(n)
        got, want = list(cg(x)), list(gen(x))
        assert len(got) == 3 and all(type(g) is torch.Tensor and torch.equal(g, w) for g, w in zip(got, want))
        assert torch.equal(asyncio.run(cc(x)), x * 2)
    assert cg.stats.compiles == 0 and len(cg.stats.graph_breaks) == 1
    assert "generator function" in cg.stats.graph_breaks[0] and "'def gen(x):'" in cg.stats.graph_breaks[0]
    assert "coroutine function" in cc.stats.graph_breaks[0] and "'async def coro(x):'" in cc.stats.graph_breaks[0]
    with pytest.raises(ds.GraphBreakError, match="generator function"):
        ds.compile(gen, fullgraph=True)(torch.ones(2))


def test_reset_forgets_compiled_code():
    cf = ds.compile(times_size, dynamic=True)
    cf(torch.rand(3))
    ds.reset()
    assert cf.entries == [] and cf.stats.compiles == 0
    cf(torch.rand(3))
    assert cf.stats.compiles == 1


def test_decorator_with_and_without_arguments():
    @ds.compile
    def f(x):
        return x + 1

    @ds.compile(dynamic=True)
    def g(x):
        return x + 1

    assert isinstance(f, ds.CompiledFunction) and isinstance(g, ds.CompiledFunction)
    torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 2.0))
    torch.testing.assert_close(g(torch.ones(2)), torch.full((2,), 2.0))


def test_bad_arguments_to_compile_raise_clearly():
    with pytest.raises(TypeError, match="function or an nn.Module"):
        ds.compile(3)
    with pytest.raises(TypeError, match="dynamic must be"):
        ds.compile(times_size, dynamic="yes")
    with pytest.raises(ValueError, match="unknown backend"):
        ds.compile(times_size, backend="nope")


def test_a_compiled_module_inside_a_compiled_function_is_traced_through():
    inner = torch.nn.Linear(4, 4)
    cinner = ds.compile(inner, dynamic=True)

    def outer(x):
        return cinner(x).relu() + 1

    cf = check_vs_eager(outer, [(torch.randn(n, 4),) for n in (2, 3, 5)], compiles=1)
    assert "torch.nn.functional.linear" in str(cf.entries[0].graph)
    assert all(e.graph is not None for e in cinner.entries)  # never traced with the outer's fake inputs
    x = torch.randn(3, 4)
    torch.testing.assert_close(cinner(x), inner(x))


def test_autocast_state_is_guarded():
    def f(x, w):
        return x @ w

    cf = ds.compile(f, dynamic=True)
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    assert cf(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = cf(x, w)
        assert out.dtype == f(x, w).dtype == torch.bfloat16
    assert cf.stats.compiles == 2 and "autocast" in cf.stats.recompile_reasons[0]


# ---------------------------------------------------------------- errors are eager's; our failures are not crashes
@pytest.mark.parametrize("fn,args", [
    (lambda x, w: torch.nn.functional.conv1d(x, w), (torch.randn(5, 3, 6), torch.randn(2, 4, 3))),
    (lambda x: x.amax(0), (torch.randn(0, 3),)),
    (lambda x: x[10], (torch.randn(3),)),
    (lambda x: x.view(7), (torch.randn(3),)),
])
@pytest.mark.parametrize("dynamic", [None, True])
def test_the_programs_own_errors_keep_eagers_type_and_message(fn, args, dynamic):
    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(type(eager.value)) as compiled:
        ds.compile(fn, dynamic=dynamic)(*args)
    assert str(compiled.value).splitlines()[0] == str(eager.value).splitlines()[0]


@pytest.mark.parametrize("make,kind", [
    (lambda: torch.randn(4, 3).to_sparse_csr(), "sparse"),
    (lambda: torch.randn(4, 3).to_sparse(), "sparse"),
    (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "quantized"),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested"),
])
def test_unsupported_tensor_inputs_run_eagerly_naming_the_argument(make, kind):
    def f(x):
        return x.to_padded_tensor(0.0) * 2 if x.is_nested else (x.dequantize() if x.is_quantized else x.to_dense()) * 2
    cf = ds.compile(f)
    x = make()
    torch.testing.assert_close(cf(x), f(x))
    assert kind in cf.stats.graph_breaks[0] and "argument x" in cf.stats.graph_breaks[0]


class _Sub(torch.Tensor):
    pass


class _Tens(torch.Tensor):  # its own torch function: every op's result times 10
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.mul:
            with torch._C.DisableTorchFunctionSubclass():
                out.mul_(10)
        return out


@pytest.mark.parametrize("backend", ["eager", "fused"])
def test_tensor_subclass_inputs_run_eagerly_and_a_parameter_argument_is_one(backend):
    def f(x):
        kind = 1 if isinstance(x, _Sub) else 2 if isinstance(x, torch.nn.Parameter) else 3
        return x * 2 + kind, type(x * 2).__name__
    cf = ds.compile(f, backend=backend)
    for x in (torch.ones(3).as_subclass(_Sub), torch.ones(3).as_subclass(_Tens), torch.nn.Parameter(torch.ones(3)),
              torch.ones(3)):
        (got, gt), (want, wt) = cf(x), f(x)
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        assert type(got) is type(want) and gt == wt
    assert any("tensor subclass (_Sub)" in b and "argument x" in b for b in cf.stats.graph_breaks)


def test_compiled_partials_of_one_function_keep_their_own_arguments():
    def base(scale, x, shift=0.0):
        return x * scale + shift
    p2, p3 = functools.partial(base, 2.0), functools.partial(base, 3.0, shift=1.0)
    c2, c3 = ds.compile(p2), ds.compile(p3)
    x = torch.ones(3)
    torch.testing.assert_close(c2(x), p2(x))
    torch.testing.assert_close(c3(x), p3(x))  # (it returned p2's: one cache for both)
    p3.keywords["shift"] = 9.0  # changed in place
    torch.testing.assert_close(c3(x), p3(x))


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_default_the_caller_leaves_out_is_guarded_by_value(dynamic):
    def g(x, n=0):
        return x + n
    cg = ds.compile(g, dynamic=dynamic)
    x = torch.ones(3)
    for n in (0, 1, 2, 3, 2):
        g.__defaults__ = (n,)
        torch.testing.assert_close(cg(x), g(x))  # (automatic dynamic made n a symbol the trace never read)
        torch.testing.assert_close(cg(x, 5), g(x, 5))
    fs = []
    for k in range(4):  # one code object, four defaults
        def h(x, k=k):
            return x * k
        fs.append(h)
    for h in fs:
        torch.testing.assert_close(ds.compile(h, dynamic=dynamic)(x), h(x))


def _helper(x):
    return x * 2


def test_a_helper_whose_code_is_replaced_and_a_partial_s_function_default_are_guarded():
    def f(x):
        return _helper(x) + 1
    cf = ds.compile(f)
    x = torch.ones(3)
    torch.testing.assert_close(cf(x), f(x))
    old = _helper.__code__
    _helper.__code__ = (lambda x: x * 3).__code__  # autoreload updates every function of a module so
    try:
        torch.testing.assert_close(cf(x), f(x))
    finally:
        _helper.__code__ = old

    def run_k(k, x, shift=0.0):
        return x * k + shift
    p = functools.partial(run_k, 2.0)
    cp = ds.compile(p)
    cp(x)
    for d in (1.0, 5.0, -0.0):
        run_k.__defaults__ = (d,)
        torch.testing.assert_close(cp(x), p(x))


def _tagged(x):
    return x * 2


def test_a_function_s_own_attributes_are_guarded_and_its_writes_replayed():
    def f(x):
        f.calls = getattr(f, "calls", 0) + 1  # notebooks keep state on functions
        return _tagged(x) + getattr(_tagged, "tag", 0.0) + (1 if hasattr(_tagged, "flag") else -1)
    cf = ds.compile(f)
    x = torch.ones(3)
    try:
        for step in range(4):
            if step == 1:
                _tagged.tag = 7.0
            if step == 2:
                _tagged.flag = True
            f.calls = 10 * step
            want = f(x)
            f.calls = 10 * step
            torch.testing.assert_close(cf(x), want)
            assert f.calls == 10 * step + 1
    finally:
        _tagged.__dict__.clear()


def test_plain_values_of_equal_value_but_another_type_or_sign_of_zero_are_not_the_traced_ones():
    class Cfg:
        def __init__(self):
            self.eps, self.n, self.sizes = 0.0, 2, [1, 2]
    cfg, table = Cfg(), {"k": 1}

    def f(x):
        return x * cfg.eps + cfg.n * table["k"] + cfg.sizes[0]
    cf = ds.compile(f)
    x = torch.ones(2)
    for change in (lambda: None, lambda: setattr(cfg, "eps", -0.0), lambda: setattr(cfg, "eps", 0.0),
                   lambda: table.__setitem__("k", 1.0), lambda: table.__setitem__("k", True),
                   lambda: cfg.sizes.__setitem__(0, 1.0)):
        change()
        got, want = cf(x), f(x)
        assert got.dtype == want.dtype and str(got) == str(want)  # (-0. prints as such)
    p = functools.partial(lambda x, shift: (x + shift, shift), shift=-0.0)
    cp = ds.compile(p)
    for v in (-0.0, 0, 0.0):
        p.keywords["shift"] = v
        (gt, gs), (wt, ws) = cp(x), p(x)
        assert repr(gs) == repr(ws) and str(gt) == str(wt)


def test_a_function_whose_code_is_replaced_runs_the_new_code():
    def q(x):
        return x * 2
    cq = ds.compile(q)
    x = torch.ones(3)
    torch.testing.assert_close(cq(x), q(x))
    q.__code__ = (lambda x: x * 3).__code__  # as IPython's autoreload updates a function
    torch.testing.assert_close(cq(x), q(x))
    assert "was replaced" in cq.stats.recompile_reasons[-1]


def test_a_deeply_nested_argument_runs_eagerly():
    v = torch.ones(2)
    for _ in range(2000):
        v = [v]

    def unwrap(v):
        while isinstance(v, list):
            v = v[0]
        return v * 2
    cf = ds.compile(unwrap)
    torch.testing.assert_close(cf(v), unwrap(v))
    assert "nested more than" in cf.stats.graph_breaks[0]


def test_an_internal_failure_is_a_graph_break_with_eagers_result(monkeypatch):
    from dynashape.tracing import tracer as tracer_mod

    def boom(*a, **k):
        raise AssertionError("internal")
    monkeypatch.setattr(tracer_mod.Tracer, "_record", boom)
    cf = ds.compile(lambda x: x * 2)
    torch.testing.assert_close(cf(torch.ones(3)), torch.ones(3) * 2)
    assert "could not trace" in cf.stats.graph_breaks[0] and "AssertionError: internal" in cf.stats.graph_breaks[0]


def test_dynashape_errors_meant_for_the_user_are_still_raised():
    x = torch.ones(5)
    ds.mark_dynamic(x, 0, min=6, max=9)
    from dynashape.symbolic.errors import InvalidHintError
    with pytest.raises(InvalidHintError, match="outside the range"):
        ds.compile(lambda x: x * 2)(x)


def test_overlapping_inputs_compile_when_only_fresh_tensors_change_in_place():
    def local(a, b):
        c = a.clone()
        c.add_(1)  # memory the call made: how a and b overlap does not matter
        return c + b

    def through_contiguous(a, b):
        c = a.contiguous()  # `a` itself when it is contiguous: the write reaches b's memory
        c.add_(1)
        return c + b

    for fn, breaks in ((local, False), (through_contiguous, True)):
        cf = ds.compile(fn)
        for n in (6, 6, 9):
            base, ref = torch.arange(float(n)), torch.arange(float(n))
            torch.testing.assert_close(cf(base[:-1], base[1:]), fn(ref[:-1], ref[1:]))
            torch.testing.assert_close(base, ref)
        assert bool(cf.stats.graph_breaks) is breaks, cf.stats.graph_breaks


# ------------------------------------------------------------------ copies and pickles (as torch.compile's)
def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _double(mod, args, out):
    return out * 2


@pytest.mark.parametrize("how", ["deepcopy", "torch.save", "pickle"])
def test_a_compiled_module_copies_and_pickles_after_it_has_run(how):
    import copy
    import io
    import pickle
    m = ds.compile(_mlp(), dynamic=True)
    x = torch.randn(5, 4)
    m(x)  # compiled state (entries, guards, kernels) exists: none of it travels
    m.register_forward_hook(_double)
    if how == "deepcopy":
        m2 = copy.deepcopy(m)
    else:
        buf = io.BytesIO()
        torch.save(m, buf) if how == "torch.save" else pickle.dump(m, buf)
        buf.seek(0)
        m2 = torch.load(buf, weights_only=False) if how == "torch.save" else pickle.load(buf)
    assert isinstance(m2, ds.CompiledModule) and m2._orig_mod is not m._orig_mod
    assert m2._orig_mod[0].weight is not m._orig_mod[0].weight and torch.equal(m2._orig_mod[0].weight, m._orig_mod[0].weight)
    for n in (5, 2, 7):
        y = torch.randn(n, 4)
        torch.testing.assert_close(m2(y), m(y))  # the hook on the wrapper came along
    assert m2.stats.compiles == 1 and m2._compiled.dynamic is True
    with torch.no_grad():
        m2._orig_mod[0].weight.add_(1.0)  # a copy: the original's parameters are not the copy's
    assert not torch.equal(m2._orig_mod[0].weight, m._orig_mod[0].weight)
    torch.testing.assert_close(m(x), m._orig_mod(x) * 2)


def test_a_compiled_function_copies_as_a_function_and_a_compiled_bound_method_with_its_object():
    import copy
    f = ds.compile(lambda x: x + 1)
    assert copy.copy(f) is f and copy.deepcopy(f) is f
    model = _mlp()
    fwd = ds.compile(model.forward, dynamic=True)
    x = torch.randn(3, 4)
    fwd(x)
    fwd2 = copy.deepcopy(fwd)
    assert fwd2 is not fwd and fwd2._module is not model
    torch.testing.assert_close(fwd2(x), model(x))


def test_the_recompile_limit_message_names_the_knob_for_a_module_int_attribute():
    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * self.calls
    cf = ds.compile(Counting())
    with pytest.warns(UserWarning, match="allow_unspec_int_on_nn_module") as w:
        for _ in range(10):
            cf(torch.ones(2))
    assert "mark_dynamic" not in str(w[0].message)
    with ds.config.patch(allow_unspec_int_on_nn_module=True):  # what it says works: one dynamic graph more
        m = Counting()
        cf = ds.compile(m)
        for _ in range(10):
            torch.testing.assert_close(cf(torch.ones(2)), torch.ones(2) * m.calls)
        assert cf.stats.compiles == 2
