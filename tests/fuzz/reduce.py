"""Shrinking a failing program to a minimal one that fails the same way, and writing it out.

"The same way" is the failure's signature: its class and exception type(s),
under the mode it failed in. The reducer drops calls before the failing one,
statements (a dropped statement's name is replaced by its main operand),
`if` blocks (kept to one branch), `try:` blocks (kept to their body or their handler's), returned values, unused inputs, constants,
and shrinks the failing call's sizes, each step kept only if the program still
fails with the same signature. A training failure keeps its backend and tries the
plain phase, simpler input grads (a leaf for `leaf * 1`) and grad-mode blocks unwrapped.
"""
from __future__ import annotations

import copy
import inspect
import os
import re
import time

import dynashape as ds

from .gen import SIZES, Program, Stmt
from .run import Failure, check_program
from .train import check_train_program


def recheck(f: Failure, prog: Program, calls: list) -> list:
    """The failures of `prog` on `calls` under `f`'s mode, backend and (training) phase."""
    if f.phase:
        return check_train_program(prog, calls, f.phase, modes=(f.mode,), backend=f.backend or None)
    return check_program(prog, calls, modes=(f.mode,), backend=f.backend or None)


class Reducer:
    def __init__(self, failure: Failure, budget_s: float = 20.0):
        self.sig = failure.signature()
        self.mode = failure.mode
        self.case = copy.copy(failure)  # mode, phase and backend of the checks
        self.prog = copy.deepcopy(failure.program)
        self.calls = copy.deepcopy(failure.calls[: failure.call + 1])
        self.deadline = time.monotonic() + budget_s
        self.last: Failure | None = failure
        self.runs = 0

    def fails(self, prog: Program, calls: list) -> bool:
        if time.monotonic() > self.deadline:
            return False
        self.runs += 1
        try:
            compile(prog.source(), "<reduced>", "exec")
        except SyntaxError:
            return False
        if not _defined_before_use(prog):
            return False
        for f in recheck(self.case, prog, calls):
            if f.signature() == self.sig:
                self.last = f
                return True
        return False

    def try_(self, prog, calls) -> bool:
        if self.fails(prog, calls):
            self.prog, self.calls = prog, calls
            return True
        return False

    def run(self) -> Failure:
        if not self.fails(self.prog, self.calls):  # flaky: keep the original
            return self.last
        self._calls()
        self._phase()
        for _ in range(3):
            before = self.prog.source()
            self._statements()
            self._branches()
            self._blocks()
            self._grads()
            self._returns()
            self._inputs()
            self._constants()
            if self.prog.source() == before:
                break
        self._calls()
        self._sizes()
        self._calls()  # fewer sizes can make earlier calls unnecessary
        f = self.last
        return Failure(f.kind, f.mode, f.call, f.message, f.exc, self.prog, self.calls, self.case.phase,
                       self.case.backend)

    # -- steps
    def _calls(self):
        if len(self.calls) > 1 and self.try_(self.prog, self.calls[-1:]):
            return
        i = 0
        while i < len(self.calls) - 1:
            if not self.try_(self.prog, self.calls[:i] + self.calls[i + 1:]):
                i += 1

    def _without(self, prog: Program, idx: set) -> Program:
        p = copy.deepcopy(prog)
        body, ret = [], list(p.ret)
        subst = {}
        for i, s in enumerate(p.body):
            if i in idx:
                subst[s.out] = s.src or "2"
                continue
            body.append(Stmt([_sub(ln, subst) for ln in s.lines], s.out, s.src and _sub(s.src, subst)))
        ret = [_sub(r, subst) for r in ret]
        p.body, p.ret = body, list(dict.fromkeys(ret))
        return p

    def _statements(self):
        n = len(self.prog.body)
        chunk = max(n // 2, 1)
        while chunk >= 1:
            i = len(self.prog.body) - chunk
            while i >= 0:
                if not self.try_(self._without(self.prog, set(range(i, i + chunk))), self.calls):
                    i -= chunk
                else:
                    i = min(i, len(self.prog.body) - chunk)
            chunk //= 2

    def _branches(self):
        """`if` blocks kept to one branch; `try:` blocks (and `contextlib.suppress` ones) to their body
        (dedented) or their handler's."""
        for i in range(len(self.prog.body)):
            s = self.prog.body[i]
            if s.lines[0].startswith("if "):
                options = [[s.lines[1].strip()], [s.lines[3].strip()]]
            elif s.lines[0] == "try:":
                h = next(j for j, ln in enumerate(s.lines) if ln.startswith("except"))
                options = [[ln[4:] for ln in s.lines[1:h]], [ln[4:] for ln in s.lines[h + 1:]]]
            elif len(s.lines) > 1 and s.lines[1].startswith("with contextlib.suppress("):
                options = [[ln[4:] for ln in s.lines[2:]], s.lines[:1]]
            else:
                continue
            for keep in options:
                p = copy.deepcopy(self.prog)
                p.body[i] = Stmt(keep, s.out, s.src)
                if self.try_(p, self.calls):
                    break

    def _phase(self):
        """A training failure that the plain phase shows too is reported with it."""
        if self.case.phase not in ("", "plain"):
            phase = self.case.phase
            self.case.phase = "plain"
            if not self.fails(self.prog, self.calls):
                self.case.phase = phase

    def _blocks(self):
        """Grad-mode blocks: the body alone (`with ...:` dedented, `torch.set_grad_enabled(...)` calls dropped)."""
        for i in range(len(self.prog.body)):
            s = self.prog.body[i]
            if s.lines[0].startswith("with "):
                lines = [ln[4:] for ln in s.lines[1:]]
            elif any(ln.startswith("torch.set_grad_enabled(") for ln in s.lines):
                lines = [ln for ln in s.lines if not ln.startswith(("torch.set_grad_enabled(", "prev = "))]
            else:
                continue
            p = copy.deepcopy(self.prog)
            p.body[i] = Stmt(lines, s.out, s.src)
            self.try_(p, self.calls)

    def _grads(self):
        """Training inputs: a leaf rather than `leaf * 1` / `leaf.clone()`, then no grad at all."""
        for k, i in enumerate(self.prog.inputs):
            for simpler in ("leaf", ""):
                if i.kind == "float" and i.grad and i.grad != simpler:
                    p = copy.deepcopy(self.prog)
                    p.inputs[k].grad = simpler
                    if self.try_(p, self.calls):
                        break

    def _returns(self):
        i = 0
        while i < len(self.prog.ret) and len(self.prog.ret) > 1:
            p = copy.deepcopy(self.prog)
            del p.ret[i]
            if not self.try_(p, self.calls):
                i += 1

    def _inputs(self):
        p = copy.deepcopy(self.prog)
        p.inputs = [i for i in p.inputs if p.uses(i.name)]
        if len(p.inputs) < len(self.prog.inputs):
            self.try_(p, self.calls)

    def _constants(self):
        for _ in range(30):
            for i, s in enumerate(self.prog.body):
                changed = False
                for j, ln in enumerate(s.lines):
                    for m in re.finditer(r"(?<![\w.])(\d+\.\d+|[2-9]\d*)(?![\w.])", ln):
                        new = "1.0" if "." in m.group() else "1"
                        p = copy.deepcopy(self.prog)
                        p.body[i].lines[j] = ln[:m.start()] + new + ln[m.end():]
                        if self.try_(p, self.calls):
                            changed = True
                            break
                    if changed:
                        break
                if changed:
                    break
            else:
                return

    def _sizes(self):
        used = {d for i in self.prog.inputs for d in i.dims if isinstance(d, str)}
        for k in range(len(self.calls)):
            for d in sorted(used):
                for v in sorted(set(SIZES)):
                    if v >= self.calls[k].dims[d]:
                        break
                    calls = copy.deepcopy(self.calls)
                    calls[k].dims[d] = v
                    if self.try_(self.prog, calls):
                        break
            if self.calls[k].alias:
                calls = copy.deepcopy(self.calls)
                calls[k].alias = False
                self.try_(self.prog, calls)
            if str(self.calls[k].a) != "1.5":
                calls = copy.deepcopy(self.calls)
                calls[k].a = 1.5
                self.try_(self.prog, calls)
            for v in (0, 1, 2):
                if abs(v) < abs(self.calls[k].n):
                    calls = copy.deepcopy(self.calls)
                    calls[k].n = v
                    if self.try_(self.prog, calls):
                        break


def _defined_before_use(prog: Program) -> bool:
    """Every `v3`/`s4` is assigned before it is read: a reduction must not lean on a NameError."""
    defined = {i.name for i in prog.inputs}
    for s in prog.body:
        read = {n for ln in s.lines for n in re.findall(r"\b[vsp]\d+\b", ln)} - {s.out}  # it may use its own output
        if not read <= defined:
            return False
        defined.add(s.out)
    return all(n in defined for r in prog.ret for n in re.findall(r"\b[vsp]\d+\b", r)) and \
        all(i.name in defined for i in prog.inputs)


def _sub(text: str, subst: dict) -> str:
    for old, new in subst.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def reduce(failure: Failure, budget_s: float = 20.0) -> Failure:
    return Reducer(failure, budget_s).run()


def load_script(path: str) -> Failure:
    """The case of a script written by `script()` (program, calls, mode, phase, backend), to re-run or
    re-reduce it: `recheck(case, case.program, case.calls)`."""
    from .gen import Call, Input
    text = open(path).read()
    ns: dict = {}
    exec(compile(text.replace('if __name__ == "__main__":', "if False:"), path, "exec"), ns)
    head, rest = text.split("\ndef f(", 1)
    lines = [ln[4:] for ln in rest.split("\n\nINPUTS")[0].split("\n")[1:] if ln.startswith("    ")]
    while lines and not lines[-1].startswith("return ("):  # the function's end: comments after it
        lines.pop()
    ret = lines.pop()[len("return ("):-1].rstrip(",")
    defined = [inp[0] for inp in ns["INPUTS"]]
    body = _statements(lines, ns["STATEMENTS"]) if "STATEMENTS" in ns else _parse_statements(lines)
    for stmt in body:
        stmt.src = next((n for n in re.findall(r"\b[a-z]\w*\b", stmt.lines[-1].split("=", 1)[-1])
                         if n in defined and not n.startswith("s")), None)
        defined.append(stmt.out)
    prog = Program([Input(n, k, tuple(d), *grad) for n, k, d, *grad in ns["INPUTS"]], body, _split_top(ret))
    prelude = re.search(r"^class \w+\(torch\.autograd\.Function\):.*", head, re.S | re.M)  # training programs
    prog.prelude = prelude.group(0).rstrip() + "\n" if prelude else ""
    calls = [Call(dict(d), n, seed, alias, float(a)) for d, n, seed, alias, a in ns["CALLS"]]
    return Failure("", ns["MODE"], len(calls) - 1, "", program=prog, calls=calls, phase=ns.get("PHASE", ""),
                   backend=ns.get("BACKEND", "eager"))  # scripts written before the backend was recorded: eager


def _statements(lines: list, shape: list) -> list:
    """Statements from their (name, number of lines), as training scripts record them."""
    body, i = [], 0
    for out, k in shape:
        body.append(Stmt(lines[i:i + k], out))
        i += k
    return body


def _parse_statements(lines: list) -> list:
    """Statements of an inference script: `if` blocks are four lines, a `try:` block runs to the end of
    its handler, `v.add_(1)` goes with `v = ...`."""
    body: list = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("if "):
            body.append(Stmt(lines[i:i + 4], lines[i + 1].split("=")[0].strip()))
            i += 4
        elif ln == "try:":
            j = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("except"))
            j += 1
            while j < len(lines) and lines[j].startswith(" "):
                j += 1
            body.append(Stmt(lines[i:j], lines[j - 1].split("=")[0].strip()))
            i = j
        elif body and ln.startswith(body[-1].out + "."):
            body[-1].lines.append(ln)
            i += 1
        else:
            body.append(Stmt([ln], ln.split("=")[0].strip()))
            i += 1
    return body


