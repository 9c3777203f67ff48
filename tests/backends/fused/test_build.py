"""Compiling and caching kernels: tiered start, one kernel for every shape, the disk cache
shared by processes (a warm second process compiles nothing), no compiler -> eager."""
import os
import random
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.backends import fused
from dynashape.backends.fused import build

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

PROGRAM = textwrap.dedent("""
    import torch, torch.nn.functional as F, dynashape as ds
    from dynashape.backends import fused
    ds.config.fused_sync = True
    def f(x, w):
        y = F.silu(x * w) + 1
        return y - y.mean(-1, keepdim=True)
    cf = ds.compile(f, dynamic=True, backend="fused")
    for n in (3, 7, 12):
        x, w = torch.randn(n, 2 * n + 1), torch.randn(2 * n + 1)
        torch.testing.assert_close(cf(x, w), f(x, w))
    assert cf.entries[0].fn.fused
    x, w = torch.randn(5, 11, requires_grad=True), torch.randn(11, requires_grad=True)
    cf(x, w).square().sum().backward()  # a training step: the generated backward's kernels too
    assert type(cf(x, w).grad_fn).__name__ == "FusedRegionBackward"
    print("compiles", fused.counters["compiles"])
""")


def _run(tmp_path, cache):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, DYNASHAPE_FUSED_CACHE_DIR=str(cache), PYTHONPATH=ROOT, DYNASHAPE_CACHE_DIR=str(tmp_path))
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _compiles(p) -> int:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return int(out.split("compiles")[1])


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_a_warm_second_process_compiles_no_cpp(tmp_path):
    cache = tmp_path / "kernels"
    assert _compiles(_run(tmp_path, cache)) >= 2  # the forward's kernel, the backward's
    assert _compiles(_run(tmp_path, cache)) == 0
    names = os.listdir(cache)
    assert not [n for n in names if ".tmp" in n or n.endswith(".cpp.tmp")], names  # no half-written files


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_concurrent_processes_share_one_cache(tmp_path):
    cache = tmp_path / "kernels"
    procs = [_run(tmp_path, cache) for _ in range(2)]
    assert sum(_compiles(p) for p in procs) >= 2  # each may compile; both load whole libraries


EXIT_WHILE_COMPILING = textwrap.dedent("""
    import threading, time, torch
    from dynashape.backends.fused import build
    started, a = threading.Event(), torch.randn(256, 256)
    def job():  # a background job inside torch calls (as the matmul timing probe is) when the program ends
        started.set()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.5:
            torch.mm(a, a)
    build.worker.submit(job)
    build.worker.submit(lambda: print("a queued job ran at exit"))
    started.wait()
""")


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_the_interpreter_exits_cleanly_while_a_background_job_runs(tmp_path):
    # a daemon thread in a torch call at finalization aborted the process (exit 134, "terminate
    # called without an active exception"): the worker drops queued jobs and waits for the running one
    script = tmp_path / "exit.py"
    script.write_text(EXIT_WHILE_COMPILING)
    for _ in range(3):
        out = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=ROOT),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "queued job" not in out.stdout


def test_a_compiler_running_at_exit_is_killed(monkeypatch):
    killed = []

    class Proc:
        def kill(self):
            killed.append(self)
    w = build.Worker()
    monkeypatch.setattr(build, "_compilers", {Proc()})
    w.close(timeout=1)
    assert killed and w.closing
    w.submit(lambda: killed.append("ran"))  # after close nothing runs: the eager code stays
    assert killed == [next(iter(build._compilers))]


def _unique_fn():
    c = random.random()

    def f(x):
        return torch.sigmoid(x * c) + x * 1.25 + c
    return f


