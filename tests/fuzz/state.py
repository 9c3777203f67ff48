"""Running a Python-state program (gen_state.py) compiled and eager, side by side, and comparing state.

Each dynamic mode gets two fresh copies of the program's module, one whose `f` runs eagerly and
one whose `f` is compiled; each step makes the same change in both, calls both, and compares the
results, the inputs after the call and every piece of the modules' state (globals, the list, the
dict, the object's and the module's attributes, parameters and buffers, the closure cell), values,
types and requires_grad. A program with the hidden state (gen_state.py `hidden`) also compares the
`_`-named attributes, the class's attributes, the slots, the defaults, what the lru_cache functions
hold (keys and values, read from the cache itself) and what the weak containers hold once garbage
is collected, and what a call runs (gen_state.py CALLS_SOURCE: the module `net`'s attributes, the classes,
the partials' keywords, the defaults, f's code). A hidden program's `target` says what is compiled and
called each step: `f`, the module `net` (the compiled copy's `cnet` is the compiled module, so the
caller's writes through it must reach `net`), two partials of one function, or four functions made in
a loop, each compared after its call. Failure classes are run.py's (wrong / crash / noraise / exc-type / leak /
hang). After a call that raised in both, the step ends the run: where an exception leaves half-done
state is not compared.

    python -m tests.fuzz --mode state --minutes 5
"""
from __future__ import annotations

import copy
import gc
import linecache
import os
import random
import time
import types
import warnings

import torch

import dynashape as ds

from .gen_state import StateProgram, generate_state
from .oracle import difference, find_leak
from .run import MODES, Failure, backend_config, limited

STATE = ("G", "GF", "FLAG", "CNT", "GT", "L", "D")
_MODULE_OWN = set(vars(torch.nn.Module())) - {"training"}  # nn.Module's own members: not the program's state
_counter = [0]


def load_world(prog: StateProgram) -> dict:
    """A fresh module of the program (its own code objects, its source in linecache)."""
    _counter[0] += 1
    src = prog.source()
    filename = f"<state-{_counter[0]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict = {"__name__": f"state_{_counter[0]}"}
    exec(compile(src, filename, "exec"), ns)
    return ns


def _val(v):
    """A value `difference` compares: tensors cloned with their requires_grad, containers walked; a
    trace-time object (a FakeTensor, a SymInt) as it is, for `find_leak`."""
    if type(v).__module__.startswith("dynashape") or isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return v
    if isinstance(v, torch.Tensor):
        return (v.detach().clone(), v.requires_grad)
    if isinstance(v, list):
        return [_val(e) for e in v]
    if isinstance(v, dict):
        return {k: _val(e) for k, e in v.items()}
    if isinstance(v, types.GeneratorType):  # where it stands
        return ("generator", v.gi_frame.f_locals.get("k") if v.gi_frame is not None else None)
    return v


def snapshot(ns: dict) -> dict:
    """The module's state, as values `difference` compares (a tensor's requires_grad included)."""
    val = _val
    m, obj = ns["m"], ns["obj"]
    out = {k: val(ns[k]) for k in STATE}
    out["obj"] = {k: val(v) for k, v in vars(obj).items()}
    out["m"] = {k: val(v) for k, v in vars(m).items() if k not in _MODULE_OWN}
    out["m.params"] = {k: val(v) for k, v in m.named_parameters()}
    out["m.buffers"] = {k: val(v) for k, v in m.named_buffers()}
    out["c"] = val(ns["f"].__closure__[_cell(ns["f"], "c")].cell_contents)
    out["h"] = {k: val(getattr(ns["h"], k, None)) for k in ("SCALE", "CALLS", "FAST", "W", "EXTRA")}
    out["gen"] = val(ns["gen"])
    out["box"] = {k: val(v) for k, v in vars(ns["box"]).items()}
    out["counter"] = val(ns["counter"].__closure__[0].cell_contents)
    out["cfg"] = {k: val(v) for k, v in vars(ns["cfg"]).items()}
    out["acc"] = val(ns["acc"])
    out["defaults"] = (ns["scaled_by"].__defaults__, dict(ns["part"].keywords))
    out["dq"] = val(list(ns["dq"]))
    out["cnt"] = repr(ns["cnt"])
    if "pm" in ns:  # gen_state's hidden state
        out.update(hidden_snapshot(ns))
    return out