def _split_top(text: str) -> list:
    """`a, b.size(0, 1), c` -> three expressions (commas inside brackets stay)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


# ------------------------------------------------------------------ standalone scripts
_SCRIPT = '''"""dynashape fuzz finding: {headline}

Exit status 1 while the failure is there, 0 when fixed. Run: python {{this file}}
"""
import contextlib
import math
import os
import sys
import warnings

DEVICE = {device!r}  # where the fuzz run found it: cpu, cuda, or interpret (Triton's interpreter on the CPU)
if DEVICE == "interpret":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dynashape as ds  # noqa: E402
from dynashape.symbolic.symtypes import SymBase  # noqa: E402
from dynashape.tracing.fake import FakeTensor  # noqa: E402

if DEVICE == "interpret":
    ds.config.triton = "cpu"  # every fused region as a Triton kernel

{body}

INPUTS = {inputs!r}  # (name, kind, dims): kind float / mask / int
CALLS = {calls}  # (sizes of the dim variables, the int argument, data seed, y is x, the float argument)
MODE = {mode!r}  # dynashape.compile(..., dynamic=MODE)
BACKEND = {backend!r}  # dynashape.compile(..., backend=BACKEND)


_DEV = "cuda" if DEVICE == "cuda" else "cpu"  # the data drawn on the CPU, as the fuzzer does


def make_inputs(dims, n, seed, alias=False, a=1.5):
    g = torch.Generator().manual_seed(seed)
    out = []
    for name, kind, shape in INPUTS:
        shape = [dims[d] if isinstance(d, str) else d for d in shape]
        if kind == "float":
            out.append(torch.randn(shape, generator=g).to(_DEV))
        elif kind == "mask":
            out.append((torch.rand(shape, generator=g) > 0.5).to(_DEV))
        elif kind == "scalar":
            out.append(float(a))
        else:
            out.append(n)
    if alias and len(out) > 1 and isinstance(out[1], torch.Tensor) and out[1].shape == out[0].shape:
        out[1] = out[0]  # the same tensor for two arguments
    return out


def run(fn, args):
    try:
        return fn(*args), None
    except Exception as e:
        return None, e


def same(a, b):
    if type(a) is not type(b) or isinstance(b, (FakeTensor, SymBase)):
        return False
    if isinstance(a, torch.Tensor):
        try:
            torch.testing.assert_close(b, a, equal_nan=True, rtol=1e-4, atol=1e-5)
            return True
        except AssertionError:
            return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def main():
    warnings.simplefilter("ignore")
    ds.config.pgo = False  # no profile from an earlier run: each run starts fresh
    ds.config.fused_sync = True  # backend="fused": the kernels run from the first call
    cf = ds.compile({name}, dynamic=MODE, backend=BACKEND)
    for i, (dims, n, seed, alias, a) in enumerate(CALLS):
        want, werr = run({name}, make_inputs(dims, n, seed, alias, a))
        args = make_inputs(dims, n, seed, alias, a)
        got, gerr = run(cf, args)
        where = f"call {{i}} (sizes {{dims}}, n={{n}}, a={{a}}{{', y is x' if alias else ''}})"
        if werr is None and gerr is not None:
            print(f"BUG: {{where}}: compiled raised {{type(gerr).__name__}}: {{gerr}}; eager returned")
            return 1
        if werr is not None and gerr is None:
            print(f"BUG: {{where}}: eager raised {{type(werr).__name__}}: {{werr}}; compiled returned {{got!r}}")
            return 1
        if werr is not None and type(werr) is not type(gerr):
            print(f"BUG: {{where}}: compiled raised {{type(gerr).__name__}}: {{gerr}}; "
                  f"eager raised {{type(werr).__name__}}: {{werr}}")
            return 1
        if werr is None and (not same(want, got) or not same(make_inputs_after(dims, n, seed, alias, a), args)):
            print(f"BUG: {{where}}: compiled returned {{got!r}}; eager returned {{want!r}}")
            return 1
    print("OK: compiled matches eager on every call")
    return 0


def make_inputs_after(dims, n, seed, alias, a):
    args = make_inputs(dims, n, seed, alias, a)
    run({name}, args)
    return args


if __name__ == "__main__":
    sys.exit(main())
'''


def script(f: Failure) -> str:
    p = f.program
    src = p.source()
    body = src.split("\n\n\n", 1)[1].rstrip() if "\n\n\n" in src else src
    inputs = [(i.name, i.kind, tuple(i.dims)) for i in p.inputs]
    used = {d for i in p.inputs for d in i.dims if isinstance(d, str)}
    sizes = [{d: v for d, v in c.dims.items() if d in used} for c in f.calls]
    calls = "[" + ", ".join(f"({s!r}, {c.n}, {c.seed}, {c.alias}, {str(c.a)!r})"  # the float as text: 'inf', 'nan'
                            for s, c in zip(sizes, f.calls)) + "]"
    if f.phase:
        return _train_script(f, body, used)
    return _SCRIPT.format(headline=f.headline().replace('"""', "'''"), body=body, inputs=inputs, calls=calls,
                          mode=f.mode, name=p.name, backend=f.backend or ds.config.backend, device=_device())


