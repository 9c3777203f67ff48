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
"""
from __future__ import annotations

import linecache
import math
import random
import signal
import warnings
from dataclasses import dataclass, field

import torch

import dynashape as ds
from dynashape.symbolic.symtypes import SymBase
from dynashape.tracing.fake import FakeTensor

from .gen import REF_SIZES, Program, make_inputs, random_call

MODES = (None, True, False)
TIME_LIMIT_S = 20.0  # per program and mode: a compile slower than this is a finding, not a stuck run


def use_backend(name: str) -> None:
    """Compile every program with `name` ("eager" or "fused"; fused kernels built before the call returns)."""
    global TIME_LIMIT_S
    ds.config.backend = name
    ds.config.fused_sync = name == "fused"
    TIME_LIMIT_S = 120.0 if name == "fused" else 20.0  # fused waits for g++ (a few kernels a mode): slow, not stuck


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

    def signature(self) -> tuple:
        """What the reducer keeps: the same class and the same exception type."""
        return (self.kind, self.exc)

    def headline(self) -> str:
        return f"{self.kind}{' ' + self.exc if self.exc else ''} (dynamic={self.mode}, call {self.call}): " \
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


def difference(want, got, path="out") -> str | None:
    """Why `got` differs from eager's `want`, or None."""
    if type(want) is not type(got):
        return f"{path}: type {type(got).__name__}, eager {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        if want.shape != got.shape:
            return f"{path}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
        if want.dtype != got.dtype:
            return f"{path}: dtype {got.dtype}, eager {want.dtype}"
        if want.device != got.device:
            return f"{path}: device {got.device}, eager {want.device}"
        if torch.equal(got, want):  # the usual case, ten times cheaper than assert_close
            return None
        try:
            torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-5)
        except AssertionError as e:
            return f"{path}: values differ: {str(e).splitlines()[0]}"
        return None
    if isinstance(want, (list, tuple)):
        if len(want) != len(got):
            return f"{path}: length {len(got)}, eager {len(want)}"
        for i, (a, b) in enumerate(zip(want, got)):
            d = difference(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(want, dict):
        if list(want) != list(got):
            return f"{path}: keys {list(got)}, eager {list(want)}"
        for k in want:
            d = difference(want[k], got[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(want, float):
        same = (math.isnan(want) and math.isnan(got)) or (want == got and math.copysign(1, want) == math.copysign(1, got))
        return None if same else f"{path}: {got!r}, eager {want!r}"
    return None if want == got else f"{path}: {got!r}, eager {want!r}"


def leaks(value, path="out") -> str | None:
    """A trace-time object in a returned value."""
    if isinstance(value, FakeTensor):
        return f"{path} is a FakeTensor"
    if isinstance(value, (SymBase, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"{path} is a symbolic value {value!r}"
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            r = leaks(v, f"{path}[{i}]")
            if r:
                return r
    if isinstance(value, dict):
        for k, v in value.items():
            r = leaks(v, f"{path}[{k!r}]")
            if r:
                return r
    return None


def _msg(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def eager_results(fn, prog: Program, calls: list) -> list:
    out = []
    for c in calls:
        args = make_inputs(prog.inputs, c)
        res, err = _run(fn, args)
        out.append((res, err, args))
    return out


def check_mode(fn, prog: Program, calls: list, eager: list, mode) -> Failure | None:
    """The first failure of the compiled function under `dynamic=mode` over `calls`, or None."""
    cf = ds.compile(fn, dynamic=mode)
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
        leak = leaks(got)
        if leak:
            return Failure("leak", mode, i, leak)
        d = difference(want, got)
        if d is not None and ": values differ:" in d and _rounding_explains(fn, prog, c, want, got):
            d = None
        if d is None:
            d = difference(wargs, args, "inputs")
        if d:
            return Failure("wrong", mode, i, d)
    return None


def _rounding_explains(fn, prog: Program, call, want, got) -> bool:
    """Whether float rounding explains values that differ from eager's: run the program in float64
    and accept when, element by element, the compiled result is as near that as eager's (4x eager's
    own error, plus the usual tolerance). A sum of layer-normalised values is ~0 from cancellation:
    a kernel summing in another order lands 1e-5 from eager and nearer the exact result. A wrong
    index or a wrong size is off by far more than eager's rounding."""
    args = [a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
            for a in make_inputs(prog.inputs, call)]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # factories too (`torch.eye(n)` next to a float64 input)
    try:
        ref, err = _run(fn, args)
    finally:
        torch.set_default_dtype(default)
    if err is not None:
        return False

    def near(w, g, r) -> bool:
        if isinstance(w, torch.Tensor):
            if not (isinstance(r, torch.Tensor) and r.shape == w.shape == g.shape):
                return False
            if not w.dtype.is_floating_point:
                return torch.equal(w, g)
            r, w, g = r.double(), w.double(), g.double()
            ok = (g - r).abs() <= 4 * (w - r).abs() + 1e-5 + 1e-4 * r.abs()
            return bool((ok | (g.isnan() & w.isnan()) | (g == w)).all())
        if isinstance(w, (list, tuple)):
            return isinstance(r, (list, tuple)) and len(r) == len(w) and all(map(near, w, g, r))
        if isinstance(w, dict):
            return isinstance(r, dict) and all(near(w[k], g[k], r.get(k)) for k in w)
        return True  # not a tensor: `difference` compared it exactly already

    return near(want, got, ref)


def check_program(prog: Program, calls: list, modes=MODES, stats=None) -> list:
    """Failures of `prog` over `calls`, at most one per mode."""
    with warnings.catch_warnings(), ds.config.patch(pgo=False):  # no profiles: each run starts fresh
        warnings.simplefilter("ignore")
        fn = load(prog)
        eager = eager_results(fn, prog, calls)
        failures = []
        for mode in modes:  # check_mode compiles afresh: no ds.reset(), which would touch other tests' functions
            f = _limited(fn, prog, calls, eager, mode)
            if stats is not None:
                stats["calls"] += len(calls) if f is None else f.call + 1
            if f is not None:
                f.program, f.calls = prog, calls
                failures.append(f)
        return failures


def _limited(fn, prog, calls, eager, mode) -> Failure | None:
    """check_mode, or a `hang` failure after TIME_LIMIT_S (SIGALRM: main thread, Unix only)."""
    limit = TIME_LIMIT_S
    if not hasattr(signal, "SIGALRM") or limit <= 0:
        return check_mode(fn, prog, calls, eager, mode)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return check_mode(fn, prog, calls, eager, mode)
    except _TimeLimit:
        return Failure("hang", mode, len(calls) - 1, f"the compiled calls took more than {limit:g} s")
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
