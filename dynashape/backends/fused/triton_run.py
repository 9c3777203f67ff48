"""Loading and launching the Triton kernels of `tritongen`, with block sizes tuned per size bucket.

A kernel's module is written next to the C++ libraries (`build.cache_dir()/triton/t<hash>.py`,
named by a hash of its source and Triton's version) and imported from there, so tracebacks show
its lines. Block sizes are chosen per bucket (rows and row length rounded up to powers of two): a
heuristic first, then on a GPU, once the bucket has been used TUNE_AFTER times, by timing a few
candidates, on scratch outputs; the choice is kept in
`triton-tune.json` beside the kernels, so a second process tunes nothing (`counters['tunes']`
counts tuning runs in this process). Under Triton's interpreter nothing is timed: the first
candidate, the heuristic one, is used.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import tempfile
import threading

import torch

from ...runtime.config import config
from ...symbolic.printer import pyexpr
from . import build
from .triton_compile import Compiler, Mock, describe, ready_to_launch
from .tritongen import TritonSpec

log = logging.getLogger("dynashape.fused")
counters = {"tunes": 0, "tune_hits": 0, "modules": 0, "launches": 0,
            "not_ready": 0}  # calls that ran the region's torch calls while its kernel compiled
compiling = [0]  # kernels queued or compiling in the background now
_lock = threading.Lock()
_modules: dict = {}
_choices: dict | None = None  # bucket key -> [XBLOCK, RBLOCK, num_warps]


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the compile thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether triton imports (the `gpu` extra)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install is as good as none
        return False
    return True


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _dir() -> str:
    d = os.path.join(build.cache_dir(), "triton")
    os.makedirs(d, exist_ok=True)
    return d


def _module(source: str):
    import triton
    key = hashlib.sha256(f"{source}\0{triton.__version__}\0{interpreted()}".encode()).hexdigest()[:24]
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        path = os.path.join(_dir(), f"t{key}.py")
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(suffix=".py.tmp", dir=os.path.dirname(path))
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"dynashape_triton_t{key}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _modules[key] = mod
        counters["modules"] += 1
        return mod


# ---------------------------------------------------------------------------------- tuning
def _pow2(n: int, cap: int) -> int:
    """The least power of two >= n, at most `cap` (a power of two)."""
    return min(1 << (n - 1).bit_length(), cap) if n > 1 else 1


# Each op rounds its result, as eager's kernels do: no a * b + c contracted into one fused multiply-add
# (Triton's default), whose one rounding can move a comparison or an integer cast of the sum off
# eager's (the C++ kernels compile with -ffp-contract=off: g++ contracts C++ by default, -std=c++17 or not)
OPTIONS = {"enable_fp_fusion": False}

PROGRAMS = 256  # programs (rows / XBLOCK) the heuristic leaves at least, where there are rows enough


def candidates(flat: bool, n_outer: int, n_inner: int) -> list[tuple[int, int, int]]:
    """(XBLOCK, RBLOCK, num_warps) to try, the heuristic choice first."""
    if flat:
        return [(1024, 1, 4), (512, 1, 4), (2048, 1, 8), (256, 1, 2)]
    out = []
    for rcap in (1024, 2048, 4096, 256):
        r = _pow2(n_inner, rcap)
        x = max(1, min(_pow2(n_outer, 64), 4096 // r))
        while x > 1 and n_outer // x < PROGRAMS:  # few long rows: a row a program keeps every SM busy
            x //= 2
        for cfg in ((x, r, 4 if x * r <= 2048 else 8), (max(1, x // 4), r, 4)):
            if cfg not in out:
                out.append(cfg)
    if n_outer < PROGRAMS and n_inner > 4096:
        # few long rows (a cross-entropy's 64 x 32000): one program a row leaves most of each SM idle at
        # 4-8 warps, waiting on its loads; 16 or 32 warps keep more of the row in flight (as eager's
        # softmax kernels run 1024 threads a row)
        for cfg in ((1, _pow2(n_inner, 8192), 16), (1, _pow2(n_inner, 16384), 32)):
            if cfg not in out:
                out.append(cfg)
    return out


def _store_path() -> str:
    return os.path.join(build.cache_dir(), "triton-tune.json")


def _load_choices() -> dict:
    global _choices
    if _choices is None:
        try:
            with open(_store_path()) as f:
                _choices = json.load(f)
        except (OSError, ValueError):
            _choices = {}
    return _choices


def _save_choice(key: str, cfg) -> None:
    path = _store_path()
    try:
        with open(path) as f:
            on_disk = json.load(f)
    except (OSError, ValueError):
        on_disk = {}
    on_disk[key] = list(cfg)
    fd, tmp = tempfile.mkstemp(suffix=".json.tmp", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        json.dump(on_disk, f, indent=0, sort_keys=True)
    os.replace(tmp, path)  # readers see the old file or the new one


def _bucket(kernel_key: str, n_outer: int, n_inner: int, device: str) -> str:
    return f"{kernel_key}|{_pow2(n_outer, 1 << 20)}x{_pow2(n_inner, 1 << 16)}|{device}"


def known(kernel_key: str, n_outer: int, n_inner: int, device: str):
    """The block sizes timed for this bucket before, in this process or another (on disk), or None."""
    with _lock:
        got = _load_choices().get(_bucket(kernel_key, n_outer, n_inner, device))
    if got is not None:
        counters["tune_hits"] += 1
        return tuple(got)
    return None


def choose(kernel_key: str, spec: TritonSpec, n_outer: int, n_inner: int, device: str, bench=None):
    """The block sizes for this bucket: from memory, from disk, or timed now with `bench(cfg)` (ms)."""
    got = known(kernel_key, n_outer, n_inner, device)
    if got is not None:
        return got
    cands = candidates(spec.flat, n_outer, n_inner)
    if bench is None:
        return cands[0]
    counters["tunes"] += 1
    times = []
    for cfg in cands:
        try:
            times.append((bench(cfg), cfg))
        except Exception:  # noqa: BLE001 - a configuration that does not compile (too many registers) is skipped
            continue
    best = min(times)[1] if times else cands[0]
    bucket = _bucket(kernel_key, n_outer, n_inner, device)
    with _lock:
        _load_choices()[bucket] = list(best)
        _save_choice(bucket, best)
    return best


# ---------------------------------------------------------------------------------- launching
# Launches of a size bucket on the heuristic block sizes before the others are timed. Each candidate
# is a Triton compile (a second or so): on an H100, 60 calls of random sizes spent 1.6 s tuning
# buckets seen once or twice, 11x Inductor's whole run; a bucket used this often pays it back.
TUNE_AFTER = 8  # (never while a CUDA graph is being captured: timing synchronizes, which a capture forbids)


def _capturing(dev) -> bool:
    return dev.type == "cuda" and torch.cuda.is_current_stream_capturing()


def can_time(dev) -> bool:
    return dev.type == "cuda" and not interpreted()


def compiles_async(dev) -> bool:
    """Whether a kernel's first launches on `dev` run the region's torch calls while Triton compiles it in
    the background (a CUDA device, not config.fused_sync): a compile takes about a second, in which a
    run of 60 calls of varying sizes is over."""
    return dev.type == "cuda" and not interpreted() and not config.fused_sync


def _int_spec(v: int) -> int:
    """What Triton specializes a (stride) integer on: 1, a multiple of 16, the width it is passed in."""
    return 1 if v == 1 else (v % 16 == 0) * 2 + (not -2 ** 31 <= v < 2 ** 31) * 4


def _direct_ok() -> bool:
    """Whether a compiled kernel may be launched through its own launcher, bypassing JITFunction.run
    (28 -> 10 us a launch on an H100): only on the Triton versions whose specialization our launch key
    was checked against (pointer alignment; ints: 1, multiples of 16, 32 or 64 bits), else Triton's path."""
    import triton
    return triton.__version__.startswith(("3.6.",)) and not interpreted()