def hidden_snapshot(ns: dict) -> dict:
    """The hidden state (gen_state.StateProgram.hidden_source): `_` attributes, the class, the slots,
    the defaults, the caches' contents and the weak containers' (call `gc.collect()` first)."""
    val, pm, sl, f = _val, ns["pm"], ns["sl"], ns["f"]
    return {
        "pm": {k: val(v) for k, v in vars(pm).items() if k not in _MODULE_OWN},  # _steps, _scale, _kv, training
        "Counted": {k: val(v) for k, v in vars(ns["Counted"]).items() if not k.startswith("__") and not callable(v)},
        "co": {k: val(v) for k, v in vars(ns["co"]).items()},
        "sl": {k: val(getattr(sl, k)) if hasattr(sl, k) else "<unset>" for k in type(sl).__slots__},
        "f.defaults": [val(list(d) if isinstance(d, tuple) else d) for d in (f.__defaults__, f.__kwdefaults__)],
        "helpers.defaults": [val(list(ns["remember"].__defaults__)), val(ns["tally"].__kwdefaults__)],
        "MASK_K": ns["MASK_K"],
        "mask": cache_contents(ns["mask"]),
        "ramp": cache_contents(ns["ramp"]),
        "WV": {k: val(v) for k, v in sorted(ns["WV"].items())},
        "WS": sorted((val(v) for v in list(ns["WS"])), key=_order),
        "fm": {k: val(v) for k, v in list(ns["fm"].named_parameters()) + list(ns["fm"].named_buffers())},
        "tensor attributes": {k: val(dict(vars(t))) for k, t in (("m.w", ns["m"].w), ("m.buf", ns["m"].buf),
                                                                ("fm.lin.weight", ns["fm"].lin.weight),
                                                                ("fm.scale", ns["fm"].scale))},
        "calls": calls_snapshot(ns),
    }


def calls_snapshot(ns: dict) -> dict:
    """What a call runs (gen_state.CALLS_SOURCE): the module's and its block's plain attributes (`cnet.scale = 2`
    must reach `net`), their classes, the partials' keywords, the defaults and f's code by name."""
    net = ns["net"]
    plain = (int, float, bool, str, torch.Tensor)
    return {
        "net": {k: _val(v) for k, v in vars(net).items() if k not in _MODULE_OWN and isinstance(v, plain)},
        "net.blk": {k: _val(v) for k, v in vars(net.blk).items() if k not in _MODULE_OWN and isinstance(v, plain)},
        "classes": (type(net).__name__, type(net.blk).__name__),
        "keywords": [dict(p.keywords) for p in (ns["P1"], ns["P2"])],
        "defaults": [fn.__defaults__ for fn in [ns["run_k"]] + ns["LOOP"]],
        "code": ns["f"].__code__.co_name,
    }


def cache_contents(fn) -> tuple:
    """What a `functools.lru_cache` function holds: (currsize, [(key, value)] by key), read from the C
    cache's references (asking it would count hits and reorder it). Not its hit and miss counts: the
    compiled calls that reuse a graph do not ask the cache, and a trace may ask it once more than eager."""
    refs = gc.get_referents(fn)
    cache = next(r for r in refs if type(r) is dict and "__wrapped__" not in r)
    if fn.cache_info().maxsize is None:  # unbounded: key -> value
        items = list(cache.items())
    else:  # bounded: the links (key, value in LRU order) come before the dict mapping keys to links
        before = []
        for r in refs:
            if r is cache:
                break
            if not isinstance(r, type):
                before.append(r)
        items = list(zip(before[0::2], before[1::2]))
    return fn.cache_info().currsize, [(k, _val(v)) for k, v in sorted(items, key=lambda kv: repr(kv[0]))]


def _order(v):
    """A weak set's items in an order that does not depend on addresses."""
    t = v[0] if isinstance(v, tuple) else v
    try:
        return (tuple(t.shape), str(t.dtype), round(float(t.double().sum()), 3), repr(t.tolist()))
    except Exception:  # noqa: BLE001 - a trace-time value: find_leak reports it
        return ((), "", 0.0, "")


def _cell(fn, name: str) -> int:
    return fn.__code__.co_freevars.index(name)


