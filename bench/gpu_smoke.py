"""The GPU path on a real GPU, case by case, before any timing: every case compiles with the fused
backend on CUDA tensors (Triton kernels), runs over several sizes against eager, and reports OK or
the failure with its traceback, then goes on. Also the CUDA graphs per bucket (ds.config.cudagraphs
"buckets" and "exact") and a training step's gradients.

    python bench/gpu_smoke.py [WORDS]   # only the cases whose name holds one of WORDS; exit 1 if any case failed; prints a skip line without a GPU
"""
from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dynashape as ds  # noqa: E402
from bench.fused import Block, GeluMLP, LlamaMLP, attention, chain, ln_relu, xent  # noqa: E402

DEV = os.environ.get("SMOKE_DEVICE", "cuda")  # "cpu": the script itself checked in Triton's interpreter
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=2e-2, atol=2e-2),
       torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}
CASES: list = []


def case(name):
    def wrap(fn):
        CASES.append((name, fn))
        return fn
    return wrap


def launches() -> int:
    from dynashape.backends.fused import triton_run
    return triton_run.counters["launches"]


def against_eager(fn, cases, dtype=torch.float32, train=False, **kw):
    from dynashape.backends.fused import counters
    cf = ds.compile(fn, dynamic=True, backend="fused", **kw)
    before, rejected = launches(), counters["rejected"]
    for args in cases:
        args = tuple(a.to(DEV, dtype) if a.is_floating_point() else a.to(DEV) for a in args)
        if train:
            a1 = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
            a2 = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
            want, got = fn(*a1), cf(*a2)
            want.float().square().sum().backward()
            got.float().square().sum().backward()
            for x, y in zip(a1, a2):
                if x.grad is not None:
                    torch.testing.assert_close(y.grad, x.grad, **TOL[dtype])
        else:
            with torch.no_grad():
                want, got = fn(*args), cf(*args)
        torch.testing.assert_close(got, want, **TOL[dtype])
    if DEV == "cuda":
        torch.cuda.synchronize()
    if launches() == before:
        print("      (no Triton kernel was launched: every region ran otherwise)")
    if counters["rejected"] != rejected:  # (the H100's cross-entropy ran 5x eager's time: was it this?)
        print(f"      ({counters['rejected'] - rejected} kernel results rejected (a target out of range): torch's calls ran after the kernel)")
    return cf


def r(*shape):
    return torch.randn(*shape)


@case("pointwise with broadcasting, rows 1/7/130/1025, fp32")
def _():
    against_eager(lambda x, w, b: torch.sigmoid(F.silu(x * w + b) - 0.5).clamp_min(0.1) * x.abs().sqrt(),
                  [(r(n, 33), r(33), r(1, 33)) for n in (7, 1, 130, 1025)])


@case("pointwise chain + mean/std over rows of 5/64/4096/5000, fp32")
def _():
    against_eager(chain, [(r(8, n), r(n), r(n)) for n in (64, 5, 4096, 5000)])


for dt in (torch.float16, torch.bfloat16):
    @case(f"layer_norm(x).relu() + x, {dt}")
    def _(dt=dt):
        against_eager(ln_relu, [(r(n, d),) for n, d in ((256, 1024), (3, 1024), (17, 100))], dtype=dt)


@case("softmax attention, several lengths")
def _():
    against_eager(attention, [tuple(r(8, t, 64) for _ in range(3)) for t in (128, 7, 300)])


@case("transformer block (eval), batch/seq varying")
def _():
    m = Block().to(DEV).eval()
    against_eager(m, [(r(b, t, 128),) for b, t in ((4, 64), (1, 9), (3, 100))])


@case("RMSNorm + SiLU-gated MLP, bf16")
def _():
    m = LlamaMLP().to(DEV, torch.bfloat16).eval()
    against_eager(m, [(r(b, t, 256),) for b, t in ((8, 64), (1, 1), (2, 33))], dtype=torch.bfloat16)


@case("GELU MLP")
def _():
    m = GeluMLP().to(DEV).eval()
    against_eager(m, [(r(n, 256),) for n in (512, 3, 1000)])


@case("cross-entropy, 32000 classes")
def _():
    against_eager(xent, [(r(n, 32000), torch.randint(0, 32000, (n,))) for n in (64, 5)])


@case("training: gradients of a norm + pointwise chain")
def _():
    against_eager(lambda x, w: F.layer_norm(x * w, x.shape[-1:]).tanh() * x, [(r(n, 48), r(48)) for n in (16, 3, 200)],
                  train=True)


@case("training: transformer block gradients")
def _():
    m = Block().to(DEV)
    cf = ds.compile(m, dynamic=True, backend="fused")
    for b, t in ((4, 64), (2, 17)):
        x = r(b, t, 128).to(DEV)
        m.zero_grad()
        m(x).square().mean().backward()
        want = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        cf(x).square().mean().backward()
        for p, w in zip(m.parameters(), want):
            torch.testing.assert_close(p.grad, w, rtol=1e-3, atol=1e-4)


