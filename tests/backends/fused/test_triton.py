"""The Triton lowering (tritongen, triton_run): every region as a Triton kernel, run here by Triton's
interpreter on CPU tensors (TRITON_INTERPRET=1, set by tests/conftest.py where there is no GPU,
with ds.config.triton = "cpu"), against eager over many shapes. Skipped only without triton."""
import os

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[gpu]'): the Triton kernels go untested")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from dynashape.backends.fused import tmath as TM  # noqa: E402
from dynashape.backends.fused import triton_run  # noqa: E402
from dynashape.backends.fused.tritongen import NoTriton, texpr  # noqa: E402
from .oracle import check_fused, no_less_accurate_than_eager  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy under the interpreter: log(0) in masked lanes


@pytest.fixture(autouse=True)
def _triton_on_cpu():
    if not torch.cuda.is_available():
        assert os.environ.get("TRITON_INTERPRET") == "1", "tests/conftest.py sets it before triton is imported"
    with ds.config.patch(triton="cpu", fused_sync=True):
        yield


def launched(fn, cases, **kw):
    """check_fused, asserting the regions really ran as Triton kernels (one launch a region a call at least)."""
    before = triton_run.counters["launches"]
    cf = check_fused(fn, cases, **kw)
    assert triton_run.counters["launches"] - before >= len(cases), "no Triton kernel ran"
    return cf


def rows(*shapes, dtype=torch.float32):
    return [tuple(torch.randn(s, dtype=dtype) if isinstance(s, tuple) else s for s in case) for case in shapes]


def test_a_pointwise_chain_with_broadcasting_matches_eager_on_every_size():
    def f(x, w, b):
        return torch.sigmoid(F.silu(x * w + b) - 0.5).clamp_min(0.1) * x.abs().sqrt()
    launched(f, rows(((3, 7), (7,), (1, 7)), ((2, 7), (7,), (1, 7)), ((130, 7), (7,), (1, 7)), ((5, 7), (7,), (1, 7))))


def test_non_contiguous_and_expanded_inputs_are_read_through_their_strides():
    def f(x, y):  # (summed: a permuted 2-D result the user gets is eager's layout, torch's calls)
        return ((x.t() * 2 + y).exp() - 1).sum(-1)
    cases = [(torch.randn(6, n), torch.randn(n, 1).expand(n, 6)) for n in (3, 5, 40)]
    launched(f, cases)


def test_row_reductions_and_composites_match_eager():
    def f(x, w, b):
        h = F.layer_norm(x * 2, x.shape[-1:], w, b)
        return (h.softmax(-1), (x + 1).log_softmax(-1), (x * 3).logsumexp(-1), (x - 1).var(-1), (x + 2).std(-1),
                (x * x).amax(-1), (x - 3).amin(-1), F.rms_norm(x * 2, x.shape[-1:], w))
    launched(f, [(torch.randn(n, d), torch.randn(d), torch.randn(d)) for n, d in ((3, 5), (7, 33), (2, 1100))])


def test_a_row_longer_than_a_block_is_reduced_in_several_passes():
    def f(x):
        return torch.softmax(x * 0.5, -1)
    launched(f, [(torch.randn(3, n),) for n in (4097, 5000, 9)])


