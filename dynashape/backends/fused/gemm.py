"""Float32 matrix products by oneDNN's brgemm microkernel, reached through ATen's
`at::native::cpublas::brgemm` (the kernel torch's own CPU flash attention calls), where that is
faster than `torch.mm` on this machine.

torch.mm on CPU calls MKL's sgemm, which on AMD processors runs its AVX2 code; oneDNN's JIT
kernels use AVX-512 wherever the CPU has it. A small C++ driver (below, built once like a kernel)
tiles C = A @ B into brgemm calls: A and B as any strided 2-D views (a transposed operand is
packed into row-major blocks first: brgemm reads row-major A and B only), an optional bias added
to each row, optional row sums of A or column sums of B (a bias's gradient, in double), OpenMP
over tiles.

    mm(a, b, bias=None, asum=None, bsum=None) -> Tensor | None    # None: use torch's call

Whether it is used (`active()`): `config.fused_gemm` "auto" (default) times both once per
process on a 256^3 product and uses brgemm where it takes at most 0.8 of torch.mm's time
(on AVX-512 AMD EPYC: about 0.5; on a CPU where MKL has its AVX-512 path they are close, and
torch.mm stays), for products of at least MIN_WORK multiply-adds; "on" uses it wherever it
builds, for every product (the fuzzer checks them so), "off" never. Where ATen has no such
symbol, or the library does not build, torch's calls run. ATen's brgemm itself falls back to
its own gemm where oneDNN's kernel is unavailable (no AVX2, `torch.backends.mkldnn` off).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time

import torch

from ...runtime.config import config
from . import build

log = logging.getLogger("dynashape.fused")

_BRGEMM = "_ZN2at6native7cpublas6brgemmEllllllbPKfS3_Pfb"  # at::native::cpublas::brgemm(..., const float*, ...)

SOURCE = r"""
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>
#include <omp.h>
#include <immintrin.h>
namespace at { namespace native { namespace cpublas {
void brgemm(int64_t M, int64_t N, int64_t K, int64_t ld_a, int64_t ld_b, int64_t ld_c, bool add_C,
            const float* A, const float* B, float* C, bool is_vnni);
}}}

// dst[r * ld + c] = src[r * sr + c * sc] over a rows x cols block
static void pack(const float* src, int64_t sr, int64_t sc, int64_t rows, int64_t cols, float* dst, int64_t ld) {
    if (sc == 1) {
        for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld, src + r * sr, cols * sizeof(float));
        return;
    }
    int64_t r8 = 0, c8 = 0;
#if defined(__AVX__)
    if (sr == 1) {  // a transposed row-major matrix: 8x8 transposes in registers
        r8 = rows / 8 * 8; c8 = cols / 8 * 8;
        for (int64_t r = 0; r < r8; r += 8)
            for (int64_t c = 0; c < c8; c += 8) {
                const float* s = src + r + c * sc;
                __m256 a0 = _mm256_loadu_ps(s), a1 = _mm256_loadu_ps(s + sc), a2 = _mm256_loadu_ps(s + 2 * sc),
                       a3 = _mm256_loadu_ps(s + 3 * sc), a4 = _mm256_loadu_ps(s + 4 * sc),
                       a5 = _mm256_loadu_ps(s + 5 * sc), a6 = _mm256_loadu_ps(s + 6 * sc),
                       a7 = _mm256_loadu_ps(s + 7 * sc);
                __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1),
                       t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3),
                       t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5),
                       t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
                __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
                       u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
                       u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
                       u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
                float* d = dst + r * ld + c;
                _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
            }
    }
#endif
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = (r < r8 ? c8 : 0); c < cols; ++c)
            dst[r * ld + c] = src[r * sr + c * sc];
}

static std::vector<float>& buffer(int which) {  // per calling thread, grown as needed (bounded below)
    static thread_local std::vector<float> bufs[2];
    return bufs[which];
}