for mode in ("buckets", "exact"):
    @case(f"CUDA graphs '{mode}': transformer block over batch sizes 1..9")
    def _(mode=mode):
        m = Block().to(DEV).eval()
        cf = ds.compile(m, dynamic=True, backend="fused")
        with ds.config.patch(cudagraphs=mode), torch.no_grad():
            for b in (3, 3, 4, 4, 1, 1, 5, 7, 8, 9, 9, 3):
                x = r(b, 16, 128).to(DEV)
                torch.testing.assert_close(cf(x), m(x), rtol=1e-4, atol=1e-4)
        for e in cf.entries:
            rep = getattr(getattr(e.fn, "graph_fn", e.fn), "cuda_graphs_report", None)
            if rep:
                print("      " + "\n      ".join(rep()))

    @case(f"CUDA graphs '{mode}': in-place update of a buffer")
    def _(mode=mode):
        buf = torch.zeros(64, device=DEV)

        def f(x):
            buf.add_(x.sum(0))
            return x * 2 + buf
        want_buf = torch.zeros(64, device=DEV)
        cf = ds.compile(f, dynamic=True, backend="fused")
        with ds.config.patch(cudagraphs=mode), torch.no_grad():
            for b in (2, 2, 2, 3, 3, 5):
                x = r(b, 64).to(DEV)
                got = cf(x)
                want_buf += x.sum(0)
                torch.testing.assert_close(got, x * 2 + want_buf)
        torch.testing.assert_close(buf, want_buf)


@case("a tiny Llama forward (transformers), fp32, two lengths")
def _():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=2048, max_position_embeddings=512)
    m = LlamaForCausalLM(cfg).to(DEV).eval()
    cf = ds.compile(m, dynamic=True, backend="fused")
    with torch.no_grad():
        for t in (16, 5, 40):
            ids = torch.randint(0, 2048, (2, t), device=DEV)
            torch.testing.assert_close(cf(ids).logits, m(ids).logits, rtol=1e-3, atol=1e-3)


HALF_OPS = {  # where each Python number and each op's result is rounded decides the bits (tests/backends/fused/test_half.py
    # pins the CPU's; CUDA's kernels may read a number in float32 where the CPU's narrow it, or the reverse)
    "x > 0.1": lambda x: x > 0.1, "x + 0.1": lambda x: x + 0.1, "x - 0.3": lambda x: x - 0.3, "x * 0.1": lambda x: x * 0.1,
    "x / 0.3": lambda x: x / 0.3, "3 / x": lambda x: 3 / (x.abs() + 0.5), "x ** 3": lambda x: x.pow(3),
    "y * x + y * (1 - x)": lambda x: x.flip(0) * x + x.flip(0) * (1 - x), "add alpha": lambda x: torch.sub(x, x.flip(0), alpha=0.3),
    "gelu": F.gelu, "sigmoid": torch.sigmoid, "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: x.log_softmax(-1),
    "rms_norm": lambda x: F.rms_norm(x, x.shape[-1:]), "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
}


@case("half types: elements that differ from CUDA eager's bits, per op (informational; comparisons must agree)")
def _():
    bad = []
    for dt in (torch.float16, torch.bfloat16):
        counts = {}
        for name, f in HALF_OPS.items():
            ns = {"f": f}  # a function of its own per op (one code object would share the compiled entries)
            exec(compile("def g(x):\n    return f(x) * 2\n", f"<half {name} {dt}>", "exec"), ns)
            cf = ds.compile(ns["g"], dynamic=True, backend="fused")
            x = (torch.randn(64, 257, generator=torch.Generator().manual_seed(0)) * 2).to(DEV, dt)
            want, got = f(x) * 2, cf(x)
            counts[name] = int((want != got).sum())
            if want.dtype == torch.bool and counts[name]:
                bad.append(f"{name} ({dt})")
        print(f"      {dt}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + f" (of {64 * 257})")
    assert not bad, f"comparisons with a Python number differ from eager's: {bad}"


def main() -> int:
    ds.config.fused_sync = True  # kernels built before a call returns: every call is judged on them
    bad = []
    for name, fn in CASES:
        if len(sys.argv) > 1 and not any(k in name for k in sys.argv[1:]):
            continue
        try:
            fn()
            print(f"OK    {name}", flush=True)
        except Exception:  # noqa: BLE001 - each case reports and the next one runs
            bad.append(name)
            print(f"FAIL  {name}\n{traceback.format_exc()}", flush=True)
    print(f"\n{len(CASES) - len(bad)}/{len(CASES)} cases OK" + (f"; failed: {bad}" if bad else ""))
    from dynashape.backends.fused import triton_run
    print(f"triton counters: {triton_run.counters}")
    return 1 if bad else 0


if __name__ == "__main__":
    if DEV == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        ds.config.triton = "cpu"
    elif not torch.cuda.is_available():
        print("bench/gpu_smoke.py: skipped: no CUDA device here")
        sys.exit(0)
    sys.exit(main())