def inputs(prog: StateProgram, step) -> list:
    g = torch.Generator().manual_seed(step.seed)
    return [torch.randn(step.a, prog.b, generator=g), torch.randn(step.a, prog.b, generator=g), step.n]


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - an exception is a result to compare
        return None, e


def _change(ns: dict, src: str) -> None:
    if src:
        try:
            exec(src, ns)
        except Exception:  # noqa: BLE001 - the same change fails the same way on both copies
            pass


def targets(ns: dict, prog: StateProgram) -> list:
    """What the harness compiles and calls each step, in order: `f`, or (a hidden program) its target's
    callables (gen_state.py CALLED: the module `net`, two partials, functions made in a loop)."""
    return list(ns["CALLED"][prog.target]) if prog.hidden else [ns["f"]]


def check_mode(prog: StateProgram, mode, steps=None) -> Failure | None:
    """The first failure of the compiled copy against the eager copy under `dynamic=mode`."""
    eager, comp = load_world(prog), load_world(prog)
    cf = [ds.compile(fn, dynamic=mode) for fn in targets(comp, prog)]
    if prog.hidden and prog.target == "net":  # the caller's writes through the compiled module (`cnet.scale = 2`)
        comp["cnet"] = cf[0]
    texts = [ln for st in prog.body for ln in st] + [st.change for st in (prog.steps if steps is None else steps)]
    weak = prog.hidden and any("WV" in t or "WS" in t for t in texts)  # gc.collect() before reading them
    if weak:  # collect only what the calls make: a full collection of a long run's heap took seconds a call
        gc.freeze()
    try:
        return _check_steps(prog, mode, eager, comp, cf, weak, prog.steps if steps is None else steps)
    finally:
        if weak:
            gc.unfreeze()


def _check_steps(prog, mode, eager, comp, cfs, weak, steps) -> Failure | None:
    for i, step in enumerate(steps):
        _change(eager, step.change)
        _change(comp, step.change)
        for fn, cf in zip(targets(eager, prog), cfs):  # each target in turn: its results, then the state
            f = _check_call(prog, mode, eager, comp, fn, cf, weak, step, i)
            if f is not None:
                return None if f == "raised" else f
    return None


def _check_call(prog, mode, eager, comp, fn, cf, weak, step, i):
    """The failure of one call of a target, "raised" when both raised alike (the run ends), or None."""
    wargs = inputs(prog, step) + [eager["cfg"], eager["acc"]]  # s and acc: the same objects every call
    gargs = inputs(prog, step) + [comp["cfg"], comp["acc"]]
    want, werr = _run(fn, wargs)
    got, gerr = _run(cf, gargs)
    if gerr is not None and werr is None:
        return Failure("crash", mode, i, f"{type(gerr).__name__}: {gerr}", type(gerr).__name__)
    if gerr is None and werr is not None:
        return Failure("noraise", mode, i, f"eager raised {type(werr).__name__}: {werr}", type(werr).__name__)
    if gerr is not None:
        if type(gerr) is not type(werr):
            return Failure("exc-type", mode, i, f"{type(gerr).__name__}: {gerr} (eager: {type(werr).__name__}: "
                           f"{werr})", f"{type(werr).__name__}->{type(gerr).__name__}")
        return "raised"
    if weak:  # what the weak containers hold: the tensors still referenced after the call
        gc.collect()
    try:
        state, eager_state = snapshot(comp), snapshot(eager)
    except Exception as e:  # noqa: BLE001 - state the compiled call left unreadable
        return Failure("wrong", mode, i, f"state unreadable: {type(e).__name__}: {e}")
    leak = find_leak(got) or find_leak(state, "state")
    if leak:
        return Failure("leak", mode, i, leak)
    d = (difference(want, got) or difference(wargs[:3], gargs[:3], "inputs")
         or difference(eager_state, state, "state"))
    return Failure("wrong", mode, i, d) if d else None


def check_state_program(prog: StateProgram, modes=MODES, stats=None, backend: str | None = None) -> list:
    with warnings.catch_warnings(), ds.config.patch(pgo=False, **backend_config(backend)):
        warnings.simplefilter("ignore")
        failures = []
        for mode in modes:
            f = limited(lambda: check_mode(prog, mode), mode, len(prog.steps) - 1)
            if stats is not None:
                stats["calls"] += len(prog.steps) if f is None else f.call + 1
            if f is not None:
                f.program, f.calls, f.backend = prog, prog.steps, ds.config.backend
                failures.append(f)
        return failures