def test_column_sums_and_a_total_mean_match_eager():
    def f(x):
        return (x * 2).sum(0), (x + 1).mean(), (x.relu() * 3).sum((0, 1))
    launched(f, [(torch.randn(n, 4, 9),) for n in (3, 5, 17)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_results_are_rounded_per_op_as_eager_s(dtype):
    from .test_lower import half_precision_rounding
    f, cases = half_precision_rounding(dtype)
    launched(f, cases, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_cross_entropy_stores_its_float64_loss(dtype):
    """The loss is formed in float64: stored as bfloat16 it went through a 32-bit bitcast (a crash)."""
    def f(x, t):
        return F.cross_entropy(x * 2, t), F.cross_entropy(x, t, reduction="none")
    launched(f, [(torch.randn(n, 50, dtype=dtype), torch.randint(0, 50, (n,))) for n in (3, 17)])


def test_bool_sums_and_products_are_or_and_and_as_in_torch():
    """Triton's one-bit integers wrap (True + True == False); torch's bool + is or, * is and."""
    def f(x, y):
        b, c = (x * 2).gt(0), y.lt(0.5)
        return (b * b + b).sum(-1), (b + c) * 1.5, (b * c).int(), torch.where(b + c, x, y)
    launched(f, rows(((3, 7), (3, 7)), ((9, 130), (9, 130))), rtol=0, atol=0)


def test_nan_in_a_row_shows_in_its_max_as_in_eager():
    def f(x):
        return (x + 1).amax(-1), (x * 2).amin(-1)
    x = torch.randn(4, 9)
    x[1, 3] = float("nan")
    # a float amax/amin stays a torch call (eager's choice between opposite zeros is by position)
    check_fused(f, [(x,), (torch.randn(5, 9),)], equal_nan=True, fused=False)
    launched(lambda x: ((x * 2).amax(-1), (x + 1).amin(-1)), [(torch.randint(-9, 9, (4, 9)),), (torch.randint(-9, 9, (5, 9)),)])


def test_cross_entropy_with_ignored_targets_matches_eager_and_an_out_of_range_target_raises_as_eager():
    def f(x, t):
        return F.cross_entropy(x * 2, t, ignore_index=1)
    cases = [(torch.randn(n, 50), torch.randint(0, 50, (n,))) for n in (3, 8, 40)]
    cf = launched(f, cases)
    with pytest.raises(IndexError):
        f(torch.randn(4, 50), torch.tensor([0, 2, 60, 3]))
    with pytest.raises(IndexError):
        cf(torch.randn(4, 50), torch.tensor([0, 2, 60, 3]))


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_over_non_finite_logits_keeps_the_kernel_result_and_a_bad_target_raises_eager_s_error(reduction):
    from .test_lower import cross_entropy_edge_cases

    def f(x, t):
        return F.cross_entropy(x * 1.5, t, reduction=reduction, ignore_index=1)
    x, t = torch.randn(6, 40), torch.randint(0, 40, (6,))
    cross_entropy_edge_cases(launched(f, [(x, t)]), f)


def test_cross_entropy_over_large_logits_keeps_eager_s_digits_in_its_loss_and_gradient():
    # the saved logsumexp in float64 (train fuzz seed 25112946, through the Triton kernels)
    torch.manual_seed(0)
    x = torch.randn(16, 300) * 40
    t = x.argmax(-1)
    before = triton_run.counters["launches"]
    no_less_accurate_than_eager(lambda v: F.cross_entropy(v, t), x)
    assert triton_run.counters["launches"] > before


def test_half_inputs_int_and_bool_values_keep_eager_dtypes():
    def f(x, y):
        return (x * 2).half() + 1, (x > 0).any(-1), (x.long() * 3).amax(-1), (x * 2).bfloat16() * 3, y * y + 1
    launched(f, [(torch.randn(n, 6) * 3, torch.randn(n, 6).half()) for n in (3, 5, 17)])


def test_casts_to_half_types_round_to_nearest_even_as_torch():
    def f(x):  # the interpreter's own bfloat16 conversion truncates: half the values were an ulp off
        return (x * 2).bfloat16(), (x * 3).half(), (x + 1).bfloat16().float() * 2
    launched(f, [(torch.randn(n, 64) * 30,) for n in (3, 5, 17)], rtol=0, atol=0)


def test_math_functions_without_libdevice_in_the_interpreter_match_eager():
    def f(x):
        a = x.abs()
        return (torch.log1p(a) * 2, torch.expm1(x * 0.5) * 2, torch.tanh(x) * 3, torch.tan(x * 0.3) + 1,
                torch.trunc(x * 3) + 1, (a + 0.5).pow(1.7) * 2, x.pow(3) * 2, F.gelu(x, approximate="tanh") * 2,
                F.softplus(x) * 2, F.elu(x) + 1, F.mish(x) * 2, torch.erf(x) + 1)
    x = torch.cat([torch.randn(40), torch.tensor([0.0, -0.0, 1e-8, -1e-8, 30.0, -30.0, 100.0])])
    launched(f, [(x.reshape(1, -1),), (torch.randn(3, 7),)], compiles=2)


def test_training_through_triton_kernels_gives_eagers_gradients():
    def f(x, w, b):
        h = F.layer_norm(x * w, x.shape[-1:]) + b
        return (torch.tanh(h) * x).sum(-1).mean()
    cases = [tuple(torch.randn(*s, requires_grad=True) for s in ((n, 4, 8), (8,), (8,))) for n in (2, 3, 9)]
    launched(f, cases, grad=True)


def test_a_region_with_a_float_symbol_runs_torch_calls_on_devices():
    def f(x, a):
        return (x * a + 1).relu()
    with ds.config.patch(specialize_float=False):
        check_fused(f, [(torch.randn(3, 4), 0.5), (torch.randn(5, 4), 1.5), (torch.randn(2, 4), 2.5)], compiles=None)


def test_index_arithmetic_prints_floor_division_for_non_negative_values_only():
    import sympy
    from dynashape.symbolic.functions import FloorDiv, Mod
    i = sympy.Symbol("i0", integer=True, nonnegative=True)
    s = sympy.Symbol("s0", integer=True, positive=True)
    n = sympy.Symbol("n", integer=True)
    assert texpr(FloorDiv(i, s)) == "(i0 // s0)"
    assert texpr(Mod(n, s)) == "TM.mod(n, s0)"
    with pytest.raises(NoTriton):
        texpr(sympy.Rational(1, 2) * i)


def test_floordiv_and_mod_helpers_are_pythons_on_negative_values():
    @triton.jit
    def k(a_ptr, b_ptr, q_ptr, r_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a, b = tl.load(a_ptr + i), tl.load(b_ptr + i)
        tl.store(q_ptr + i, TM.floordiv(a, b))
        tl.store(r_ptr + i, TM.mod(a, b))
    a = torch.tensor([-7, 7, -7, 7, 0, -6, 5, 9], dtype=torch.int64)
    b = torch.tensor([2, -2, -2, 2, 3, 3, 0, 4], dtype=torch.int64)
    q, r = torch.empty_like(a), torch.empty_like(a)
    k[(1,)](a, b, q, r, N=8)
    want_q = [x // y if y else 0 for x, y in zip(a.tolist(), b.tolist())]
    want_r = [x % y if y else 0 for x, y in zip(a.tolist(), b.tolist())]
    assert q.tolist() == want_q and r.tolist() == want_r


def test_block_sizes_are_tuned_once_per_bucket_and_a_second_process_reads_them_from_disk(tmp_path, monkeypatch):
    from dynashape.backends.fused.tritongen import TritonSpec
    monkeypatch.setattr(triton_run, "_choices", None)
    spec = TritonSpec("", False, 1, 1, [], [1])
    timed = []

    def bench(cfg):
        timed.append(cfg)
        return 1.0 if cfg[1] != 2048 else 0.5
    with ds.config.patch(fused_cache_dir=str(tmp_path)):
        tunes = triton_run.counters["tunes"]
        got = triton_run.choose("k1", spec, 100, 1500, "gpu0", bench)
        assert got[1] == 2048 and triton_run.counters["tunes"] == tunes + 1 and timed
        # the same bucket (100 -> 128 rows, 1500 -> 2048 long) again: no timing
        assert triton_run.choose("k1", spec, 120, 1800, "gpu0", bench) == got and len(timed) == len(set(timed))
        monkeypatch.setattr(triton_run, "_choices", None)  # a new process: nothing in memory
        n = len(timed)
        assert triton_run.choose("k1", spec, 100, 1500, "gpu0", bench) == got
        assert len(timed) == n and triton_run.counters["tunes"] == tunes + 1
        assert (tmp_path / "triton-tune.json").exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_a_module_s_float_eps_under_dynamic_true_is_a_kernel_argument(dtype):
    """Under dynamic=True a module's eps is a float symbol. Triton passes a float as float32, which is
    what a float32 kernel reads of it anyway: such regions are Triton kernels (they ran torch's calls),
    and each call reads the eps it is given. A float64 kernel would read it rounded: torch's calls."""
    from dynashape.backends.fused import triton_run
    ln, rms = torch.nn.LayerNorm(24, dtype=dtype), torch.nn.RMSNorm(24, eps=1e-6, dtype=dtype)
    f = lambda x: (ln(x * 2).relu(), rms(x + 1) * 3)  # noqa: E731
    cf = ds.compile(f, dynamic=True, backend="fused")
    for eps, rows in [(1e-5, 5), (0.5, 7), (3.0, 2)]:
        ln.eps = rms.eps = eps
        x = torch.randn(rows, 24, dtype=dtype)
        before = triton_run.counters["launches"]
        torch.testing.assert_close(cf(x), f(x), **({"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}))
        assert (triton_run.counters["launches"] > before) == (dtype != torch.float64)
    assert cf.stats.compiles == 1


def test_every_block_size_candidate_of_few_long_rows_gives_eager_s_cross_entropy(monkeypatch):
    """The tuner may pick any candidate (16 and 32 warps for few long rows among them): each is right."""
    f = lambda x, t: F.cross_entropy(x * 1.5, t, reduction="none")
    cands = triton_run.candidates(False, 8, 5000)
    assert (1, 8192, 16) in cands and (1, 8192, 32) in cands
    x, t = torch.randn(8, 5000) * 10, torch.randint(0, 5000, (8,))
    used = []
    for cfg in cands:
        ds.reset()
        monkeypatch.setattr(triton_run, "known", lambda *a, cfg=cfg: used.append(cfg) or cfg)
        launched(f, [(x, t)])
    assert set(used) == set(cands)


def test_a_bucket_is_timed_only_once_it_has_been_used_often(tmp_path, monkeypatch):
    """Timing compiles every candidate: a size seen once runs the heuristic block sizes untimed."""
    timed = []
    monkeypatch.setattr(triton_run, "_choices", None)
    monkeypatch.setattr(triton_run, "can_time", lambda dev: True)
    monkeypatch.setattr(triton_run.TritonKernel, "_time", lambda self, args, o, i, cfg: timed.append(cfg) or 1.0)
    cf = ds.compile(lambda x: (x * 2).relu() + 1, dynamic=True, backend="fused")
    with ds.config.patch(fused_cache_dir=str(tmp_path)):
        for n in (3, 200, 5000):  # three buckets, each seen once
            cf(torch.randn(n, 8))
        assert not timed
        x = torch.randn(3, 8)
        for _ in range(triton_run.TUNE_AFTER):
            torch.testing.assert_close(cf(x), (x * 2).relu() + 1)
        assert timed and (tmp_path / "triton-tune.json").exists()
        n = len(timed)
        cf(x)
        assert len(timed) == n


def test_a_kernel_compiling_in_the_background_leaves_its_first_calls_to_torch(monkeypatch):
    """On a GPU a Triton compile takes about a second: the calls meanwhile run the region's torch calls,
    and each specialization Triton compiles for (here a data pointer off 16-byte alignment) is its own."""
    from dynashape.backends.fused import build
    monkeypatch.setattr(triton_run, "compiles_async", lambda dev: True)
    compiled = []
    compile_ = triton_run.TritonKernel._compile
    monkeypatch.setattr(triton_run.TritonKernel, "_compile",
                        lambda self, key, *a: (compiled.append(key), compile_(self, key, *a)))
    f = lambda x: (x * 2).relu() + 1
    cf = ds.compile(f, dynamic=True, backend="fused")
    for x in (torch.randn(5, 8), torch.randn(41)[1:].view(5, 8)):  # aligned, then 4 bytes off
        before, n = triton_run.counters["launches"], len(compiled)
        torch.testing.assert_close(cf(x), f(x))
        assert triton_run.counters["launches"] == before and len(compiled) <= n + 1
        build.worker.wait_idle()
        assert len(compiled) == n + 1
        torch.testing.assert_close(cf(x), f(x))
        torch.testing.assert_close(cf(x * 3), f(x * 3))
        assert triton_run.counters["launches"] == before + 2 and len(compiled) == n + 1


def test_a_graph_on_devices_builds_no_cpp_kernel(monkeypatch):
    """A graph reading CUDA tensors runs its regions as Triton kernels: building C++ twins for CPU
    tensors it never reads kept every call on the eager code for seconds (an H100: the pointwise
    chain at 175 us a call, where its Triton kernel takes 6), and products stay torch's calls."""
    from dynashape.backends.fused import backend, build
    f = lambda x, w, m: F.gelu(x * w).sum(-1, keepdim=True) * (x @ m)
    x, w, m = torch.randn(8, 16), torch.randn(16), torch.randn(16, 4)
    cf = ds.compile(f, dynamic=True, backend="eager")
    cf(x, w, m)
    g = cf.entries[0].graph
    assert g.devices == {"cpu"}
    g.devices = {"cuda"}
    monkeypatch.setattr(build, "load", lambda *a, **k: pytest.fail("a C++ kernel was built"))
    monkeypatch.setattr(backend.gemm, "active", lambda: pytest.fail("brgemm was asked about a device graph"))
    with ds.config.patch(triton="auto"):
        fn, regions = backend.build_fused(g)
    assert regions and all(rt.kernel is None and rt.tkernel is not None for rt in regions)


def test_triton_off_and_auto_keep_cpu_tensors_on_the_cpp_kernels():
    from dynashape.backends.fused import counters
    for mode in ("off", "auto"):
        with ds.config.patch(triton=mode):
            before = triton_run.counters["launches"]
            check_fused(lambda x: (x * 2).relu() + 1, [(torch.randn(3, 4),), (torch.randn(5, 4),)])
            assert triton_run.counters["launches"] == before
    assert counters["failures"] == 0


def test_config_triton_rejects_unknown_modes_by_name():
    with pytest.raises(ValueError, match="config.triton takes one of 'auto', 'off', 'cpu'"):
        ds.config.triton = "gpu"


def test_a_column_sum_is_made_on_its_inputs_device():
    """On an H100, the gradient of a broadcast weight (a column sum, finished by `_fresh` after the
    kernel) came back on the CPU, and autograd refused it; the interpreter's CPU tensors hid it."""
    from dynashape.backends.fused.backend import _fresh
    sums = torch.empty(1, 4, dtype=torch.float64, device="meta").sum(0)
    assert _fresh(sums, (4,), torch.float32).device == sums.device


def test_the_compiler_process_answers_each_request_and_says_why_it_failed():
    """Triton compiles run in a child process (their GIL stalled the calls running meanwhile); here,
    without a GPU, the child's compile fails: it must say why and go on serving, never hang."""
    from dynashape.backends.fused.triton_compile import Compiler, Mock, describe
    cf = ds.compile(lambda x: (x * 2).relu() + 1, dynamic=True, backend="fused")
    cf(torch.randn(5, 8))
    kernel = cf.entries[0].fn.regions[0].tkernel
    args = describe([Mock(torch.float32, True), Mock(torch.float32, False), 5, 8, 8, 1])
    assert args[:2] == [("t", "float32", True), ("t", "float32", False)] and args[2:] == [("i", 5), ("i", 8), ("i", 8), ("i", 1)]
    c = Compiler()
    kw = dict(XBLOCK=1, RBLOCK=8, CONTIG=True, num_warps=4)
    for _ in range(2):
        why = c.compile(kernel.path, args, kw, 0)
        if torch.cuda.is_available():
            assert why is None
        else:
            assert why and not c.failed
    c._proc.kill()
    assert c.compile(kernel.path, args, kw, 0) and c.failed  # the child died: compile in-process from now on


def test_the_launch_key_separates_whatever_triton_specializes_on():
    """A kernel launched directly (its launcher, not JITFunction.run) is found by our launch key: two
    launches with one key must get one specialization from Triton, or the second would run a kernel
    compiled for other strides or alignments. Checked against the installed Triton's own rule."""
    spec_impl = getattr(triton.runtime.jit, "native_specialize_impl", None)
    if spec_impl is None:
        pytest.skip(f"triton {triton.__version__} has no native_specialize_impl to check the key against")
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    ints = [0, 1, 2, 3, 8, 15, 16, 17, 32, 48, 4096, 4097, 2 ** 31 - 16, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 16, -1, -16]

    def one_each(key_of, triton_of, values):
        seen = {}
        for v in values:
            assert seen.setdefault(key_of(v), triton_of(v)) == triton_of(v), (v, key_of(v))
    # strides (specialized), sizes (do_not_specialize: only the width), pointers (16-byte alignment)
    one_each(triton_run._int_spec, lambda v: spec_impl(backend, v, False, True, True), ints)
    one_each(lambda v: -2 ** 31 <= v < 2 ** 31, lambda v: spec_impl(backend, v, False, False, True), ints)

    class Ptr:
        dtype = torch.float32

        def __init__(self, p):
            self.p = p

        def data_ptr(self):
            return self.p
    one_each(lambda p: p % 16 == 0, lambda p: spec_impl(backend, Ptr(p), False, True, True), [0, 4, 8, 12, 16, 32, 1 << 40, (1 << 40) + 4])


def test_direct_launches_reuse_only_the_kernel_triton_launched_for_the_same_key_and_device(monkeypatch):
    """The direct-launch bookkeeping with a stand-in Triton (no GPU here): the first launch of a key
    goes through Triton's path and keeps what it returns; later launches with that key call its
    launcher with the same arguments; another key, or another current device, goes through Triton again."""
    cf = ds.compile(lambda x: (x * 2).relu() + 1, dynamic=True, backend="fused")
    cf(torch.randn(5, 8))
    real = cf.entries[0].fn.regions[0].tkernel
    calls = []

    class Compiled:
        packed_metadata, function = "meta", "fn"

        def run(self, *a):
            calls.append(("direct", a[0], a[9:]))

    class Jit:
        def __getitem__(self, grid):
            def launch(*a, **kw):
                calls.append(("triton", grid[0], a + tuple(kw.values())))
                return Compiled()
            return launch
    import triton.runtime

    class Driver:  # Triton's driver: its first use builds a C module (seconds in an empty cache)
        looked_up = 0

        @property
        def active(self):
            Driver.looked_up += 1
            return type("Active", (), {"get_current_stream": staticmethod(lambda index: "stream")})()
    monkeypatch.setattr(triton.runtime, "driver", Driver())
    monkeypatch.setattr(triton_run, "_direct_ok", lambda: True)
    k = triton_run.TritonKernel(real.spec)
    assert Driver.looked_up == 0, "making a kernel (in the user's call) used Triton's driver"
    k.kernel, k._compiled, k._tuned, k._untimed = Jit(), {}, {}, {}
    current = [0]
    k._current = lambda: current[0]

    class Dev:  # what the bookkeeping reads of a CUDA device
        type, index = "cpu", 0
    x, out = torch.randn(5, 8), torch.empty(5, 8)
    args = (x, out, 5, 8, *x.stride())
    monkeypatch.setattr(triton_run, "compiles_async", lambda dev: False)
    for _ in range(3):
        assert k._launch_if_ready(args, (1, 8, 4), 5, 8, Dev())
    assert [c[0] for c in calls] == ["triton", "direct", "direct"] and Driver.looked_up == 1
    assert calls[1][2][:len(args)] == args and calls[1][1] == calls[0][1]  # the same arguments and grid
    current[0] = 1  # another device is current: Triton's path, and nothing kept from it
    assert k._launch_if_ready(args, (1, 8, 4), 5, 8, Dev()) and calls[-1][0] == "triton"
    current[0] = 0
    k._launch_if_ready((x, out, 5, 8, 16, 1), (1, 8, 4), 5, 8, Dev())  # another stride: another key
    assert calls[-1][0] == "triton" and len(k._compiled) == 2
