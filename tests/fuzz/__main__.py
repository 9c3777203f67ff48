"""`python -m tests.fuzz`: a random-seed fuzzing run (what `make fuzz` calls)."""
import argparse
import faulthandler
import os
import random
import sys

from .driver import MIXED, fuzz
from .phases import PHASES


def main(argv=None) -> int:
    faulthandler.enable()  # a crash in a kernel kills the run: at least say which program was running
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", 10)))
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed at the end)")
    ap.add_argument("--out", default="fuzz-failures", help="folder for failing programs (original + reduced)")
    ap.add_argument("--reduce-seconds", type=float, default=20.0, help="time limit per reduction")
    ap.add_argument("--exclude", default=os.environ.get("FUZZ_EXCLUDE") or None,
                    help="regex: statements not to generate, to look past known bugs (e.g. '>>|&|chunk')")
    ap.add_argument("--mode", choices=("infer", "train", "state"),
                    default=os.environ.get("FUZZ_MODE") or "infer",
                    help="train: float inputs that require grad, outputs and every leaf's .grad compared "
                         "after backward, under a call phase per program; state: programs reading and writing "
                         "globals, a list, a dict, attributes and a module, changed by the caller between calls")
    ap.add_argument("--phase", choices=tuple(PHASES), default=None,
                    help="training: every program under this call phase (default: one picked per program)")
    ap.add_argument("--backend", choices=("eager", "fused"), default=os.environ.get("FUZZ_BACKEND") or None,
                    help="compile every program with this backend (fused: kernels built before each call "
                         "returns); default: every third program fused, the others eager")
    ap.add_argument("--device", choices=("cpu", "cuda", "interpret"), default=os.environ.get("FUZZ_DEVICE") or "cpu",
                    help="cuda: inputs on the GPU (the fused backend's Triton kernels); interpret: every fused "
                         "region as a Triton kernel run by Triton's interpreter on CPU tensors (implies --backend fused)")
    ap.add_argument("--cudagraphs", choices=("off", "exact", "buckets"), default=os.environ.get("FUZZ_CUDAGRAPHS") or "off",
                    help="run every program under ds.config.cudagraphs (on CPU tensors, the simulated capture and "
                         "replay of tests/backends/test_cudagraphs.py: the padding proofs judged against eager)")
    ap.add_argument("--reduce", metavar="SCRIPT", nargs="+",
                    help="re-run and shrink failing scripts written earlier (to SCRIPT.reduced.py)")
    args = ap.parse_args(argv)
    if args.reduce:
        return _reduce_scripts(args.reduce, args.reduce_seconds)
    if args.device != "cpu":
        args.backend = use_device(args.device)
    if args.cudagraphs != "off":
        import dynashape as ds
        from dynashape.backends import cudagraphs
        cudagraphs.SIMULATE[0] = args.device != "cuda"
        cudagraphs.WARM_UP[0] = False
        ds.config.cudagraphs = args.cudagraphs
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    seconds = args.minutes * 60
    out = os.path.join(args.out, f"seed-{seed}" + ("" if args.mode == "infer" else "-" + args.mode))
    backends = (args.backend,) if args.backend else MIXED
    split = args.backend or f"{MIXED.count('eager')} eager : {MIXED.count('fused')} fused"
    print(f"fuzz: seed {seed}, {args.minutes:g} min, mode {args.mode}, backend {split}, device {args.device}, "
          f"cudagraphs {args.cudagraphs}, failing programs go to {out}/", flush=True)
    if args.mode == "state":
        return _fuzz_state(args, seed, seconds, out, backends)
    rep = fuzz(seed, seconds, out_dir=out, reduce_s=args.reduce_seconds, reserve_s=min(120.0, seconds * 0.1),
               exclude=args.exclude, log=lambda m: print(m, flush=True), mode=args.mode, backends=backends,
               phase=args.phase)
    print(rep.summary())
    print(f"programs {rep.programs}, calls {rep.calls}, failures {rep.failures} ({len(rep.distinct)} distinct), "
          f"seed {seed}, mode {args.mode}, backend {split}, duration {rep.seconds:.0f} s")
    if args.cudagraphs != "off":  # how much of the graph path was judged
        from dynashape.backends.cudagraphs import counters as cg
        print(f"CUDA graphs ({args.cudagraphs}): captures {cg['captures']}, replays {cg['replays']} "
              f"({cg['padded_replays']} on padded inputs)")
    if "fused" in backends:  # kernels were really built (not only eager fallbacks); failures: regions left to torch
        from dynashape.backends.fused import counters
        from dynashape.backends.fused.build import failure_messages
        print(f"fused kernels ({rep.backends.get('fused', 0)} programs): "
              + ", ".join(f"{k} {v}" for k, v in counters.items()))
        if args.device != "cpu":
            from dynashape.backends.fused import triton_run
            print("triton kernels: " + ", ".join(f"{k} {v}" for k, v in triton_run.counters.items()))
        for m in failure_messages:  # a region the backend could not lower or build: a gap to fix
            print(f"  fused build failure: {m[:3000]}")
        if counters["failures"]:
            return 1
    return 1 if rep.failures else 0


def _fuzz_state(args, seed, seconds, out, backends) -> int:
    from .driver import Report
    from .state import fuzz_state
    rep = fuzz_state(seed, seconds, Report(seed, mode="state"), out_dir=out, reduce_s=args.reduce_seconds,
                     backends=backends, log=lambda m: print(m, flush=True), exclude=args.exclude)
    print(rep.summary())
    print(f"programs {rep.programs}, calls {rep.calls}, failures {rep.failures} ({len(rep.distinct)} distinct), "
          f"seed {seed}, mode state, duration {rep.seconds:.0f} s")
    return 1 if rep.failures else 0


def use_device(device: str) -> str:
    """Set the run up for `device` ("cuda" or "interpret"); the backend every program compiles with."""
    import dynashape as ds
    from .phases import DEVICE
    if device == "interpret":  # before triton is imported: its jit reads the variable
        os.environ["TRITON_INTERPRET"] = "1"
        ds.config.triton = "cpu"
    else:
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("fuzz: --device cuda needs a CUDA device; use --device interpret for Triton on the CPU")
        DEVICE[0] = "cuda"
    return "fused"


def _reduce_scripts(paths, seconds) -> int:
    from .reduce import load_script, recheck, reduce, script
    for path in paths:
        case = load_script(path)
        fails = recheck(case, case.program, case.calls)
        if not fails:
            print(f"{path}: no failure now")
            continue
        r = reduce(fails[0], seconds)
        out = path[:-3] + ".reduced.py"
        with open(out, "w") as fh:
            fh.write(script(r))
        print(f"{path}: {r.headline()}\n  -> {out} ({len(r.program.body)} statements, {len(r.calls)} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
