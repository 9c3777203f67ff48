"""The Python-state fuzzer (gen_state.py, state.py) in the suite: a fixed seed, and checks that its
oracle sees a wrong write, a lost write and a trace-time value left in the state.

`DYNASHAPE_FUZZ_STATE_SECONDS` sets the fixed-seed budget (default 20 s; 0 skips it);
`make fuzz FUZZ_MODE=state` runs the same loop with a random seed for longer.
"""
import os

import pytest

import dynashape as ds
from tests.fuzz import state as fuzz_state
from tests.fuzz.driver import MIXED, Report
from tests.fuzz.gen_state import generate_state
from tests.fuzz.state import check_state_program, reduce_state, script

STATE_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_STATE_SECONDS", "20"))
STATE_SEED = 20261127


@pytest.mark.skipif(STATE_BUDGET <= 0, reason="DYNASHAPE_FUZZ_STATE_SECONDS=0")
def test_random_programs_over_python_state_match_eager_results_and_state():
    rep = fuzz_state.fuzz_state(STATE_SEED, STATE_BUDGET, Report(STATE_SEED, mode="state"), reduce_s=4.0,
                                backends=MIXED, log=lambda m: None)
    assert rep.programs > 0 and rep.calls > rep.programs
    if rep.failures:
        shown = "\n\n".join(script(f) for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz FUZZ_MODE=state "
                    f"FUZZ_SEED={STATE_SEED}`):\n\n{shown}", pytrace=False)


def _writing_program(seed=0):
    """A generated program whose body appends to the list (found by seed search, kept stable by checking)."""
    for s in range(seed, seed + 500):
        p = generate_state(s)
        if any("L.append(n)" in ln for st in p.body for ln in st):
            return p
    raise AssertionError("no generated program appends to L")


class _Compiler:
    """A stand-in for ds.compile whose compiled function runs the function, then does `after(globals)`."""

    def __init__(self, after):
        self.after = after

    def __call__(self, fn, dynamic=None):
        def run(*args):
            out = fn(*args)
            self.after(fn.__globals__)
            return out
        return run


@pytest.mark.parametrize("after, kind", [
    (lambda g: g["L"].append(99), "wrong"),  # a write eager does not make
    (lambda g: g["L"].pop(), "wrong"),  # a write lost
    (lambda g: g["D"].__setitem__("a", ds.config), "leak"),  # a dynashape object left behind
])
def test_the_oracle_sees_state_that_differs_from_eager(monkeypatch, after, kind):
    monkeypatch.setattr(fuzz_state.ds, "compile", _Compiler(after))
    prog = _writing_program()
    fails = check_state_program(prog, modes=(None,))
    assert fails and fails[0].kind == kind, [f.headline() for f in fails]
    r = reduce_state(fails[0], 5.0)
    assert r.kind == kind and len(r.program.body) <= len(prog.body)
    compile(script(r), "<script>", "exec")  # a standalone reproduction


def test_a_right_compiler_passes_the_same_program(monkeypatch):
    monkeypatch.setattr(fuzz_state.ds, "compile", _Compiler(lambda g: None))
    assert check_state_program(_writing_program(), modes=(None,)) == []