def _device() -> str:
    """Where this run puts its inputs and kernels (`python -m tests.fuzz --device`)."""
    from .phases import DEVICE
    if DEVICE[0] == "cuda":
        return "cuda"
    return "interpret" if ds.config.triton == "cpu" and os.environ.get("TRITON_INTERPRET") == "1" else "cpu"


def _train_script(f: Failure, body: str, used: set) -> str:
    from . import oracle, phases
    harness = inspect.getsource(oracle).rstrip() + "\n\n\n" + "\n".join(
        ln for ln in inspect.getsource(phases).splitlines() if not ln.startswith("from ."))
    p = f.program
    calls = "[" + ", ".join(f"({ {d: v for d, v in c.dims.items() if d in used}!r}, {c.n}, {c.seed}, {c.alias}, "
                            f"{str(c.a)!r})" for c in f.calls) + "]"  # the float as text: 'inf', 'nan'
    return _TRAIN_SCRIPT.format(
        headline=f.headline().replace('"""', "'''"), phase=f.phase, phase_doc=phases.PHASES[f.phase][1],
        body=body, inputs=[(i.name, i.kind, tuple(i.dims), i.grad) for i in p.inputs], calls=calls, mode=f.mode,
        backend=f.backend or ds.config.backend, statements=[(s.out, len(s.lines)) for s in p.body], name=p.name,
        harness=harness.rstrip(), device=_device())


