"""The fuzzing loop: generate, run, deduplicate, reduce, write out.

    python -m tests.fuzz --minutes 10 --seed 123 --out fuzz-failures
    python -m tests.fuzz --mode train --minutes 4      # training programs (train.py)
"""
from __future__ import annotations

import os
import random
import re
import time
from dataclasses import dataclass, field

from dynashape.backends.fused import build as fused_build
from dynashape.tracing import op_memo

from .gen import generate
from .gen_train import generate_train
from .reduce import reduce, script
from .run import WIDENED, Failure, check_program, random_calls
from .train import check_train_program, pick_phase

MIXED = ("eager", "eager", "fused")  # the default: every third program judges the fused kernels
CALLS = {"infer": (15, 24), "train": (6, 12)}  # calls per program (a training call also runs backward)


@dataclass
class Report:
    seed: int
    programs: int = 0
    calls: int = 0
    failures: int = 0  # failing (program, mode) pairs
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time: throughput on a shared machine
    fuzz_seconds: float = 0.0  # running programs, before reducing the failures
    distinct: dict = field(default_factory=dict)  # key -> [reduced Failure, how many times seen]
    mode: str = "infer"  # or "train"
    backends: dict = field(default_factory=dict)  # backend -> programs compiled with it
    widened: int = 0  # calls at size 1 taken by a graph traced for sizes >= 2
    replayed: int = 0  # calls a trace recorded from the op memo (tracing/op_memo.py)
    phases: dict = field(default_factory=dict)  # training: phase -> programs

    def summary(self) -> str:
        rate = self.programs / self.fuzz_seconds if self.fuzz_seconds else 0.0
        lines = [f"fuzz{' (training)' if self.mode == 'train' else ''}: seed {self.seed}, {self.programs} programs "
                 f"({rate:.1f}/s, 3 modes each), {self.calls} compiled calls, {self.failures} failures, "
                 f"{len(self.distinct)} distinct, {self.seconds:.0f} s ({self.cpu_seconds:.0f} s CPU)",
                 "  programs by backend: " + ", ".join(f"{b} {n}" for b, n in self.backends.items())
                 + f"; size-1 calls on a graph traced for sizes >= 2: {self.widened}; calls traced from the op "
                 f"memo: {self.replayed}"]
        if self.phases:
            lines.append("  programs by phase: " + ", ".join(f"{p} {n}" for p, n in self.phases.items()))
        for key, (f, count) in self.distinct.items():
            lines.append(f"  [{count}x] {f.headline()}")
        return "\n".join(lines)


def key_of(f: Failure) -> tuple:
    """Failures that look alike: class, exception type, the message without numbers and symbols."""
    msg = re.sub(r"Sym\([^)]*\)", "Sym", f.message.splitlines()[0] if f.message else "")
    msg = re.sub(r"\b[su]\d+\b", "s", msg)
    msg = re.sub(r"-?\d+(\.\d+)?", "N", msg)
    msg = re.sub(r"<fuzz-N>:N", "<fuzz>", msg)
    return (f.kind, f.exc, msg[:120])


def skeleton(f: Failure) -> tuple:
    """The ops a reduced program calls: two reductions of one bug usually share them."""
    names = set()
    for s in f.program.body:
        for ln in s.lines:
            names.update(re.findall(r"\.?([A-Za-z_]\w*)\(", ln))
    for r in f.program.ret:
        names.update(re.findall(r"\.?([A-Za-z_]\w*)\b", r))
    return (f.kind, f.exc, tuple(sorted(names)))


