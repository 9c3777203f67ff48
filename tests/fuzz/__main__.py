"""`python -m tests.fuzz`: a random-seed fuzzing run (what `make fuzz` calls)."""
import argparse
import os
import random
import sys

from .driver import fuzz
from .run import use_backend


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", 10)))
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed at the end)")
    ap.add_argument("--out", default="fuzz-failures", help="folder for failing programs (original + reduced)")
    ap.add_argument("--reduce-seconds", type=float, default=20.0, help="time limit per reduction")
    ap.add_argument("--exclude", default=os.environ.get("FUZZ_EXCLUDE") or None,
                    help="regex: statements not to generate, to look past known bugs (e.g. '>>|&|chunk')")
    ap.add_argument("--backend", choices=("eager", "fused"), default=os.environ.get("FUZZ_BACKEND", "eager"),
                    help="the backend programs compile with (fused: kernels built before each call returns)")
    ap.add_argument("--reduce", metavar="SCRIPT", nargs="+",
                    help="re-run and shrink failing scripts written earlier (to SCRIPT.reduced.py)")
    args = ap.parse_args(argv)
    use_backend(args.backend)
    if args.reduce:
        return _reduce_scripts(args.reduce, args.reduce_seconds)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    seconds = args.minutes * 60
    out = os.path.join(args.out, f"seed-{seed}")
    print(f"fuzz: seed {seed}, {args.minutes:g} min, backend {args.backend}, failing programs go to {out}/", flush=True)
    rep = fuzz(seed, seconds, out_dir=out, reduce_s=args.reduce_seconds, reserve_s=min(120.0, seconds * 0.1),
               exclude=args.exclude, log=lambda m: print(m, flush=True))
    print(rep.summary())
    print(f"programs {rep.programs}, calls {rep.calls}, failures {rep.failures} "
          f"({len(rep.distinct)} distinct), seed {seed}, backend {args.backend}, duration {rep.seconds:.0f} s")
    if args.backend == "fused":  # kernels were really used (not only eager fallbacks); failures: regions left to torch
        from dynashape.backends.fused import counters
        print("fused kernels: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    return 1 if rep.failures else 0


def _reduce_scripts(paths, seconds) -> int:
    from .reduce import load_script, reduce, script
    from .run import check_program
    for path in paths:
        prog, calls, mode = load_script(path)
        fails = check_program(prog, calls, modes=(mode,))
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