_TRAIN_SCRIPT = '''"""dynashape fuzz finding (training): {headline}

The call phase, {phase}: {phase_doc}.
Compared with eager: the outputs and their requires_grad / is_leaf / grad_fn, grad mode after the
call, the inputs after it, every leaf's .grad after each backward (the loss: the float outputs
times fixed random weights, summed). Exit status 1 while the failure is there, 0 when fixed.
Run: python {{this file}}
"""
import os
import sys
import warnings

_DEVICE = {device!r}  # where the fuzz run found it: cpu, cuda, or interpret (Triton's interpreter on the CPU)
if _DEVICE == "interpret":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dynashape as ds  # noqa: E402

if _DEVICE == "interpret":
    ds.config.triton = "cpu"  # every fused region as a Triton kernel

{body}

# (name, kind, dims, grad): grad "leaf" a leaf that requires grad; "mul" / "clone" a non-leaf
# `leaf * 1` / `leaf.clone()` built before the call; "" no grad
INPUTS = {inputs!r}
CALLS = {calls}  # (sizes of the dim variables, the int argument, data seed, y is x, the float argument)
MODE = {mode!r}  # dynashape.compile(..., dynamic=MODE)
BACKEND = {backend!r}  # dynashape.compile(..., backend=BACKEND)
PHASE = {phase!r}
STATEMENTS = {statements!r}  # (name, lines) of each statement of {name}: for `python -m tests.fuzz --reduce`


# ---- the fuzzer's harness, verbatim: tests/fuzz/oracle.py, then tests/fuzz/phases.py
{harness}


# ---- the check
def main():
    if _DEVICE == "cuda":
        DEVICE[0] = "cuda"
    warnings.simplefilter("ignore")
    ds.config.pgo = False  # no profile from an earlier run: each run starts fresh
    ds.config.fused_sync = True  # backend="fused": the kernels are built before the first call returns
    cf = ds.compile({name}, dynamic=MODE, backend=BACKEND)
    done = 0
    for group in groups(CALLS, PHASE):
        done += len(group)
        want = run_phase({name}, INPUTS, group, PHASE)
        got = run_phase(cf, INPUTS, group, PHASE)
        bad = compare(want, got, lambda: run_phase({name}, INPUTS, group, PHASE, torch.float64),
                      lambda k: run_phase({name}, INPUTS, group, PHASE, perturb=k),
                      lambda: run_phase(cf, INPUTS, group, PHASE, torch.float64))
        if bad is not None:
            kind, exc, message = bad
            print(f"BUG ({{kind}}): call {{done - 1}} (sizes {{group[-1][0]}}), phase {{PHASE}}: {{message}}")
            return 1
    print(f"OK: compiled matches eager on every call (phase {{PHASE}})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
