"""The GPU: ours (fused regions as Triton kernels, CUDA graphs per size bucket) against eager and
torch.compile(dynamic=True) with Inductor, default and mode="reduce-overhead".

Runs only where `torch.cuda.is_available()`; elsewhere it prints why it skipped and exits 0.

Steady state: the issue-12 workloads of bench/fused.py on the GPU (float32), plus a decode loop
of a tiny and a 1B-class Llama (bfloat16, random weights from a config) with a KV cache growing
one token a step, and with transformers' StaticCache (fixed shapes: one CUDA graph for all steps); after warm-up, calls interleaved one by one in a rotating order, each timed
with a synchronize, the median per call. Varying shapes: 60 calls with batch and sequence drawn
at random, total wall time from a cold start, every compile (and Triton autotuning) included: each
contestant runs them in a process of its own with empty caches (Triton's, Inductor's, dynashape's
kernels and tuned block sizes), timed from its first call after CUDA is initialized.

Contestants: eager; torch.compile(dynamic=True) (Inductor); the same with mode="reduce-overhead"
(CUDA graphs); ours backend="fused" (Triton); ours with ds.config.cudagraphs="buckets".

    python bench/gpu.py [--budget 2] [--no-llama] [--no-sequences]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dynashape as ds  # noqa: E402
from bench.fused import workloads  # noqa: E402

SEED = 0


def _to(x, dev, dtype=None):
    if isinstance(x, torch.Tensor):
        return x.to(dev, dtype) if (dtype is not None and x.is_floating_point()) else x.to(dev)
    return x


def contestants(fn, inductor: bool) -> dict:
    out = {"eager": fn}
    if inductor:
        torch._dynamo.reset()
        out["inductor"] = torch.compile(fn, dynamic=True)
        out["inductor reduce-overhead"] = torch.compile(fn, dynamic=True, mode="reduce-overhead")
    out["ours"] = ds.compile(fn, dynamic=True, backend="fused")
    graphs = ds.compile(fn, dynamic=True, backend="fused")
    out["ours + buckets"] = lambda *a: _with_graphs(graphs, a)
    out["ours + buckets"].compiled = graphs
    return out


def _with_graphs(cf, args):
    with ds.config.patch(cudagraphs="buckets"):
        return cf(*args)


def cold() -> None:
    """Fresh compiles for the next steady-state contestant: ours (entries, kernels, tuned block sizes,
    modules in memory), Dynamo's, Inductor's FX graph cache off (Triton's own cache stays: Inductor
    cannot switch it within a process)."""
    import tempfile
    from dynashape.backends.fused import triton_run
    ds.config.fused_cache_dir = tempfile.mkdtemp(prefix="ds-kernels-")
    triton_run._modules.clear()
    triton_run._choices = None
    import torch._dynamo
    import torch._inductor.config
    torch._inductor.config.fx_graph_cache = False
    torch._dynamo.reset()
    ds.reset()  # ds.compile(f) twice shares entries, as torch.compile does


def timed(fn, args) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def settle(fn, args) -> None:
    """Warm-up: compiles, graph captures (a bucket is captured at its second call), and ours' Triton
    compiles, which run in the background (the calls meanwhile run torch's), then the block sizes'
    tuning (the candidates compile in the background once a bucket has seen TUNE_AFTER launches)."""
    from dynashape.backends.fused import build, triton_run
    for _ in range(3):
        for _ in range(triton_run.TUNE_AFTER + 2):
            fn(*args)
        build.worker.wait_idle()
    torch.cuda.synchronize()


def steady(fns: dict, args, budget: float) -> dict:
    for name, fn in list(fns.items()):
        try:
            settle(fn, args)
        except Exception as e:  # noqa: BLE001 - a contestant that fails is reported, the others go on
            print(f"    {name}: failed ({type(e).__name__}: {str(e)[:200]})")
            del fns[name]
    times = {k: [] for k in fns}
    order = list(fns)
    end = time.perf_counter() + budget
    while time.perf_counter() < end:
        for k in order:
            times[k].append(timed(fns[k], args))
        order = order[1:] + order[:1]
    return {k: statistics.median(v) for k, v in times.items() if v}


def report(title: str, med: dict) -> None:
    base = med.get("eager")
    ind = med.get("inductor")
    print(f"  {title}")
    for k, v in med.items():
        extra = f"  {v / base:.2f}x eager" if base else ""
        if ind and k.startswith("ours"):
            extra += f", {v / ind:.2f}x inductor"
            ro = med.get("inductor reduce-overhead")
            if ro:
                extra += f", {v / ro:.2f}x reduce-overhead"
        print(f"    {k:26s} {v * 1e6:9.1f} us{extra}")


def kernels(fn, args, calls: int = 5) -> str:
    """What one call runs on the GPU, from torch.profiler over `calls` calls: kernels and their GPU
    time per call, the longest three by name, and the values read back to the host (each a sync)."""
    from torch.profiler import ProfilerActivity, profile
    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    gpu = [e for e in prof.key_averages() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time_total for e in gpu) / calls
    n = sum(e.count for e in gpu) / calls
    top = sorted(gpu, key=lambda e: -e.device_time_total)[:3]
    copies = sum(e.count for e in prof.key_averages() if e.key == "aten::_local_scalar_dense") / calls
    return (f"{n:.0f} kernels {total:.1f} us GPU a call, device-to-host reads {copies:.0f}; longest: "
            + ", ".join(f"{e.key[:48]} {e.device_time_total / calls:.1f} us" for e in top))


def graphs_report(fn) -> str:
    """What the CUDA graphs of a compiled function did (ours + buckets)."""
    cf = getattr(fn, "compiled", None)
    lines = []
    for e in getattr(cf, "entries", ()):
        rep = getattr(getattr(e.fn, "graph_fn", e.fn), "cuda_graphs_report", None)
        lines += rep()[:4] if rep else []
    return "\n      ".join(lines) or "no entry with CUDA graphs"


# ---------------------------------------------------------------------------- Llama decode
def llama(size: str, dev):
    from transformers import LlamaConfig, LlamaForCausalLM
    if size == "tiny":
        cfg = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=2048, max_position_embeddings=2048)
    else:  # 1B class (TinyLlama-1.1B's shape)
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                          num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
    torch.manual_seed(SEED)
    return LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval(), cfg


def decode(step_fn, model, cfg, dev, prompt: int, steps: int, static: bool) -> tuple[float, list]:
    """Greedy decoding `steps` tokens after a prompt: (median seconds per decode step, tokens). The KV
    cache grows a token a step (DynamicCache) or is transformers' StaticCache (fixed-size tensors
    written in place at `cache_position`: the shapes of a step never change)."""
    from transformers import DynamicCache, StaticCache
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), device=dev, generator=torch.Generator(dev).manual_seed(1))
    cache = StaticCache(config=cfg, max_cache_len=prompt + steps + 1) if static else DynamicCache()
    pos = torch.arange(prompt, device=dev)
    out = model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)
    tok = out.logits[:, -1:].argmax(-1)
    times, toks = [], []
    for i in range(steps):
        pos = torch.tensor([prompt + i], device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = step_fn(tok, cache, pos)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        tok = logits[:, -1:].argmax(-1)
        toks.append(int(tok))
    return statistics.median(times[len(times) // 4:]), toks


def decode_bench(size: str, dev, inductor: bool, static: bool) -> None:
    from dynashape.backends.fused import build
    model, cfg = llama(size, dev)

    def step(tok, cache, pos):
        return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits

    runs = contestants(step, inductor)
    med, ref = {}, None
    with torch.no_grad():
        for name, fn in runs.items():
            try:  # a first loop compiles (ours: Triton in the background, then waited for), the second is timed
                decode(fn, model, cfg, dev, prompt=32, steps=64, static=static)
                build.worker.wait_idle()
                med[name], toks = decode(fn, model, cfg, dev, prompt=32, steps=64, static=static)
            except Exception as e:  # noqa: BLE001
                print(f"    {name}: failed ({type(e).__name__}: {str(e)[:200]})")
                continue
            if ref is None:
                ref = toks
            elif toks != ref:
                print(f"    {name}: tokens differ from eager's (first at step {next(i for i, (a, b) in enumerate(zip(toks, ref)) if a != b)})")
            if name == "ours + buckets":
                print(f"    {name}: {graphs_report(fn)}")
    kind = "StaticCache" if static else "KV cache growing"
    report(f"Llama decode ({size}, bf16, batch 1, prompt 32, 64 steps, {kind})", med)


# ---------------------------------------------------------------------------- varying shapes
CASES = ("pointwise chain", "transformer block")


def _sync(dev) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def sequence_one(dev, name: str, case: str) -> float:
    """Seconds for the 60 calls of `case` by contestant `name`, from this (fresh) process's first call
    of it; CUDA, cuBLAS and the random generator were initialized before."""
    from bench.fused import Block, chain
    rng = random.Random(SEED)
    shapes = [(rng.randint(1, 64), rng.choice([16, 32, 48, 64, 96, 128])) for _ in range(60)]
    if case == "pointwise chain":
        fn = chain
        def make(b, t): return (torch.randn(b * t, 4096, device=dev), torch.randn(4096, device=dev), torch.randn(4096, device=dev))
    else:
        fn = Block().to(dev).eval()
        def make(b, t): return (torch.randn(b, t, 128, device=dev),)
    (torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)).sum().item()
    run = contestants(fn, name.startswith("inductor"))[name]
    _sync(dev)
    t0 = time.perf_counter()
    ends = []
    with torch.no_grad():
        for b, t in shapes:
            run(*make(b, t))
            ends.append(time.perf_counter())
    _sync(dev)
    total = time.perf_counter() - t0
    # where a slow total went: the first call, the slowest others (host time: calls are not synced)
    each = [e - s for s, e in zip([t0] + ends, ends)]
    slow = sorted(range(1, len(each)), key=lambda i: -each[i])[:3]
    print(f"detail first call {each[0] * 1e3:.1f} ms, slowest " + ", ".join(f"#{i} {each[i] * 1e3:.1f} ms" for i in slow)
          + f", the rest {sum(each[1:]) * 1e3 - sum(each[i] for i in slow) * 1e3:.1f} ms"
          + (f"; Triton launches {sys.modules['dynashape.backends.fused.triton_run'].counters['launches']}"
             if name.startswith("ours") else ""))
    return total


def sequence(inductor: bool) -> None:
    """Each contestant in a process of its own with empty caches (Triton's, Inductor's, ours): a cold start."""
    import subprocess
    import tempfile
    names = ["eager"] + (["inductor", "inductor reduce-overhead"] if inductor else []) + ["ours", "ours + buckets"]
    for case in CASES:
        totals, details = {}, {}
        for name in names:
            tmp = tempfile.mkdtemp(prefix="cold-")
            env = dict(os.environ, TRITON_CACHE_DIR=f"{tmp}/triton", TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                       DYNASHAPE_CACHE_DIR=f"{tmp}/ds", DYNASHAPE_FUSED_CACHE_DIR=f"{tmp}/ds/kernels")
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--sequence-one", name, case],
                               env=env, capture_output=True, text=True)
            got = [ln for ln in r.stdout.splitlines() if ln.startswith("seconds ")]
            if r.returncode or not got:
                print(f"    {name}: failed ({(r.stderr or r.stdout)[-300:]})")
                continue
            totals[name] = float(got[-1].split()[1])
            details[name] = [ln[len("detail "):] for ln in r.stdout.splitlines() if ln.startswith("detail ")]
        base, ind = totals.get("eager"), totals.get("inductor")
        print(f"  60 random shapes, {case}, compiles included, each contestant a cold process:")
        for k, v in totals.items():
            print(f"    {k:26s} {v * 1e3:9.1f} ms" + (f"  {v / base:.2f}x eager" if base else "")
                  + (f", {v / ind:.3f}x inductor" if ind else ""))
            for d in details.get(k, ()):
                print(f"      ({d})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of interleaved calls per workload")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-1b", action="store_true")
    ap.add_argument("--no-sequences", action="store_true")
    ap.add_argument("--no-profile", action="store_true", help="no kernel profile of ours and Inductor per workload")
    ap.add_argument("--sequence-one", nargs=2, metavar=("CONTESTANT", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sequence_one:  # a child of sequence(): one contestant, one case, from a cold start
        with ds.config.patch(cudagraphs="buckets" if args.sequence_one[0] == "ours + buckets" else "off"):
            print(f"seconds {sequence_one(torch.device('cuda'), *args.sequence_one)}")
        return 0
    if not torch.cuda.is_available():
        print("bench/gpu.py: skipped: no CUDA device here (torch.cuda.is_available() is False). "
              "It measures the Triton kernels and CUDA graphs on a GPU; on the CPU the suite runs every "
              "Triton kernel in Triton's interpreter instead (tests/backends/fused/test_triton.py).")
        return 0
    try:
        import triton  # noqa: F401
    except ImportError:
        print("bench/gpu.py: skipped: triton is not installed (pip install -e '.[gpu]')")
        return 0
    dev = torch.device("cuda")
    inductor = not args.no_inductor
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, triton {triton.__version__}")
    torch.manual_seed(SEED)
    if not args.no_sequences:
        sequence(inductor)
    cold()
    with torch.no_grad():
        for title, fn, a in workloads(hf=False):
            if isinstance(fn, torch.nn.Module):
                fn = fn.to(dev)
            a = tuple(_to(x, dev) for x in a)
            from dynashape.backends.fused import counters
            from dynashape.backends.fused import triton_run
            rejected, tuned = counters["rejected"], dict(triton_run._load_choices())
            runs = contestants(fn, inductor)
            report(title, steady(runs, a, args.budget))
            if counters["rejected"] != rejected:
                print(f"    (ours: {counters['rejected'] - rejected} kernel results rejected (a target out of range), torch's calls ran after)")
            new = {k.split("|", 1)[1]: v for k, v in triton_run._load_choices().items() if k not in tuned}
            if new:  # (XBLOCK, RBLOCK, warps) per size bucket (rows x row length, powers of two)
                print(f"    (ours: block sizes tuned: {', '.join(f'{k}: {tuple(v)}' for k, v in new.items())})")
            for name in ("ours", "inductor"):  # where the time goes (after the timing: the profiler slows calls)
                if name in runs and not args.no_profile:
                    try:
                        print(f"    ({name}: {kernels(runs[name], a)})")
                    except Exception as e:  # noqa: BLE001 - a profile is information, not a result
                        print(f"    ({name}: no profile: {type(e).__name__}: {str(e)[:120]})")
    if not args.no_llama:
        for static in (False, True):
            decode_bench("tiny", dev, inductor, static)
            if not args.no_1b:
                decode_bench("1b", dev, inductor, static)
    return 0


if __name__ == "__main__":
    sys.exit(main())
