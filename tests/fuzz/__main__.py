"""`python -m tests.fuzz`: a random-seed fuzzing run (what `make fuzz` calls)."""
import argparse
import os
import random
import sys

from .driver import fuzz


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", 10)))
    ap.add_argument("--seed", type=int, default=None, help="default: random (printed at the end)")
    ap.add_argument("--out", default="fuzz-failures", help="folder for failing programs (original + reduced)")
    ap.add_argument("--reduce-seconds", type=float, default=20.0, help="time limit per reduction")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    seconds = args.minutes * 60
    out = os.path.join(args.out, f"seed-{seed}")
    print(f"fuzz: seed {seed}, {args.minutes:g} min, failing programs go to {out}/", flush=True)
    rep = fuzz(seed, seconds, out_dir=out, reduce_s=args.reduce_seconds, reserve_s=min(300.0, seconds * 0.2),
               log=lambda m: print(m, flush=True))
    print(rep.summary())
    print(f"programs {rep.programs}, calls {rep.calls}, failures {rep.failures} "
          f"({len(rep.distinct)} distinct), seed {seed}, duration {rep.seconds:.0f} s")
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