def test_first_call_runs_eagerly_and_kernels_swap_in_when_ready():
    f = _unique_fn()
    gate = threading.Event()  # holds the compile thread: a Triton region (no C++ compiler) builds in
    build.worker.submit(lambda: gate.wait(60))  # milliseconds and could be ready before the check
    try:
        with ds.config.patch(fused_sync=False):
            cf = ds.compile(f, dynamic=True, backend="fused")
            x = torch.randn(5, 7)
            torch.testing.assert_close(cf(x), f(x))
            tiered = cf.entries[0].fn
            assert not tiered.fused  # the compiler has not run yet; the call did not wait for it
    finally:
        gate.set()
    fused.wait()
    assert tiered.fused, tiered.error
    torch.testing.assert_close(cf(x), f(x))


def test_new_shapes_reuse_the_kernel():
    f = _unique_fn()
    cf = ds.compile(f, dynamic=True, backend="fused")
    cf(torch.randn(3, 4))
    before = dict(fused.counters)
    for s in [(5, 9), (40, 3), (2, 1000)]:
        x = torch.randn(*s)
        torch.testing.assert_close(cf(x), f(x))
    assert fused.counters["compiles"] == before["compiles"] and cf.stats.compiles == 1


def test_no_compiler_means_eager_with_one_warning(monkeypatch):
    monkeypatch.setattr(build, "compiler", lambda: None)
    monkeypatch.setattr(fused.backend, "_warned", set())
    f = _unique_fn()
    with warnings.catch_warnings(record=True) as w, ds.config.patch(triton="off"):  # Triton would keep devices fused
        warnings.simplefilter("always")
        cf = ds.compile(f, dynamic=True, backend="fused")
        x = torch.randn(4, 4)
        torch.testing.assert_close(cf(x), f(x))
        cf2 = ds.compile(_unique_fn(), dynamic=True, backend="fused")
        cf2(x)
    msgs = [str(m.message) for m in w if "C++ compiler" in str(m.message)]
    assert len(msgs) == 1 and not cf.entries[0].fn.fused


def test_the_kernel_source_takes_sizes_and_strides_as_arguments():
    def f(x, w):
        return F.gelu(x * w) * 2
    cf = ds.compile(f, dynamic=True, backend="fused")
    cf(torch.randn(3, 5), torch.randn(5))
    src = cf.entries[0].fn.regions[0].spec.source
    assert "int64_t s0" in src and "int64_t s1" in src and "st0_1" in src and "#pragma omp simd" in src
    assert "_fused" in cf.entries[0].code  # the Python calls the region's wrapper


@ds.config.patch(triton="auto")  # the C++ kernels' cache, also under DYNASHAPE_TEST_TRITON=cpu
def test_the_compile_trace_records_kernel_cache_misses_hits_and_compile_time(tmp_path):
    from tests.logs.test_trace import _kinds, _trace_of

    f = _unique_fn()

    def run():
        ds.compile(f, dynamic=True, backend="fused")(torch.randn(3, 4))
        build._loaded.clear()  # a fresh lookup: found on disk this time
        ds.reset()  # compiles of one code object share their entries: start over
        ds.compile(f, dynamic=True, backend="fused")(torch.randn(3, 4))

    path, _ = _trace_of(tmp_path, run)
    names = [e["artifact"]["name"] for k, e, _ in _kinds(path) if k == "artifact"]
    assert "fused_kernel_cache_miss" in names and "fused_kernel_cache_hit" in names
    metrics = [e["compilation_metrics"] for k, e, _ in _kinds(path) if k == "compilation_metrics"]
    assert metrics[0]["phases_s"]["kernel_compile"] > 0


