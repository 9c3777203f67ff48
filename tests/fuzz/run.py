"""Running a generated program compiled and eager, and classifying the differences.

Each program runs under `dynamic=None`, `True` and `False` (a fresh compiled
function per mode) on the same calls; eager runs once per call. Failure classes:

- `wrong`: a result differs from eager (container type, shape, dtype, values),
  or the inputs differ after the call (in-place effects);
- `crash`: the compiled call raised where eager returned;
- `noraise`: eager raised, the compiled call returned;
- `exc-type`: both raised, with different exception types;
- `leak`: a FakeTensor or a dynashape symbolic value is in the returned value;
- `hang`: one mode's calls took longer than `TIME_LIMIT_S` (eager takes milliseconds).

Training programs (train.py) are compared by the same classes; oracle.py holds the comparisons.
"""
from __future__ import annotations

import linecache
import random
import signal
import warnings
from dataclasses import dataclass, field

import torch

import dynashape as ds

from .gen import REF_SIZES, Program, make_inputs, random_call
from .oracle import difference, find_leak, near

MODES = (None, True, False)
TIME_LIMIT_S = 20.0  # per program and mode: a compile slower than this is a finding, not a stuck run
FUSED_SLOWER = 6  # backend="fused" with kernels built before the call: g++ (a few kernels a mode), slow, not stuck


def backend_config(name: str | None) -> dict:
    """`ds.config.patch` arguments that compile with `name`: "eager", or "fused" with its kernels
    built before each call returns (so they are judged from the first call); None: as configured."""
    return {} if name is None else {"backend": name, "fused_sync": name == "fused"}


def time_limit() -> float:
    return TIME_LIMIT_S * (FUSED_SLOWER if ds.config.backend == "fused" and ds.config.fused_sync else 1)


class _TimeLimit(BaseException):  # not an Exception: dynashape's own handlers must not catch it
    pass


def _alarm(signum, frame):
    raise _TimeLimit()
torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a shared machine


@dataclass
class Failure:
    kind: str  # wrong / crash / noraise / exc-type / leak
    mode: object  # the `dynamic=` it failed under
    call: int  # index of the failing call
    message: str
    exc: str = ""  # exception type(s) involved: "ZeroDivisionError", or "IndexError->RuntimeError"
    program: Program | None = None
    calls: list = field(default_factory=list)
    phase: str = ""  # training mode: the call phase (phases.PHASES); "" for inference
    backend: str = ""  # the backend it was compiled with ("fused": kernels built before each call)

    def signature(self) -> tuple:
        """What the reducer keeps: the same class and the same exception type."""
        return (self.kind, self.exc)

    def headline(self) -> str:
        where = f"dynamic={self.mode}, call {self.call}" + (f", phase {self.phase}" if self.phase else "") + \
            (f", backend {self.backend}" if self.backend else "")
        return f"{self.kind}{' ' + self.exc if self.exc else ''} ({where}): " \
               f"{self.message.splitlines()[0][:300] if self.message else ''}"


_counter = [0]


def load(prog: Program, tag: str = "fuzz"):
    """The program's function, with its source registered in linecache (the tracer reads user lines)."""
    _counter[0] += 1
    src = prog.source()
    filename = f"<{tag}-{_counter[0]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict = {}
    exec(compile(src, filename, "exec"), ns)
    return ns[prog.name]


def _clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001  (any exception is a result to compare)
        return None, e


def _msg(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def eager_results(fn, prog: Program, calls: list) -> list:
    out = []
    for c in calls:
        args = make_inputs(prog.inputs, c)
        res, err = _run(fn, args)
        out.append((res, err, args))
    return out


WIDENED = [0]  # calls at size 1 that a graph traced for sizes >= 2 took (symbolic/widen.py), all programs


def check_mode(fn, prog: Program, calls: list, eager: list, mode) -> Failure | None:
    """The first failure of the compiled function under `dynamic=mode` over `calls`, or None."""
    cf = ds.compile(fn, dynamic=mode)
    try:
        return _check_calls(cf, fn, prog, calls, eager, mode)
    finally:
        WIDENED[0] += getattr(getattr(cf, "stats", None), "widened", 0)  # (tests pass a plain function)


def _check_calls(cf, fn, prog: Program, calls: list, eager: list, mode) -> Failure | None:
    for i, (c, (want, werr, wargs)) in enumerate(zip(calls, eager)):
        args = make_inputs(prog.inputs, c)
        got, gerr = _run(cf, args)
        if gerr is not None and werr is None:
            return Failure("crash", mode, i, _msg(gerr), type(gerr).__name__)
        if gerr is None and werr is not None:
            return Failure("noraise", mode, i, f"eager raised {_msg(werr)}", type(werr).__name__)
        if gerr is not None:
            if type(gerr) is not type(werr):
                return Failure("exc-type", mode, i, f"{_msg(gerr)} (eager: {_msg(werr)})",
                               f"{type(werr).__name__}->{type(gerr).__name__}")
            continue
        leak = find_leak(got)
        if leak:
            return Failure("leak", mode, i, leak)
        d = difference(want, got)
        if d is not None and (": values differ:" in d or ": shape " in d) and _rounding_explains(fn, prog, c, want, got):
            d = None
        if d is None:
            d = difference(wargs, args, "inputs")
        if d:
            return Failure("wrong", mode, i, d)
    return None


def _rounding_explains(fn, prog: Program, call, want, got) -> bool:
    """Whether float rounding explains values that differ from eager's: the program run in float64
    shows the compiled result as near the exact one as eager's (`oracle.near`)."""
    args = [a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
            for a in make_inputs(prog.inputs, call)]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # factories too (`torch.eye(n)` next to a float64 input)
    try:
        ref, err = _run(fn, args)
    finally:
        torch.set_default_dtype(default)
    return err is None and near(want, got, ref)


def check_program(prog: Program, calls: list, modes=MODES, stats=None, backend: str | None = None) -> list:
    """Failures of `prog` over `calls`, at most one per mode. backend: "eager" or "fused" (kernels
    built before each call returns); None: as configured."""
    # no profiles: each run starts fresh
    with warnings.catch_warnings(), ds.config.patch(pgo=False, **backend_config(backend)):
        warnings.simplefilter("ignore")
        fn = load(prog)
        eager = eager_results(fn, prog, calls)
        failures = []
        for mode in modes:  # check_mode compiles afresh: no ds.reset(), which would touch other tests' functions
            f = limited(lambda: check_mode(fn, prog, calls, eager, mode), mode, len(calls) - 1)
            if stats is not None:
                stats["calls"] += len(calls) if f is None else f.call + 1
            if f is not None:
                f.program, f.calls, f.backend = prog, calls, ds.config.backend
                failures.append(f)
        return failures


def limited(check, mode, last_call: int) -> Failure | None:
    """check(), or a `hang` failure after `time_limit()` (SIGALRM: main thread, Unix only)."""
    limit = time_limit()
    if not hasattr(signal, "SIGALRM") or limit <= 0:
        return check()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return check()
    except _TimeLimit:
        return Failure("hang", mode, last_call, f"the compiled calls took more than {limit:g} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def random_calls(seed: int, prog: Program, k: int) -> list:
    """`k` calls: a first call of ordinary sizes, then random sizes (0, 1, 2, primes...)."""
    rng = random.Random(seed)
    calls = [random_call(rng, prog.inputs, seed * 100 + i) for i in range(k)]
    if rng.random() < 0.7:  # usually trace first on sizes the program was generated for
        calls[0].dims = {d: rng.choice(REF_SIZES) for d in calls[0].dims}
    return calls
