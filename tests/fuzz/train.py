"""Training mode: running a generated training program compiled and eager under a call phase.

Each program runs under `dynamic=None`, `True` and `False` (a fresh compiled function per mode) on
the same calls, grouped by the phase (phases.py: plain, no_grad, enable_grad, two_forwards,
accumulate, grad_penalty); eager runs each group once. The records (outputs, their autograd
flags, grad mode after the call, inputs after it, every leaf's and returned tensor's `.grad`)
are compared by `oracle.compare`; failure classes as run.py's.

    >>> from tests.fuzz.gen_train import generate_train
    >>> prog = generate_train(1)
    >>> check_train_program(prog, random_calls(1, prog, 4), "plain", modes=(True,), backend="eager")
    []
"""
from __future__ import annotations

import random
import warnings

import torch

import dynashape as ds

from .gen import Program
from .gen_train import call_tuple, input_tuple
from .oracle import compare
from .phases import PHASES, groups, run_phase
from .run import MODES, Failure, backend_config, limited, load, random_calls  # noqa: F401  (random_calls: doctest)


def pick_phase(seed: int) -> str:
    """The phase of a program, from its seed (weights in phases.PHASES)."""
    names = list(PHASES)
    return random.Random(seed).choices(names, [PHASES[p][0] for p in names])[0]


def check_train_program(prog: Program, calls: list, phase: str, modes=MODES, stats=None,
                        backend: str | None = None) -> list:
    """Failures of `prog` over `calls` under `phase`, at most one per mode. backend: "eager" or
    "fused" (kernels built before each call returns); None: as configured."""
    with warnings.catch_warnings(), ds.config.patch(pgo=False, **backend_config(backend)):
        warnings.simplefilter("ignore")
        fn = load(prog)
        inputs = [input_tuple(i) for i in prog.inputs]
        gs = groups([call_tuple(c) for c in calls], phase)
        eager = [run_phase(fn, inputs, g, phase) for g in gs]
        failures = []
        for mode in modes:
            f = limited(lambda: check_train_mode(fn, inputs, gs, eager, phase, mode), mode, len(calls) - 1)
            if stats is not None:
                stats["calls"] += len(calls) if f is None else f.call + 1
            if f is not None:
                f.program, f.calls, f.phase, f.backend = prog, calls, phase, ds.config.backend
                failures.append(f)
        return failures


def check_train_mode(fn, inputs, gs, eager, phase, mode) -> Failure | None:
    """The first failure of the compiled function under `dynamic=mode` over the call groups `gs`."""
    cf = ds.compile(fn, dynamic=mode)
    done = 0
    for group, want in zip(gs, eager):
        done += len(group)
        got = run_phase(cf, inputs, group, phase)
        bad = compare(want, got, lambda: run_phase(fn, inputs, group, phase, torch.float64),
                      lambda k: run_phase(fn, inputs, group, phase, perturb=k),
                      lambda: run_phase(cf, inputs, group, phase, torch.float64))
        if bad is not None:
            kind, exc, message = bad
            return Failure(kind, mode, done - 1, message, exc)  # the group's last call: the reducer keeps it
    return None