// C (M x N, row stride ldc) = A @ B [+ bias], A(m, k) = A[m * sam + k * sak], B(k, n) = B[k * sbk + n * sbn];
// asum[m] = sum_k A(m, k), bsum[n] = sum_k B(k, n) (in double) where given. 0: done; else C is not written
// whole and the caller runs torch's call (1: brgemm raised, 2: an operand too large to pack in blocks)
extern "C" int ds_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t sam, int64_t sak,
                       const float* B, int64_t sbk, int64_t sbn, float* C, int64_t ldc,
                       const float* bias, int64_t sbias, float* asum, float* bsum, int nthreads) {
    const int64_t NB = 256, BUDGET = int64_t(1) << 24;  // packed floats at most, per operand
    bool pa = !(sak == 1 && sam >= K), pb = !(sbn == 1 && sbk >= N);
    int64_t span = std::max(pa ? M : 0, pb ? N : 0);
    // brgemm sums its K in registers from zero and adds that to C: blocks of 64 make the sums two-level,
    // more accurate than one run of K (and than MKL's sgemm: rms error 0.6-0.8 of its, K = 128..4096)
    int64_t KB = std::min<int64_t>(64, K);
    if (span * KB > BUDGET) return 2;
    int nt = std::max(1, nthreads);
    int64_t MC = 256;
    int64_t nblk = (N + NB - 1) / NB;
    while (MC > 32 && ((M + MC - 1) / MC) * nblk < nt) MC /= 2;
    int64_t mblk = (M + MC - 1) / MC;
    std::vector<float>& abuf = buffer(0);
    std::vector<float>& bbuf = buffer(1);
    std::vector<double> as, bs;
    try {
        if (pa) abuf.resize(M * KB);
        if (pb) bbuf.resize(KB * N);
        as.assign(asum ? M : 0, 0.0);
        bs.assign(bsum ? N : 0, 0.0);
    } catch (...) { return 2; }
    int err = 0;
    #pragma omp parallel num_threads(nt) if (nt > 1)
    {
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
            int64_t kb = std::min(KB, K - k0);
            if (pa) {
                #pragma omp for schedule(static)
                for (int64_t i = 0; i < mblk; ++i) {
                    int64_t m0 = i * MC, mc = std::min(MC, M - m0);
                    pack(A + m0 * sam + k0 * sak, sam, sak, mc, kb, abuf.data() + m0 * kb, kb);
                }
            }
            if (pb) {
                #pragma omp for schedule(static)
                for (int64_t j = 0; j < nblk; ++j) {
                    int64_t n0 = j * NB, nb = std::min(NB, N - n0);
                    pack(B + k0 * sbk + n0 * sbn, sbk, sbn, kb, nb, bbuf.data() + n0, N);
                }
            }
            const float* Ab = pa ? abuf.data() : A + k0;
            int64_t lda = pa ? kb : sam;
            const float* Bb = pb ? bbuf.data() : B + k0 * sbk;
            int64_t ldb = pb ? N : sbk;
            if (asum) {
                #pragma omp for schedule(static)
                for (int64_t m = 0; m < M; ++m) {
                    const float* a = Ab + m * lda;
                    double s = 0.0;
                    #pragma omp simd reduction(+:s)
                    for (int64_t k = 0; k < kb; ++k) s += a[k];
                    as[m] += s;
                }
            }
            if (bsum) {
                #pragma omp for schedule(static)
                for (int64_t j = 0; j < nblk; ++j) {
                    int64_t n0 = j * NB, nb = std::min(NB, N - n0);
                    double* s = bs.data() + n0;
                    for (int64_t k = 0; k < kb; ++k) {
                        const float* b = Bb + k * ldb + n0;
                        #pragma omp simd
                        for (int64_t n = 0; n < nb; ++n) s[n] += b[n];
                    }
                }
            }
            bool last = k0 + kb >= K;
            #pragma omp for collapse(2) schedule(static)
            for (int64_t j = 0; j < nblk; ++j)
                for (int64_t i = 0; i < mblk; ++i) {
                    int64_t n0 = j * NB, nb = std::min(NB, N - n0), m0 = i * MC, mc = std::min(MC, M - m0);
                    try {
                        at::native::cpublas::brgemm(mc, nb, kb, lda, ldb, ldc, k0 > 0, Ab + m0 * lda, Bb + n0,
                                                    C + m0 * ldc + n0, false);
                    } catch (...) {
                        #pragma omp atomic write
                        err = 1;
                    }
                    if (last && bias)
                        for (int64_t m = m0; m < m0 + mc; ++m) {
                            float* c = C + m * ldc + n0;
                            const float* b = bias + n0 * sbias;
                            #pragma omp simd
                            for (int64_t n = 0; n < nb; ++n) c[n] += b[n * sbias];
                        }
                }
        }
    }
    for (int64_t m = 0; asum && m < M; ++m) asum[m] = (float)as[m];
    for (int64_t n = 0; bsum && n < N; ++n) bsum[n] = (float)bs[n];
    for (auto* buf : {&abuf, &bbuf})  // a large product's blocks are not kept for the thread's lifetime
        if (buf->capacity() > (size_t(1) << 20)) std::vector<float>().swap(*buf);
    return err;
}
"""

MIN_WORK = 1 << 18  # M * N * K below which torch.mm's lower call overhead wins ("auto")
min_work = [MIN_WORK]  # what the fast path takes: 1 under "on" (every product, as the fuzzer checks them)
_lock = threading.Lock()
_state: dict = {}  # "fn": the loaded ds_gemm or None; "auto": the calibration's verdict; "ratio": its time ratio


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # the library may have been building on the compile thread at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _torch_lib() -> str:
    return os.path.join(os.path.dirname(torch.__file__), "lib")


def _load():
    """ds_gemm from the built library, or None where ATen has no float brgemm or it does not build."""
    if "fn" in _state:
        return _state["fn"]
    with _lock:
        if "fn" in _state:
            return _state["fn"]
        fn = None
        try:
            lib_dir = _torch_lib()
            cpu = ctypes.CDLL(os.path.join(lib_dir, "libtorch_cpu.so"))
            if hasattr(cpu, _BRGEMM) and build.compiler() is not None:
                # the torch build is part of the key: its libtorch_cpu is what the library links
                src = f"// torch {torch.__version__} {lib_dir}\n" + SOURCE
                lib = build.load_library(src, [f"-L{lib_dir}", "-ltorch_cpu", f"-Wl,-rpath,{lib_dir}"])
                fn = lib.ds_gemm
                L, P = ctypes.c_int64, ctypes.c_void_p
                fn.argtypes = [L, L, L, P, L, L, P, L, L, P, L, P, L, P, P, ctypes.c_int]
                fn.restype = ctypes.c_int
        except Exception as e:  # noqa: BLE001 - matrix products stay torch's calls
            log.info("dynashape.fused: brgemm matmuls unavailable (%s: %s)", type(e).__name__, e)
            fn = None
        _state["fn"] = fn
        return fn


def active() -> bool:
    """Whether matrix products run through brgemm (config.fused_gemm, see the module doc)."""
    mode = config.fused_gemm
    if mode == "off" or _load() is None:
        return False
    min_work[0] = 1 if mode == "on" else MIN_WORK
    if mode == "on":
        return True
    if "auto" not in _state:
        with _lock:
            if "auto" not in _state:
                _state["ratio"] = _calibrate()
                _state["auto"] = _state["ratio"] <= 0.8
                log.info("dynashape.fused: brgemm takes %.2f of torch.mm's time on 256^3: matmuls by %s",
                         _state["ratio"], "brgemm" if _state["auto"] else "torch")
    return _state["auto"]


def decided() -> bool | None:
    """Whether matrix products run through brgemm, when that is known without loading the library or
    calibrating (None: `active()` would have to find out)."""
    mode = config.fused_gemm
    if mode == "off" or _state.get("fn", True) is None:
        return False
    if "fn" not in _state:
        return None
    if mode == "on":
        return True
    return _state.get("auto")


def ratio() -> float | None:
    """The calibration's time ratio brgemm / torch.mm (None before it ran)."""
    return _state.get("ratio")


