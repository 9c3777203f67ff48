"""Compiling kernels: the system C++ compiler, a disk cache shared by processes, ctypes loading.

A kernel's library is named by a hash of its source, the compiler's version and the flags,
so a second process running the same program finds every library on disk and compiles
nothing (`counters['compiles']` counts compiler runs in this process). Libraries are written
to a temporary name and renamed into place: a concurrent reader sees a whole file or none.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from ...guards import native as _native
from ...runtime.config import config
from ...fleet.pgo_store import pgo_dir
from ...symbolic import tracehook

log = logging.getLogger("dynashape.fused")

# -fno-trapping-math: the floating-point exception flags are nobody's concern here, and without it
# g++ 12 refuses to if-convert a select whose arms were computed in the same loop (a relu's
# backward: `where(relu <= 0, 0, g)` after other stores), leaving that loop scalar (14x slower)
# -fno-version-loops-for-strides: -O3 copies a loop nest for "every variable stride is 1" (the strided
# branch's st*_2 of a kernel, 1 on nearly every call) and g++ 12 left the contiguous branch's simd
# reduction scalar in that copy: ((x + y) * w).mean() over 4x64x128 took 19 us, 5.6 without it
# -ffp-contract=off: for C++ g++ contracts `a * b + c` into one fused multiply-add (across statements,
# even with -std=c++17), skipping the product's rounding eager does: sign(a * b - a * b) came out +-1
# -fwrapv: int32/int64 arithmetic wraps as eager's (two's complement); signed overflow is undefined in
# C++ otherwise, and g++ folded `x + 1 > x`, `abs(x) >= 0`, `x * x >= 0` to true (INT_MAX, INT_MIN, 46341)
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fno-version-loops-for-strides",
         "-ffp-contract=off", "-fwrapv", "-shared", "-fPIC", "-std=c++17"]
MVEC = ["-DDS_MVEC", "-lmvec"]  # glibc's vector math: expf/erff/tanhf... vectorize in the inner loop

counters = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "failures": 0,
            "rejected": 0}  # kernel results replaced by the torch calls' (RegionRuntime.rejected)
failure_messages: list = []  # the first message of each kind of failure (backend._failed)
last_failure = [""]  # the latest one's message
_loaded: dict = {}  # key -> ctypes function
_prebuilt: set = set()  # keys prebuild compiled that load has not loaded yet
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def compiler() -> tuple[str, str] | None:
    """(path, version line) of the C++ compiler, or None when there is none."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        return None
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return cxx, out.stdout.splitlines()[0] if out.stdout else cxx


@functools.lru_cache(maxsize=None)
def _mvec_ok() -> bool:
    """Whether libmvec links (glibc >= 2.35 has the erf/tanh variants we declare)."""
    src = "extern \"C\" float erff(float) noexcept __attribute__((simd(\"notinbranch\")));\n" \
          "extern \"C\" void f(float* x, long n) {\n#pragma omp simd\nfor (long i = 0; i < n; i++) x[i] = erff(x[i]); }\n"
    try:
        _compile_to(src, FLAGS + MVEC, os.path.join(cache_dir(), "probe-mvec.so"), count=False)
        return True
    except Exception:  # noqa: BLE001 - any failure means: build without it
        return False


def cache_dir() -> str:
    d = config.fused_cache_dir or os.path.join(pgo_dir(), "kernels")
    d = os.path.expanduser(d)
    os.makedirs(d, exist_ok=True)
    return d


_native.directory[0] = cache_dir  # the guards' dict watcher (guards/native.py) is built beside the kernels


@functools.lru_cache(maxsize=None)
def _no_native_f16() -> list[str]:
    """["-mno-avx512fp16"] where the compiler knows it. On a CPU with AVX512-FP16 (-march=native on
    Sapphire Rapids), g++ 12 does float16 arithmetic natively and, in C++ (no -fexcess-precision=standard),
    keeps `(float)(_Float16)x` unrounded: a float16 kernel skipped eager's rounding of each op
    (`g * x + g * (1 - x)` came out as g exactly). Without it the conversions are F16C's, exact."""
    cxx = compiler()
    try:
        out = subprocess.run([cxx[0], "-mno-avx512fp16", "-x", "c++", "-fsyntax-only", "-"], input="",
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError, TypeError):
        return []
    return ["-mno-avx512fp16"] if out.returncode == 0 else []