# ------------------------------------------------------------------ reducing and writing out
def reduce_state(f: Failure, budget_s: float = 20.0) -> Failure:
    """Drop steps after the failing one, then statements, returns, changes and earlier steps, each
    kept dropped only if the program still fails the same way."""
    deadline = time.monotonic() + budget_s
    prog = copy.deepcopy(f.program)
    prog.steps = prog.steps[: f.call + 1]
    best = f

    def fails(p) -> Failure | None:
        if time.monotonic() > deadline:
            return None
        try:
            compile(p.source(), "<reduced>", "exec")
        except SyntaxError:
            return None
        for g in check_state_program(p, modes=(f.mode,), backend=f.backend or None):
            if g.signature() == f.signature():
                return g
        return None

    for field_, keep_one in (("steps", True), ("body", False), ("ret", True), ("steps", True)):
        i = 0
        while i < len(getattr(prog, field_)):
            items = getattr(prog, field_)
            if keep_one and len(items) == 1:
                break
            trial = copy.deepcopy(prog)
            del getattr(trial, field_)[i]
            g = fails(trial)
            if g is not None:
                prog, best = trial, g
            else:
                i += 1
    for i, st in enumerate(prog.steps):  # a change that does not matter
        if st.change:
            trial = copy.deepcopy(prog)
            trial.steps[i].change = ""
            g = fails(trial)
            if g is not None:
                prog, best = trial, g
    best.program, best.calls = prog, prog.steps
    return best


def script(f: Failure) -> str:
    """A standalone reproduction (run from the project root): exits 1 while the failure is there."""
    p = f.program
    steps = ",\n    ".join(f"Step({s.change!r}, {s.a}, {s.n}, {s.seed})" for s in p.steps)
    return f'''"""dynashape Python-state fuzz failure: {f.headline()}"""
import sys

import dynashape as ds
from tests.fuzz.gen_state import StateProgram, Step
from tests.fuzz.state import check_state_program

PROGRAM = StateProgram({p.seed}, {p.b}, {p.start!r}, {p.body!r}, {p.ret!r}, [
    {steps},
]{", hidden=True" if p.hidden else ""}{f", target={p.target!r}" if p.target != "f" else ""})

if __name__ == "__main__":
    print(PROGRAM.source())
    fails = check_state_program(PROGRAM, modes=({f.mode!r},), backend={(f.backend or None)!r})
    for g in fails:
        print("BUG:", g.headline())
    if not fails:
        print("OK: the compiled copy matches the eager copy")
    sys.exit(1 if fails else 0)
'''


def fuzz_state(seed: int, seconds: float, report, *, out_dir=None, reduce_s=20.0, backends=("eager",), log=print,
               hidden=True, exclude=None):
    """Random state programs for `seconds` (with the hidden state unless `hidden=False`; no template
    matching the regular expression `exclude`); fills `report` (driver.Report)."""
    from .driver import key_of
    rng = random.Random(seed)
    stats = {"calls": 0}
    keys: dict = {}
    start = time.monotonic()
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    while time.monotonic() - start < seconds:
        prog = generate_state(rng.getrandbits(48), hidden=hidden, exclude=exclude)
        backend = backends[report.programs % len(backends)]
        report.backends[backend] = report.backends.get(backend, 0) + 1
        report.programs += 1
        for f in check_state_program(prog, stats=stats, backend=backend):
            report.failures += 1
            k = key_of(f)
            keys[k] = keys.get(k, 0) + 1
            if keys[k] > 1 or time.monotonic() - start > seconds:
                continue
            r = reduce_state(f, reduce_s)
            report.distinct[(k, len(report.distinct))] = [r, 1]
            log(f"reduced: {r.headline()}")
            if out_dir:
                with open(os.path.join(out_dir, f"{len(report.distinct):03d}-{r.kind}.py"), "w") as fh:
                    fh.write(script(r))
    for (k, _), entry in report.distinct.items():
        entry[1] = keys[k]
    report.calls = stats["calls"]
    report.seconds = report.fuzz_seconds = time.monotonic() - start
    return report
