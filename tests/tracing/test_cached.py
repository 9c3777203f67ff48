"""`functools.lru_cache` functions called while tracing (tracing/cached.py): the cache is asked
without running the body, a hit is the stored value, a miss runs the call eagerly (which fills the
cache), and a graph that read the cache traces again once it changed. Before, the trace ran the
body and stored its FakeTensor in the user's cache, which eager calls then got back."""
import functools

import torch

import dynashape as ds
from dynashape.tracing.fake import FakeTensor

SCALE = [1.0]


@functools.lru_cache(maxsize=2)
def _mask(n):
    return torch.tril(torch.ones(n, n)) * SCALE[0]


@functools.cache
def _ramp(n):
    return torch.arange(float(n))


def _uses_the_caches(x):
    return x @ _mask(x.shape[0]) + _ramp(x.shape[-1])


def test_a_cached_function_gives_eager_s_values_and_keeps_real_tensors():
    _mask.cache_clear()
    _ramp.cache_clear()
    SCALE[0] = 1.0
    for dynamic in (None, True):
        cf = ds.compile(_uses_the_caches, dynamic=dynamic)
        for step, n in enumerate((3, 3, 4, 4, 3, 5, 6, 3, 3)):
            if step == 6:  # the body reads SCALE: eager's cache holds the old value until cleared
                SCALE[0] = 2.0
                _mask.cache_clear()
            x = torch.randn(n, n)
            got = cf(x)
            torch.testing.assert_close(got, x @ _mask(n) + _ramp(n))  # (a hit: the value eager's call read)
        for n in (3, 4, 5, 6):
            for v in (_mask(n), _ramp(n)):
                assert type(v) is torch.Tensor and not isinstance(v, FakeTensor) and v.device.type == "cpu"
        assert cf.stats.compiles >= 1
        assert any("functools.lru_cache" in b for b in cf.stats.graph_breaks)
    SCALE[0] = 1.0


class _Masked(torch.nn.Module):
    @functools.lru_cache(maxsize=None)
    def mask(self, n):
        return torch.tril(torch.ones(n, n))

    def forward(self, x):
        return x @ self.mask(x.shape[0])


def test_a_cached_method():
    m = _Masked()
    cf = ds.compile(m)
    for n in (3, 3, 4, 4, 3):
        x = torch.randn(n, n)
        torch.testing.assert_close(cf(x), x @ torch.tril(torch.ones(n, n)))
    assert all(type(m.mask(n)) is torch.Tensor for n in (3, 4))
    assert type(_Masked.__dict__["mask"]).__name__ == "_lru_cache_wrapper"  # put back after each trace


def test_a_cached_function_of_a_traced_tensor_runs_eagerly():
    @functools.lru_cache(maxsize=None)
    def norm(t):
        return t / t.sum()

    def f(x):
        return norm(x) * 2
    cf = ds.compile(f)
    x = torch.rand(4) + 0.5
    for _ in range(2):
        torch.testing.assert_close(cf(x), norm(x) * 2)
    assert "called with a traced tensor" in cf.stats.graph_breaks[0]
    assert all(type(k) is torch.Tensor for k in [x])


def test_a_hit_in_the_compiled_code_counts_and_orders_the_cache_as_eager_s():
    """A hit the trace saw was a constant of the graph: the compiled code never asked the cache, so its
    hit count stayed and its least recently used key was another than eager's, whose later miss then
    evicted another key (state fuzzer seed 25112990). The hits, misses and (through the misses of later
    calls) the order of the keys match eager's call by call."""
    def make():
        @functools.lru_cache(maxsize=2)
        def mask(n):
            return torch.tril(torch.ones(n, n))

        def f(x, n):
            return x * mask(n % 3 + 1).sum()
        return mask, f

    for backend in ("eager", "fused"):
        (me, fe), (mc, fc) = make(), make()
        cf = ds.compile(fc, backend=backend)
        for n in (0, 5, 5, 3, 5, 1, 0, 5, 3, 1):
            x = torch.randn(3)
            torch.testing.assert_close(cf(x, n), fe(x, n))
            # (not the misses: the trace asks the cache before eager's run of a miss, which counts one more)
            got, want = mc.cache_info(), me.cache_info()
            assert (got.hits, got.currsize) == (want.hits, want.currsize), (backend, n, got, want)