def flags() -> list[str]:
    return FLAGS + _no_native_f16() + (MVEC if _mvec_ok() else [])


_KERNEL = 'extern "C" void kernel('


def key_of(source: str) -> str:
    cxx = compiler()
    h = hashlib.sha256()
    for part in (source, cxx[1] if cxx else "", " ".join(flags()), "kernel_<key>"):  # the symbol's name
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _compile_to(source: str, fl: list, path: str, count: bool = True) -> None:
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler")
    d = os.path.dirname(path)
    fd, tmp_src = tempfile.mkstemp(suffix=".cpp", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_so = tmp_src[:-4] + ".so.tmp"
    try:
        cmd = [cxx[0], tmp_src, "-o", tmp_so] + [x for x in fl if x != "-lmvec"] + (["-lmvec"] if "-lmvec" in fl else [])
        out = _run_compiler(cmd)
        if count:
            counters["compiles"] += 1
        if out.returncode != 0:
            raise RuntimeError(f"C++ compile failed ({' '.join(cmd)}):\n{out.stderr[-4000:]}")
        os.replace(tmp_so, path)  # atomic: readers see the whole library or none
    finally:
        for p in (tmp_src, tmp_so):
            try:
                os.unlink(p)
            except OSError:
                pass


_compilers: set = set()  # compiler processes running now (killed at interpreter exit)


def _run_compiler(cmd: list) -> subprocess.CompletedProcess:
    if worker.closing:
        raise RuntimeError("the interpreter is exiting")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _compilers.add(p)
    try:
        out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    finally:
        _compilers.discard(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def load(source: str, n_ptr: int, n_int: int, floats: tuple = ()):
    """The `kernel` function of `source`, compiled (or found on disk) and loaded, with argtypes set:
    `n_ptr` pointers, then `n_int` int64s, of which those at the indices `floats` are doubles."""
    key = key_of(source)
    with _lock:
        fn = _loaded.get(key)
        if fn is not None:
            counters["memory_hits"] += 1
            return fn
    lib = _library(_named(source, key), key, flags())
    fn = getattr(lib, f"kernel_{key}")
    ints = [ctypes.c_double if i in floats else ctypes.c_int64 for i in range(n_int)]
    fn.argtypes = [ctypes.c_void_p] * n_ptr + ints + [ctypes.c_int]
    fn.restype = None
    with _lock:
        _loaded[key] = fn
    return fn


def _named(source: str, key: str) -> str:
    """A kernel's source with its symbol named by its key: libraries compiled together hold several."""
    return source.replace(_KERNEL, f'extern "C" void kernel_{key}(', 1)


def prebuild(sources: list, combine) -> None:
    """Compile the kernels of `sources` not in memory or on disk in one compiler run: `combine` makes
    one translation unit of their (named) sources. g++ spends ~0.3 s on the includes and helpers of
    each run, so a graph of 50 regions took a minute; together they take about as long as one. Each
    kernel's library on disk is a hard link to the shared one, found as before by the next process.
    Where the run fails, nothing is written: `load` compiles each alone and reports its own error."""
    keys = {}
    for src in sources:
        key = key_of(src)
        if key not in _loaded and key not in keys and not os.path.exists(os.path.join(cache_dir(), f"k{key}.so")):
            keys[key] = src
    if len(keys) < 2:
        return
    d = cache_dir()
    fd, shared = tempfile.mkstemp(suffix=".so", dir=d)
    os.close(fd)
    t0 = time.perf_counter()
    try:
        _compile_to(combine([_named(src, key) for key, src in keys.items()]), flags(), shared)
    except Exception:  # noqa: BLE001 - each kernel is compiled alone by load, which says why it fails
        log.debug("kernels compiled together failed; each is compiled alone", exc_info=True)
        os.unlink(shared)
        return
    try:
        for key, src in keys.items():
            path = os.path.join(d, f"k{key}.so")
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                os.link(shared, tmp)
            except OSError:
                shutil.copyfile(shared, tmp)
            os.replace(tmp, path)  # atomic, as _compile_to's
            with open(path[:-3] + ".cpp", "w") as f:  # for reading; never loaded
                f.write(src)
            _prebuilt.add(key)
            if tracehook.on:
                tracehook.emit("kernel_cache", False, key, (time.perf_counter() - t0) / len(keys))
    finally:
        os.unlink(shared)
    if tracehook.on:
        tracehook.emit("phase", "kernel_compile", time.perf_counter() - t0)


def load_library(source: str, link: list) -> ctypes.CDLL:
    """`source` compiled with the kernels' flags plus `link` (libraries it calls), or found on disk."""
    fl = flags() + list(link)
    key = key_of(source + "\0" + " ".join(link))
    with _lock:
        lib = _loaded.get(key)
        if lib is not None:
            return lib
    lib = _library(source, key, fl)
    with _lock:
        _loaded[key] = lib
    return lib


def _library(source: str, key: str, fl: list) -> ctypes.CDLL:
    path = os.path.join(cache_dir(), f"k{key}.so")
    if key in _prebuilt:  # compiled by this process's prebuild: neither a hit nor another compile
        _prebuilt.discard(key)
    elif os.path.exists(path):
        counters["disk_hits"] += 1
        if tracehook.on:
            tracehook.emit("kernel_cache", True, key)
    else:
        t0 = time.perf_counter()
        _compile_to(source, fl, path)
        with open(path[:-3] + ".cpp", "w") as f:  # for reading; never loaded
            f.write(source)
        if tracehook.on:  # the compile trace (DYNASHAPE_TRACE): a miss, and the compiler's time
            dt = time.perf_counter() - t0
            tracehook.emit("kernel_cache", False, key, dt)
            tracehook.emit("phase", "kernel_compile", dt)
    return ctypes.CDLL(path)


class Worker:
    """One background thread compiling queued jobs in order (a job is a callable).

    At interpreter exit (`close`) queued jobs are dropped, a running compiler is killed and the
    running job is waited for: a daemon thread still inside a torch call when the interpreter
    finalizes is ended by CPython on its way back into Python, through C++ frames that may not
    unwind, and the process aborts ("terminate called without an active exception", exit 134)."""

    def __init__(self):
        self._jobs: list = []
        self._cv = threading.Condition()
        self._thread = None
        self._busy = False
        self.closing = False
        _workers.add(self)

    def _after_fork_in_child(self) -> None:
        """The thread is not in a forked child, and its lock may have been held by it: start over.
        The parent's queued jobs are dropped (their code keeps its eager version here)."""
        self._jobs = []
        self._cv = threading.Condition()
        self._thread = None
        self._busy = False

    def submit(self, job) -> None:
        with self._cv:
            if self.closing:  # at exit: the job's code keeps its eager version
                return
            self._jobs.append(job)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dynashape-fused-compile", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                if self.closing:
                    self._thread = None
                    return
                if not self._jobs:
                    if not self._cv.wait(timeout=5.0) and not self._jobs:
                        self._thread = None
                        return
                    continue
                job = self._jobs.pop(0)
                self._busy = True
            try:
                job()
            except Exception:  # noqa: BLE001 - a job reports its own failure
                if not self.closing:
                    log.exception("fused backend: background compile failed")
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def close(self, timeout: float = 60.0) -> None:
        """Stop before the interpreter finalizes: drop queued jobs, kill the compiler, wait for the job."""
        with self._cv:
            self.closing = True
            self._jobs.clear()
            self._cv.notify_all()
        for p in list(_compilers):
            try:
                p.kill()
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        with self._cv:  # (in a forked child the parent's thread is not alive: its job never ends here)
            while self._busy and self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
                self._cv.wait(0.05)

    def wait_idle(self, timeout: float = 600.0) -> None:
        """Block until every queued job has run (tests, benchmarks)."""
        done = threading.Event()
        self.submit(done.set)
        done.wait(timeout)


_workers: weakref.WeakSet = weakref.WeakSet()
worker = Worker()
atexit.register(worker.close)


def _after_fork_in_child() -> None:
    """A child forked while the compile thread held a lock would wait on it forever at its first compile."""
    global _lock
    _lock = threading.Lock()
    _compilers.clear()  # the parent's compiler processes: not the child's to kill at exit
    for w in list(_workers):
        w._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