def _calibrate() -> float:
    """Ours over torch.mm's time, at the current thread count: the largest of three rounds' ratios,
    each the best of 5 interleaved runs of both, so brgemm is chosen only where every round finds it
    faster.

    It runs on the fused backend's worker thread while the main thread traces and runs: a product
    that waited for the GIL or shared its core measured that too. One best-of-7 round decided
    "brgemm" in about one process of six on a CPU where the two take the same time (ratios 0.79 to
    1.65 there), and each compile of a graph with a product then woke the worker, whose job held the
    GIL during the graph's first run (+0.55 ms on an 8-layer MLP). With one thread both products run
    on this thread alone and its CPU time is what they cost (a wait for the GIL is not counted);
    with more, wall time."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    worst = 0.0
    for _ in range(3):
        best = {"ours": float("inf"), "torch": float("inf")}
        for _ in range(5):
            for k in best:
                t0 = clock()
                out = mm(a, b) if k == "ours" else torch.mm(a, b)
                best[k] = min(best[k], clock() - t0)
                if out is None:
                    return float("inf")
        worst = max(worst, best["ours"] / best["torch"])
    return worst


def mm(a: torch.Tensor, b: torch.Tensor, bias=None, asum=None, bsum=None, out=None):
    """a @ b (+ bias) for 2-D float32 CPU tensors (any strides), into `out` or a new contiguous tensor;
    `asum`/`bsum` (float32, contiguous, M / N elements) get a's row sums / b's column sums. None
    when the library is not there or declined (the caller runs torch's call)."""
    fn = _load()
    if fn is None:
        return None
    M, K = a.shape
    N = b.shape[1]
    if not (a.data_ptr() and b.data_ptr() and (bias is None or bias.data_ptr())):
        return None  # no memory to read (an efficient zero tensor autograd made, or an empty operand)
    if out is None:
        out = torch.empty((M, N), dtype=torch.float32)
    rc = fn(M, N, K, a.data_ptr(), a.stride(0), a.stride(1), b.data_ptr(), b.stride(0), b.stride(1),
            out.data_ptr(), out.stride(0), bias.data_ptr() if bias is not None else None,
            bias.stride(0) if bias is not None else 0, asum.data_ptr() if asum is not None else None,
            bsum.data_ptr() if bsum is not None else None, torch.get_num_threads())
    return out if rc == 0 else None