def test_without_a_compiler_but_with_triton_cpu_tensors_run_torch_calls_and_devices_keep_triton(monkeypatch):
    pytest.importorskip("triton", reason="triton is not installed")
    from dynashape.backends.fused import triton_run
    monkeypatch.setattr(build, "compiler", lambda: None)
    monkeypatch.setattr(fused.backend, "_warned", set())
    f = _unique_fn()
    with warnings.catch_warnings(record=True) as w, ds.config.patch(triton="auto"):
        warnings.simplefilter("always")
        cf = ds.compile(f, dynamic=True, backend="fused")
        for s in [(3, 4), (5, 4)]:
            x = torch.randn(*s)
            torch.testing.assert_close(cf(x), f(x))
    assert not [m for m in w if "C++ compiler" in str(m.message)]
    rt = cf.entries[0].fn.regions[0]
    assert rt.kernel is None and rt.wrapper.__name__ == rt.name  # the region: torch calls on CPU, Triton on CUDA
    launches = triton_run.counters["launches"]
    with ds.config.patch(triton="cpu"):  # what a device tensor would get, shown with the interpreter's path
        assert rt._make_device_fn() is not None
    assert triton_run.counters["launches"] == launches


EXIT_WHILE_BUILDING = textwrap.dedent("""
    import torch, dynashape as ds
    cf = ds.compile(lambda x: (x.sin() * 2 + 1).relu(), dynamic=True, backend="fused")
    cf(torch.randn(8, 16))  # its kernel is being compiled in the background as the program ends
""")


def test_a_kernel_build_cut_short_at_exit_reports_nothing(tmp_path):
    # the killed compiler was reported as a failed build, and the build's trace records, written after
    # the trace file closed, turned the compile trace off with a warning
    script = tmp_path / "exit_build.py"
    script.write_text(EXIT_WHILE_BUILDING)
    env = dict(os.environ, PYTHONPATH=ROOT, DYNASHAPE_FUSED_CACHE_DIR=str(tmp_path / "kernels"),
               DYNASHAPE_CACHE_DIR=str(tmp_path), DYNASHAPE_TRACE=str(tmp_path / "trace"))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Warning" not in out.stderr, out.stderr[-2000:]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_during_a_background_job_exits_at_once(tmp_path):
    # the child inherits "a job is running" but not the thread running it: waiting for it would hang
    script = tmp_path / "fork_exit.py"
    script.write_text(textwrap.dedent("""
        import os, sys, threading, time
        from dynashape.backends.fused import build
        started = threading.Event()
        build.worker.submit(lambda: (started.set(), time.sleep(2)))
        started.wait()
        t = time.monotonic()
        pid = os.fork()
        if pid == 0:
            build.worker.close(timeout=30)
            os._exit(0 if time.monotonic() - t < 1 else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """))
    out = subprocess.run([sys.executable, str(script)], env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])


def _regions_fn():
    """Three regions between two matrix products (which stay torch calls), new to the kernel cache."""
    c = random.random()

    def f(x, w):
        a = torch.relu(x * c) + 1
        b = torch.sigmoid(a @ w) * c - a
        return torch.tanh((b @ w) * 2) + c
    return f


def _kernel_runs(monkeypatch) -> list:
    """The sources of the compiler runs that build region kernels from now on (not brgemm's library)."""
    runs, real = [], build._compile_to
    def spy(source, *args, **kw):
        if 'void kernel_' in source:
            runs.append(source)
        return real(source, *args, **kw)
    monkeypatch.setattr(build, "_compile_to", spy)
    return runs


@ds.config.patch(triton="off", fused_sync=True)  # the C++ kernels, also under DYNASHAPE_TEST_TRITON=cpu
def test_a_graphs_kernels_compile_in_one_compiler_run_and_are_cached_one_by_one(monkeypatch):
    runs = _kernel_runs(monkeypatch)
    f = _regions_fn()
    cf = ds.compile(f, dynamic=True, backend="fused")
    x, w = torch.randn(5, 8), torch.randn(8, 8)
    torch.testing.assert_close(cf(x, w), f(x, w))
    regions = cf.entries[0].fn.regions
    assert len(regions) >= 2 and len(runs) == 1 and runs[0].count('void kernel_') == len(regions)
    for rt in regions:  # each kernel under its own name on disk: another graph with the region finds it
        assert os.path.exists(os.path.join(build.cache_dir(), f"k{build.key_of(rt.spec.source)}.so"))
    build._loaded.clear()
    ds.reset()
    cf = ds.compile(f, dynamic=True, backend="fused")
    x = torch.randn(9, 8)
    torch.testing.assert_close(cf(x, w), f(x, w))
    assert cf.entries[0].fn.fused and len(runs) == 1


