"""Interception of global-state calls while tracing: per thread, and always restored."""
import builtins
import threading

import pytest
import torch

import dynashape as ds


def test_concurrent_compiles_restore_globals_and_keep_other_threads_calls():
    real = (builtins.print, torch.manual_seed, torch.set_default_dtype)

    def f(x):
        print("traced", x.size(0))
        return (x * 2).sum(0) + x.size(0)

    errors = []
    for _ in range(50):
        cfs = [ds.compile(f, dynamic=d) for d in (True, False, None, True, False, None, True, False)]
        barrier = threading.Barrier(len(cfs))

        def work(cf, n):
            try:
                barrier.wait()
                for k in range(2):
                    x = torch.randn(n + k, 3)
                    torch.testing.assert_close(cf(x), (x * 2).sum(0) + x.size(0))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=work, args=(cf, 2 + i)) for i, cf in enumerate(cfs)]
        [t.start() for t in ts]
        [t.join(30) for t in ts]
        assert not errors, errors[0]
        assert (builtins.print, torch.manual_seed, torch.set_default_dtype) == real


def test_another_threads_print_is_not_captured_into_a_trace():
    started, release = threading.Event(), threading.Event()

    def f(x):
        started.set()
        release.wait(10)  # hold the trace open while the other thread prints
        return x + 1

    cf = ds.compile(f)
    t = threading.Thread(target=cf, args=(torch.ones(2),))
    t.start()
    started.wait(10)
    import io
    import contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print("from the main thread")
    release.set()
    t.join(10)
    assert "from the main thread" in buf.getvalue()
    assert not any("print" in n.name for n in cf.entries[0].graph.nodes)
    torch.set_default_dtype(torch.float32)  # works outside any trace


def test_a_flag_read_only_by_our_own_tracing_is_no_guard():
    """Our own reads of inference mode while tracing (the op memo's key, the meta cache, each node's
    modes) are not the user's: an inference_mode block inside the function once left the guard
    `torch.is_inference_mode_enabled() == True` (the value at its first op), false at every entry, so
    each call compiled again."""
    def f(x):
        with torch.inference_mode():
            y = x * 2
        return y + 1

    def g(x):  # the user's own read stays guarded
        return x + 1 if torch.is_inference_mode_enabled() else x - 1

    cf, cg = ds.compile(f), ds.compile(g)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(cf(x), f(x))
        torch.testing.assert_close(cg(x), g(x))
    assert cf.stats.compiles == 1, cf.stats.recompile_reasons
    assert not [t for t in cf.entries[0].guards if "is_inference_mode_enabled" in t]
    with torch.inference_mode():
        torch.testing.assert_close(cg(x), g(x))
    assert cg.stats.compiles == 2



def test_the_settings_we_compare_around_a_trace_are_read_apart_from_the_users_reads():
    """torch_flags compares the settings before and after each trace through the routed getters: the
    anomaly and warn-always reads after it were recorded as the user's, so every entry guarded them (a
    call under detect_anomaly compiled again) and ds.export refused to run under detect_anomaly."""
    def f(x):
        return x * 2 + 1

    cf = ds.compile(f)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    with torch.autograd.detect_anomaly():
        torch.testing.assert_close(cf(x), f(x))
    torch.set_warn_always(True)
    try:
        torch.testing.assert_close(cf(x), f(x))
    finally:
        torch.set_warn_always(False)
    assert cf.stats.compiles == 1, cf.stats.recompile_reasons
    ep = ds.export(f, (x,))
    with torch.autograd.detect_anomaly():
        torch.testing.assert_close(ep(x), f(x))

    def g(x):  # the user's own read stays guarded
        return x + 1 if torch.is_anomaly_enabled() else x - 1

    cg = ds.compile(g)
    torch.testing.assert_close(cg(x), g(x))
    with torch.autograd.detect_anomaly():
        torch.testing.assert_close(cg(x), g(x))
    assert cg.stats.compiles == 2


def test_each_setting_a_trace_changed_is_put_back():
    """Every setting torch_flags compares can be put back (the anomaly setter was a name torch._C does not
    have: putting it back raised AttributeError)."""
    from dynashape.tracing import torch_flags
    before = torch_flags.now()
    others = {"torch.get_float32_matmul_precision()": "medium", "torch.is_anomaly_enabled()": (True, False),
              "torch.is_warn_always_enabled()": True, "torch.set_printoptions(...)": dict(precision=2)}
    for name, (_, setter) in torch_flags.FLAGS.items():
        value = before[name]
        setter(others.get(name, not value if isinstance(value, bool) else value))
        if name in others:
            assert name in torch_flags.changed(before)
        torch_flags.put_back(before)
        assert torch_flags.now() == before, name


def _sets_anomaly(x):
    torch.autograd.set_detect_anomaly(True)
    return x * 2