def fuzz(seed: int, seconds: float, *, out_dir: str | None = None, reduce_s: float = 20.0, max_reduce: int = 40,
         reserve_s: float = 0.0, calls_per_program=None, exclude: str | None = None, log=print, mode: str = "infer",
         backends: tuple | None = None, phase: str | None = None) -> Report:
    """Run random programs for `seconds` (the last `reserve_s` are kept for reducing, if anything failed).
    `exclude`: a regex of statements not to generate (to look past a known, frequent bug).
    mode: "infer" or "train" (training programs, each under a call phase: `phase`, or one picked per program).
    backends: program i compiles with backends[i % len(backends)] ("eager", or "fused" with its kernels
    built before each call returns); None: as configured."""
    rng = random.Random(seed)
    rep = Report(seed, mode=mode)
    calls_per_program = calls_per_program or CALLS[mode]
    stats = {"calls": 0}
    widened0, replayed0 = WIDENED[0], op_memo.replayed[0]
    start, cpu0 = time.monotonic(), time.process_time()
    found: list[Failure] = []
    keys: dict = {}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    next_note = start + 60
    saved_builds = [0]
    try:
        while time.monotonic() - start < seconds - (reserve_s if found else 0.0):  # nothing found: all fuzzing
            if time.monotonic() > next_note:  # a sign of life on long runs
                next_note += 60
                log(f"  {time.monotonic() - start:.0f} s: {rep.programs} programs, {rep.failures} failures, "
                    f"{len(keys)} kinds")
            pseed = rng.getrandbits(48)
            built_badly = fused_build.counters["failures"]
            backend = backends[rep.programs % len(backends)] if backends else None
            rep.backends[backend or _configured()] = rep.backends.get(backend or _configured(), 0) + 1
            if mode == "train":
                prog = generate_train(pseed, exclude)
                calls = random_calls(pseed, prog, rng.randint(*calls_per_program))
                p = phase or pick_phase(pseed)
                rep.phases[p] = rep.phases.get(p, 0) + 1
                fails = check_train_program(prog, calls, p, stats=stats, backend=backend)
            else:
                prog = generate(pseed, exclude, data_branches=True, half=True, catch=True, numbers=True)
                calls = random_calls(pseed, prog, rng.randint(*calls_per_program))
                fails = check_program(prog, calls, stats=stats, backend=backend)
            rep.programs += 1
            if out_dir and fused_build.counters["failures"] != built_badly and saved_builds[0] < 5:
                # the fused backend could not build a kernel for it (the eager code ran, results stay
                # right): kept, so that a gap met once in a long run can be reproduced
                saved_builds[0] += 1
                f = Failure("build", None, 0, fused_build.last_failure[0], program=prog, calls=calls,
                            phase=p if mode == "train" else "", backend=backend or "")
                with open(os.path.join(out_dir, f"build-failure-{saved_builds[0]}.py"), "w") as fh:
                    fh.write("# the fused backend fell back for this program: " + f.message[:500].replace("\n", " ")
                             + "\n" + script(f))
            for f in fails:
                rep.failures += 1
                k = key_of(f)
                keys[k] = keys.get(k, 0) + 1
                if keys[k] <= (2 if f.kind == "wrong" else 1):  # wrong results: same message, maybe two bugs
                    found.append(f)
        rep.fuzz_seconds = time.monotonic() - start
        n = 0
        skeletons: dict = {}
        for i, f in enumerate(found):
            if n >= max_reduce or time.monotonic() - start > seconds:
                # no time left to reduce (a slow program ran past the reserve): kept as found, so that
                # a failure is never only a count (seed 25112957's three were, until replayed)
                for g in found[i:]:
                    k = key_of(g)
                    if not any(key_of(h) == k for h, _ in rep.distinct.values()):
                        rep.distinct[(k, ("unreduced",))] = [g, keys[k]]
                        if out_dir:
                            _write(out_dir, len(rep.distinct), g, g)
                break
            n += 1
            r = f if f.kind == "hang" else reduce(f, reduce_s)  # each try of a hang costs the time limit
            sk = skeleton(r)
            k = key_of(f)
            if sk in skeletons or any(key_of(g) == k and skeleton(g) == sk for g, _ in rep.distinct.values()):
                continue
            skeletons[sk] = True
            rep.distinct[(k, sk)] = [r, keys[k]]
            if out_dir:
                _write(out_dir, len(rep.distinct), f, r)
            log(f"reduced: {r.headline()}")
    except KeyboardInterrupt:
        log("interrupted")
    rep.calls = stats["calls"]
    rep.widened = WIDENED[0] - widened0
    rep.replayed = op_memo.replayed[0] - replayed0
    rep.seconds = time.monotonic() - start
    rep.cpu_seconds = time.process_time() - cpu0
    rep.fuzz_seconds = rep.fuzz_seconds or rep.seconds  # interrupted while running programs
    if out_dir:
        with open(os.path.join(out_dir, "summary.txt"), "w") as fh:
            fh.write(rep.summary() + "\n")
    return rep


def _configured() -> str:
    import dynashape as ds
    return ds.config.backend + (" (kernels built in the background)" if ds.config.backend == "fused"
                                and not ds.config.fused_sync else "")


def _write(out_dir: str, i: int, orig: Failure, red: Failure) -> None:
    stem = f"{i:03d}-{red.kind}{'-' + red.exc.replace('->', '-to-') if red.exc else ''}" + \
        (f"-{red.phase}" if red.phase else "")
    with open(os.path.join(out_dir, stem + ".py"), "w") as fh:
        fh.write(script(red))
    with open(os.path.join(out_dir, stem + ".orig.py"), "w") as fh:
        fh.write(script(orig))