_compiler = Compiler()


class TritonKernel:
    """The launcher a region's device wrapper calls: kernel(ins..., outs..., symbols..., strides...).
    Returns whether it launched; False: the caller runs the region's torch calls (its compile for this
    specialization is under way in the background, `compiles_async`)."""

    def __init__(self, spec: TritonSpec):
        self.spec = spec
        self.key = hashlib.sha256(spec.source.encode()).hexdigest()[:24]
        mod = _module(spec.source)
        self.kernel, self.path = mod.kernel, mod.__file__
        names = [s.name for s in spec.symbols]
        self._sizes = eval(f"lambda {', '.join(names) or '*_'}: ({pyexpr(spec.n_outer)}, {pyexpr(spec.n_inner)})")  # noqa: S307
        self._tuned: dict = {}
        self._untimed: dict = {}  # bucket -> launches so far on the heuristic block sizes
        # launch key (`_key`) -> the CompiledKernel (launched directly), True (compiled: Triton's path),
        # or False (compiling in the background)
        self._compiled: dict = {}
        self._direct = _direct_ok()
        if self._direct:
            # Triton's driver.get_current_stream (torch.cuda.current_stream() costs 6 us), looked up at the
            # first direct launch: the driver's first use in a process builds a C module with the C
            # compiler where Triton's cache has none (the cold runs of bench/gpu.py), which the background
            # compile's warm-up pays, not the call that made the kernel
            self._stream = None
            self._current = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)

    def __call__(self, *args):
        spec = self.spec
        n_t = spec.n_in + spec.n_out
        n_outer, n_inner = self._sizes(*args[n_t:n_t + len(spec.symbols)])
        n_outer, n_inner = int(n_outer), int(n_inner)
        dev = args[0].device
        bucket = (_pow2(n_outer, 1 << 20), _pow2(n_inner, 1 << 16), dev)
        cfg = self._tuned.get(bucket)
        if cfg is None:
            cfg = self._tuned[bucket] = known(self.key, n_outer, n_inner, _device_name(dev))
            if cfg is None:  # the heuristic choice until the bucket has been used TUNE_AFTER times
                cfg = self._tuned[bucket] = candidates(spec.flat, n_outer, n_inner)[0]
                if can_time(dev):
                    self._untimed[bucket] = 0
        elif bucket in self._untimed:
            if self._untimed[bucket] + 1 >= TUNE_AFTER and not _capturing(dev) and compiles_async(dev):
                # the candidates compile in the background first; timing them then takes milliseconds
                if not all([self._ready(args, c, dev, self._key(args, c, dev)) for c in candidates(spec.flat, n_outer, n_inner)]):
                    return self._launch_if_ready(args, cfg, n_outer, n_inner, dev)
            self._untimed[bucket] += 1
            if self._untimed[bucket] >= TUNE_AFTER and not _capturing(dev):
                del self._untimed[bucket]
                bench = functools.partial(self._time, args, n_outer, n_inner)
                cfg = self._tuned[bucket] = choose(self.key, spec, n_outer, n_inner, _device_name(dev), bench)
        return self._launch_if_ready(args, cfg, n_outer, n_inner, dev)

    def _key(self, args, cfg, dev) -> tuple:
        """What Triton specializes a launch on: block sizes, contiguity, each pointer's 16-byte alignment,
        each stride's `_int_spec` and each size's width (sizes are not specialized otherwise); and the
        device, whose context a compiled kernel is loaded in."""
        spec = self.spec
        n_t = spec.n_in + spec.n_out
        n_s = n_t + len(spec.symbols)
        return (cfg, all([t.is_contiguous() for t in args[:spec.n_in]]), *[t.data_ptr() % 16 == 0 for t in args[:n_t]],
                *[-2 ** 31 <= v < 2 ** 31 for v in args[n_t:n_s]], *[_int_spec(v) for v in args[n_s:]], dev.index)

    def _launch_if_ready(self, args, cfg, n_outer: int, n_inner: int, dev) -> bool:
        key = self._key(args, cfg, dev)
        got = self._compiled.get(key)
        if got is None or got is False:
            if compiles_async(dev) and not self._ready(args, cfg, dev, key):
                counters["not_ready"] += 1
                return False
            got = True
        counters["launches"] += 1
        rows = n_outer * n_inner if self.spec.flat else n_outer
        x, r, warps = cfg
        grid = (rows + x - 1) // x
        # the compiled kernel belongs to one device's context; Triton's path loads it for the current one
        if got is True or self._current() != dev.index:
            done = self.kernel[(grid,)](*args, XBLOCK=x, RBLOCK=r, CONTIG=key[1], num_warps=warps, **OPTIONS)
            if got is True and self._direct and hasattr(done, "packed_metadata") and self._current() == dev.index:
                self._compiled[key] = done  # Triton's path gives the kernel to launch directly from now on
        else:
            if self._stream is None:
                from triton.runtime import driver
                self._stream = driver.active.get_current_stream
            got.run(grid, 1, 1, self._stream(dev.index), got.function, got.packed_metadata, None, None, None,
                    *args, x, r, key[1])
        return True

    def _ready(self, args, cfg, dev, key) -> bool:
        """Whether the kernel is compiled for launch `key`; if not, its compile is queued on the
        background worker (never while a CUDA graph is being captured)."""
        state = self._compiled.get(key)
        if state is not None:
            return state is not False
        if _capturing(dev):
            return False
        self._compiled[key] = False
        with _lock:
            compiling[0] += 1
        n_t = self.spec.n_in + self.spec.n_out
        mocks = [Mock(t.dtype, p) for t, p in zip(args[:n_t], key[2:2 + n_t])] + list(args[n_t:])
        build.worker.submit(functools.partial(self._compile, key, mocks, cfg, dev))
        return False

    def _compile(self, key, mocks, cfg, dev) -> None:
        x, r, warps = cfg
        kw = dict(XBLOCK=x, RBLOCK=r, CONTIG=key[1], num_warps=warps, **OPTIONS)
        if dev.type == "cuda":  # in a child process first: the compile holds the GIL (triton_compile)
            why = _compiler.compile(self.path, describe(mocks), kw, dev.index)
            if why is not None:
                log.debug("Triton compile in the child process failed (%s): compiling here", why)
        try:
            with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
                done = self.kernel.warmup(*mocks, grid=(1,), **kw)  # (from Triton's disk cache, where the child wrote it)
                if dev.type == "cuda":
                    ready_to_launch(done)
        except Exception as e:  # noqa: BLE001 - the launch compiles it again, and raises what Triton raises
            log.debug("background Triton compile failed (%s): the launch compiles it", e)
        self._compiled[key] = True
        with _lock:
            compiling[0] -= 1

    def _launch(self, args, cfg, n_outer: int, n_inner: int) -> None:
        x, r, warps = cfg
        rows = n_outer * n_inner if self.spec.flat else n_outer
        grid = ((rows + x - 1) // x,)
        contig = all(t.is_contiguous() for t in args[:self.spec.n_in])
        self.kernel[grid](*args, XBLOCK=x, RBLOCK=r, CONTIG=contig, num_warps=warps, **OPTIONS)

    def _time(self, args, n_outer: int, n_inner: int, cfg) -> float:
        import triton.testing
        spec = self.spec
        outs = list(args[spec.n_in:spec.n_in + spec.n_out])
        scratch = [torch.zeros_like(o) for o in outs]  # column sums add into theirs: never the real outputs
        trial = list(args[:spec.n_in]) + scratch + list(args[spec.n_in + spec.n_out:])
        return triton.testing.do_bench(lambda: self._launch(trial, cfg, n_outer, n_inner), warmup=5, rep=20)


@functools.lru_cache(maxsize=None)
def _device_name(dev) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev).replace("|", " ")
    return "cpu-interpreter"