def test_anomaly_mode_set_in_the_function_is_set_as_eager_sets_it():
    cf = ds.compile(_sets_anomaly)
    try:
        for _ in range(2):
            torch.autograd.set_detect_anomaly(False)
            torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 2.0))
            assert torch.is_anomaly_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


# ---- torch's global settings and autograd contexts the compiled code never enters (a second hunt)

def _sets_global_settings(x):
    torch.set_float32_matmul_precision("medium")
    torch.backends.mkldnn.enabled = False
    torch.set_printoptions(precision=2)
    return x * 2


def _settings():
    return (torch.get_float32_matmul_precision(), torch.backends.mkldnn.enabled,
            torch._tensor_str.PRINT_OPTS.precision)


def test_a_global_setting_changed_in_the_function_is_changed_on_every_call():
    before = _settings()
    cf = ds.compile(_sets_global_settings)
    try:
        for _ in range(3):
            torch.set_float32_matmul_precision(before[0])
            torch.backends.mkldnn.enabled = before[1]
            torch.set_printoptions(precision=before[2])
            torch.testing.assert_close(cf(torch.ones(3)), torch.full((3,), 2.0))
            assert _settings() == ("medium", False, 2)
        assert "global setting" in cf.stats.graph_breaks[0]
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.mkldnn.enabled = before[1]
        torch.set_printoptions(precision=before[2])


def test_saved_tensor_hooks_forward_ad_and_vmap_inside_run_eagerly():
    import torch.autograd.forward_ad as fwAD
    packed = []

    def hooks(x):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: (packed.append(1), t * 1)[1], lambda t: t * 2):
            return (x * x).sum()

    def dual(x):
        with fwAD.dual_level():
            d = fwAD.make_dual(x, torch.ones_like(x))
            return fwAD.unpack_dual(d.sin()).tangent

    def mapped(x):
        return torch.vmap(lambda r: r * r.sum())(x)
    for fn, make in ((hooks, lambda: torch.ones(3, requires_grad=True)), (dual, lambda: torch.ones(3)),
                     (mapped, lambda: torch.ones(2, 3))):
        cf = ds.compile(fn)
        for _ in range(2):
            a, b = make(), make()
            want, got = fn(a), cf(b)
            torch.testing.assert_close(got, want)
            if a.requires_grad:
                want.backward()
                got.backward()
                torch.testing.assert_close(b.grad, a.grad)
        assert cf.stats.graph_breaks, fn.__name__


def test_a_call_inside_a_dual_level_runs_eagerly_with_its_tangent():
    import torch.autograd.forward_ad as fwAD
    cf = ds.compile(lambda x: x.sin() * 2)
    cf(torch.ones(3))  # compiled outside forward AD
    with fwAD.dual_level():
        d = fwAD.make_dual(torch.ones(3), torch.ones(3))
        tangent = fwAD.unpack_dual(cf(d)).tangent
    assert tangent is not None
    torch.testing.assert_close(tangent, torch.ones(3).cos() * 2)


# ---- torch.nn.utils.parametrize.cached(): a cache in a global of torch's (a sixth hunt)

class _Symmetric(torch.nn.Module):
    def forward(self, w):
        return (w + w.t()) / 2


def _parametrized():
    from torch.nn.utils import parametrize
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    parametrize.register_parametrization(lin, "weight", _Symmetric())
    return lin


@pytest.mark.parametrize("first_inside", [False, True])
def test_a_parametrized_module_inside_parametrize_cached_keeps_the_blocks_weight(first_inside):
    """Inside the block eager computes the weight once (an in-place update of `original` is not seen until
    the block ends); the compiled code computed it again, and a first trace inside the block left its
    FakeTensor in torch's cache."""
    from torch.nn.utils import parametrize
    runs = []
    for compiled in (False, True):
        m = _parametrized()
        f = ds.compile(m) if compiled else m
        x, outs = torch.ones(3, 4), []
        if not first_inside:
            outs.append(f(x))
        with parametrize.cached():
            outs.append(f(x * 2))
            with torch.no_grad():
                m.parametrizations.weight.original.add_(1.0)
            outs.append(f(x * 3))
            assert all(type(v) is torch.Tensor for v in parametrize._cache.values())
        outs.append(f(x))
        runs.append([o.detach() for o in outs])
    torch.testing.assert_close(runs[1], runs[0])


def test_a_parametrized_module_exports_and_checks_the_block():
    from torch.nn.utils import parametrize
    m = _parametrized()
    ep = ds.export(m, (torch.ones(3, 4),))
    torch.testing.assert_close(ep(torch.ones(3, 4)), m(torch.ones(3, 4)))
    with parametrize.cached(), pytest.raises(RuntimeError, match="parametrize._cache_enabled"):
        ep(torch.ones(3, 4))