@ds.config.patch(triton="off", fused_sync=True)
def test_kernels_that_fail_to_compile_together_are_compiled_one_by_one(monkeypatch):
    monkeypatch.setattr(fused.backend, "_combine_cpp", lambda sources: "not C++ " + " ".join(sources))
    runs = _kernel_runs(monkeypatch)
    f = _regions_fn()
    failures = fused.counters["failures"]
    cf = ds.compile(f, dynamic=True, backend="fused")
    x, w = torch.randn(5, 8), torch.randn(8, 8)
    torch.testing.assert_close(cf(x, w), f(x, w))
    regions = cf.entries[0].fn.regions
    assert cf.entries[0].fn.fused and fused.counters["failures"] == failures
    assert len(runs) == 1 + len(regions)  # the failed run, then each alone


def test_a_kernel_compiles_only_the_math_wrappers_it_calls():
    cf = ds.compile(lambda x: torch.relu(x * 2) + 1, dynamic=True, backend="fused")
    cf(torch.randn(3, 5))
    cg = ds.compile(lambda x: F.gelu(x * 2) + 1, dynamic=True, backend="fused")
    cg(torch.randn(3, 5))
    relu, gelu = (c.entries[0].fn.regions[0].spec.source for c in (cf, cg))
    assert "ds_erff" not in relu and "ds_expf" not in relu
    if build._mvec_ok():
        assert "ds_erff" in gelu and "ds_expf" not in gelu


FORK_AFTER_COMPILE = textwrap.dedent("""
    import os, sys, threading, time, torch
    torch.set_num_threads(1)  # torch's own thread pool hangs a forked child otherwise
    import dynashape as ds
    from dynashape.backends import fused
    from dynashape.backends.fused import build
    ds.config.fused_sync = True
    def warm(x):  # a compile first, so the background one imports nothing: a module half imported
        return torch.tanh(x + 1) * x  # by the parent's thread at the fork is broken in the child
    ds.compile(warm, backend="fused", dynamic=True)(torch.randn(3, 4))
    ds.config.fused_sync = False
    def f(x):
        return torch.sigmoid(x * 1.5) + x
    cf = ds.compile(f, backend="fused", dynamic=True)
    cf(torch.randn(5, 7))  # queues the kernel build on the compile thread
    held, release = threading.Event(), threading.Event()
    def hold():  # the compile thread's locks, held at the fork as that thread holds them now and then
        with build.worker._cv, build._lock:
            held.set()
            release.wait()
    threading.Thread(target=hold).start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        code = 5
        try:
            def g(x):
                return torch.tanh(x - 0.5) * x
            cg = ds.compile(g, backend="fused", dynamic=True)
            x = torch.randn(6, 9)
            cg(x)
            fused.wait()  # the child's own compile thread builds the kernel
            torch.testing.assert_close(cg(x), g(x))
            code = 0 if cg.entries[0].fn.fused else 4
        finally:
            sys.stderr.flush()
            os._exit(code)
    release.set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            sys.exit(os.waitstatus_to_exitcode(status))
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit(3)  # the child hung
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_the_compile_thread_holds_its_locks_compiles_its_own_kernels(tmp_path):
    # the child inherited the worker's condition lock and the build lock held, by a thread it does not
    # have: its first compile waited for them forever
    script = tmp_path / "fork_compile.py"
    script.write_text(FORK_AFTER_COMPILE)
    env = dict(os.environ, PYTHONPATH=ROOT, DYNASHAPE_FUSED_CACHE_DIR=str(tmp_path / "kernels"),
               DYNASHAPE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
