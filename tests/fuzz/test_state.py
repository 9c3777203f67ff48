"""The Python-state fuzzer (gen_state.py, state.py) in the suite: a fixed seed, and checks that its
oracle sees a wrong write, a lost write and a trace-time value left in the state; then the hidden
state (`_` attributes, class attributes, slots, mutable defaults, lru_cache, weak containers): a
program of each family from a fixed seed, and the oracle's view of each.

`DYNASHAPE_FUZZ_STATE_SECONDS` sets the fixed-seed budget (default 15 s; 0 skips it), over the
programs without the hidden state; `DYNASHAPE_FUZZ_STATE_HIDDEN_SECONDS` the hidden state's (default
15 s); `make fuzz FUZZ_MODE=state` runs the loop (with the hidden state) with a random seed for longer.
"""
import functools
import os
import re

import pytest

import dynashape as ds
from tests.fuzz import state as fuzz_state
from tests.fuzz.driver import MIXED, Report
from tests.fuzz.gen_state import generate_state
from tests.fuzz.run import Failure
from tests.fuzz.state import check_state_program, reduce_state, script

STATE_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_STATE_SECONDS", "15"))
STATE_SEED = 20261127
HIDDEN_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_STATE_HIDDEN_SECONDS", "6"))
HIDDEN_FUZZ_SEED = 20261128
HIDDEN_SEED = 1000  # the family programs' first seed (test_a_program_of_each_hidden_family_...)
# templates over state with a known bug, left out of the hidden fixed-seed run until it is fixed (none now:
# the five the call families found on 2e7f96f are fixed, and their fixed programs below pass)
KNOWN_BUGS = None


@pytest.mark.skipif(STATE_BUDGET <= 0, reason="DYNASHAPE_FUZZ_STATE_SECONDS=0")
def test_random_programs_over_python_state_match_eager_results_and_state():
    rep = fuzz_state.fuzz_state(STATE_SEED, STATE_BUDGET, Report(STATE_SEED, mode="state"), reduce_s=4.0,
                                backends=MIXED, log=lambda m: None, hidden=False)  # the programs from before
    assert rep.programs > 0 and rep.calls > rep.programs
    if rep.failures:
        shown = "\n\n".join(script(f) for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (each a standalone script):\n\n{shown}",
                    pytrace=False)


@pytest.mark.skipif(HIDDEN_BUDGET <= 0, reason="DYNASHAPE_FUZZ_STATE_HIDDEN_SECONDS=0")
def test_random_programs_over_hidden_state_match_eager_results_and_state():
    """The fuzz loop's programs: `_` attributes, class attributes, slots, mutable defaults, lru_cache
    functions and weak containers too (gen_state.py hidden=True), the known bugs' templates left out."""
    rep = fuzz_state.fuzz_state(HIDDEN_FUZZ_SEED, HIDDEN_BUDGET, Report(HIDDEN_FUZZ_SEED, mode="state"),
                                reduce_s=4.0, backends=MIXED, log=lambda m: None, exclude=KNOWN_BUGS)
    assert rep.programs > 0 and rep.calls > rep.programs
    if rep.failures:
        shown = "\n\n".join(script(f) for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `python -m tests.fuzz --mode "
                    f"state --seed {HIDDEN_FUZZ_SEED}`):\n\n{shown}", pytrace=False)


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


# ---- the hidden state (gen_state.py hidden=True): `_` attributes, a class's attributes, slots, mutable
# defaults, lru_cache functions, weak containers

FAMILIES = {  # a family of the hidden templates: statements that write its state (regular expressions)
    "private attributes": r"pm\._kv\.append|= pm\(",  # (obj._n += 1 or pm._steps += 1 passed before the fix)
    "class attributes": r"co\.hist\.append|= co\(",  # (type(co).count += 1 alone passed before the fix)
    "slots": r"sl\.(n \+=|hist\.append|t =|extra =)",
    "f's mutable defaults": r"(?<![.\w])hist\.append|memo\[n\] =",
    "a helper's mutable default": r"remember\(|tally\(",
    "lru_cache": r"mask\(|ramp\(",
    "weak containers": r"WV\['\w'\] =|WS\.add",
}
HELPER_DEFAULTS = r"remember\(|tally\("  # a known bug: left out of the other families' programs


def _text(p):
    return "\n".join([ln for st in p.body for ln in st] + [s.change for s in p.steps])


@functools.lru_cache(maxsize=None)
def _family_programs(start=0):
    """For each family, the first hidden program from seed `start` on (one not taken by another family)
    whose statements write its state outside a branch and whose first call runs eagerly; none that
    draws from a generator or a count (every call of those runs eagerly: nothing compiled to compare),
    and but for the helpers' family none that calls a helper with a mutable default (a known bug)."""
    found = {}
    for s in range(start, start + 1000):
        for exclude in (HELPER_DEFAULTS, None):
            p = generate_state(s, hidden=True, exclude=exclude)
            top = "\n".join(ln for st in p.body for ln in st if not ln.startswith(" "))
            if "next(" in _text(p):
                continue
            for fam, pattern in FAMILIES.items():
                if fam in found or (exclude is None) != (fam == "a helper's mutable default"):
                    continue
                if re.search(pattern, top) and _first_call_runs(p):
                    found[fam] = p
                    break
        if len(found) == len(FAMILIES):
            return found
    raise AssertionError(f"no generated program for {set(FAMILIES) - set(found)}")


def _first_call_runs(p):
    w = fuzz_state.load_world(p)
    _, err = fuzz_state._run(w["f"], fuzz_state.inputs(p, p.steps[0]) + [w["cfg"], w["acc"]])
    return err is None


def test_hidden_programs_use_every_family_and_generate_state_s_default_programs_have_none():
    progs = [generate_state(s, hidden=True) for s in range(60)]
    text = "\n".join(_text(p) for p in progs)
    for pattern in FAMILIES.values():
        assert re.search(pattern, text), pattern
    for needle in ("obj._n += 1", "type(co).count += 1", "co.hist.append(", "sl.n += 1", "hist.append(", "mask(",
                   "cache_clear()", "MASK_K = ", "WV['y'] = ", "WS.add("):
        assert needle in text, needle
    for p in progs[:20]:
        compile(p.source(), "<hidden>", "exec")
    plain = generate_state(0)
    assert not plain.hidden and "weakref" not in plain.source() and "hist=[]" not in plain.source()


KNOWN_FAMILY_BUGS: dict = {}  # xfail(strict): a fix turns them into passes, to be unmarked (none)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAMILY_BUGS[f]))
                                    if f in KNOWN_FAMILY_BUGS else f for f in FAMILIES])
def test_a_program_of_each_hidden_family_compiled_matches_eager_results_and_state(family):
    """A fixed program per family (from the first seed from HIDDEN_SEED whose statements write its state),
    under dynamic=None (static, then automatic dynamic): results and the state after each call (counts,
    lists, the caches' contents, the weak containers') equal eager's, with no trace-time value left in them."""
    fails = check_state_program(_family_programs(HIDDEN_SEED)[family], modes=(None,), backend="eager")
    assert not fails, script(fails[0])


def _a_hidden_program():
    """A hidden program compiling `f` whose first two calls run eagerly, for the oracle tests."""
    for s in range(200):
        p = generate_state(s, hidden=True, n_steps=2)
        if p.target == "f" and _first_call_runs(p):
            return p
    raise AssertionError("no hidden program runs")


@pytest.mark.parametrize("after, kind", [
    (lambda g: setattr(g["obj"], "_n", g["obj"]._n + 1), "wrong"),  # a private attribute
    (lambda g: g["pm"]._kv.append(ds.config), "leak"),  # a module's private list given a dynashape object
    (lambda g: setattr(g["Counted"], "count", g["Counted"].count + 1), "wrong"),  # the class's own attribute
    (lambda g: g["co"].hist.append(7), "wrong"),  # the class-level list through the instance
    (lambda g: g["sl"].hist.append(7), "wrong"),  # a slot
    (lambda g: g["f"].__defaults__[0].append(7), "wrong"),  # f's mutable default
    (lambda g: g["mask"](9), "wrong"),  # what the lru_cache holds
    (lambda g: g["WV"].__setitem__("z", g["GT"]), "wrong"),  # what the weak dictionary holds
])
def test_the_oracle_sees_hidden_state_that_differs_from_eager(monkeypatch, after, kind):
    monkeypatch.setattr(fuzz_state.ds, "compile", _Compiler(after))
    prog = _a_hidden_program()
    fails = check_state_program(prog, modes=(None,))
    assert fails and fails[0].kind == kind, [f.headline() for f in fails]
    text = script(fails[0])
    assert "hidden=True" in text
    ns = {"__name__": "repro"}
    exec(compile(text, "<script>", "exec"), ns)  # a standalone reproduction of the same program
    assert ns["PROGRAM"].source() == prog.source()


def test_the_cache_oracle_reads_an_lru_cache_without_asking_it():
    @functools.lru_cache(maxsize=2)
    def bounded(n):
        return [n]

    @functools.cache
    def unbounded(n):
        return (n,)
    for n in (3, 5, 3, 7):
        bounded(n)
        unbounded(n)
    before = bounded.cache_info()
    assert fuzz_state.cache_contents(bounded) == (2, [(3, [3]), (7, [7])])
    assert fuzz_state.cache_contents(unbounded) == (3, [(3, (3,)), (5, (5,)), (7, (7,))])
    assert bounded.cache_info() == before


def _flag_program(start=HIDDEN_SEED):
    """gen_state.py's hidden family of a parameter's and a buffer's own attributes: `fm`'s forward reads
    `getattr(self.lin.weight, "flag", 0)` and its buffer's `meta`, f reads `m.w`'s flag; the caller sets,
    changes (in place too) and deletes them between calls. The module, data and sizes of a generated
    hidden program, the statements and steps fixed."""
    from tests.fuzz.gen_state import Step
    p = generate_state(start, hidden=True)
    p.body = [["t0 = fm(x)"], ["t1 = t0 * (2 if getattr(m.w, 'flag', 0) else 1)"]]
    p.ret = ["t1"]
    changes = ["", "fm.lin.weight.flag = 1", "", "m.w.flag = 2.5", "fm.scale.meta = {'k': [3]}",
               "fm.scale.meta['k'][0] = 4", "del fm.lin.weight.flag", "vars(m.w).pop('flag', None)", ""]
    p.steps = [Step(c, a, 1, 100 + i) for i, (c, a) in enumerate(zip(changes, [3, 3, 4, 4, 3, 5, 5, 3, 4]))]
    return p


@pytest.mark.filterwarnings("ignore")
def test_a_parameter_s_own_attributes_read_in_forward_follow_the_caller_s_changes():
    """Before the fix (d75e1c0) the attribute read in forward was baked: set after the first call, the
    compiled copy kept the trace's branch."""
    fails = check_state_program(_flag_program(), modes=(None,), backend="eager")
    assert not fails, script(fails[0])


def test_hidden_programs_read_and_change_parameters_own_attributes():
    progs = [generate_state(s, hidden=True) for s in range(60)]
    text = "\n".join(_text(p) for p in progs)
    for needle in ("fm(", "getattr(m.w, 'flag', 0)", "fm.lin.weight.flag = ", "del fm.lin.weight.flag", "fm.scale.meta"):
        assert needle in text, needle


# ---- what a call runs (gen_state.py CALLS_SOURCE and the program's `target`): the caller changes, between
# calls, the module's forward and class, a user class's methods, a partial's keywords, defaults left out,
# a function's code, and writes through the compiled module

CALL_FAMILIES = {  # family: (target, f's statements, returns, the caller's changes before each call)
    "a module's forward and class": ("net", [["t0 = x * G + y"], ["t1 = net.blk(t0)"]], ["t1"], [
        "", "net.forward = types.MethodType(forward_alt, net)", "net.forward = functools.partial(forward_alt, net)",
        "vars(net).pop('forward', None)", "net.__class__ = Net2", "net.__class__ = Net", "Net.forward = forward_alt",
        "Net.forward = NET_FORWARD", "Block.act = act_alt", ""]),
    "a submodule's class and a user class's methods": ("f", [["t0 = x * G + y"], ["t1 = net.blk(t0)"]], ["t1"], [
        "", "Block.act = act_alt", "Block.forward = block_forward_alt", "net.blk.__class__ = Block2",
        "Block.act = BLOCK_ACT", "net.blk.__class__ = Block", ""]),
    "partials of one function": ("parts", [["t0 = x * G + y"]], ["t0", "CNT"], [
        "", "", "P2.keywords['shift'] = 5.0", "P1.keywords['shift'] = -2", "P2.keywords.pop('shift', None)", ""]),
    "defaults left out": ("loop", [["t0 = x * G + y"]], ["t0"], [
        "", "LOOP[0].__defaults__ = (5,)", "LOOP[1].__defaults__ = (-1,)", "LOOP[1].__defaults__ = (7,)",
        "LOOP[1].__defaults__ = (-0.0,)", "LOOP[0].__defaults__ = (0.5,)", ""]),
    "a function's code replaced": ("f", [["t0 = x * G + y"], ["CNT += 1"]], ["t0", "CNT"], [
        "", "f.__code__ = f_alt.__code__", "", "f.__code__ = F_CODE", ""]),
    "writes through the compiled module": ("net", [["t0 = x * net.scale + y"]], ["t0"], [
        "", "cnet.scale = 5.0", "cnet.tag = 3", "cnet.eval()", "net.mode = cnet.training", "cnet.train()",
        "net.mode = cnet.training", ""]),
    "the module's mode read through the compiled module": ("net", [["t0 = x + y"]], ["t0"], [
        "", "net.eval()", "net.mode = cnet.training", ""]),
    "a helper's code replaced": ("loop", [["t0 = x * G + y"]], ["t0"], [
        "", "f.__code__ = f_alt.__code__", "", "f.__code__ = F_CODE", ""]),
    "a partial's function's default left out": ("parts", [["t0 = x * G + y"]], ["t0"], [
        "", "run_k.__defaults__ = (1.0,)", "run_k.__defaults__ = (-0.0,)", ""]),
    "a class forward patched after the recompile limit": ("net", [["hist.append(n)"], ["t0 = x + len(hist)"]],
                                                          ["t0"], [""] * 10 + ["Net.forward = forward_alt", ""]),
    "a partial's keyword changed to an equal number": ("parts", [["t0 = x * G + y"]], ["t0"], [
        "", "P2.keywords['shift'] = -0.0", "", "P2.keywords['shift'] = 0", ""]),
}
KNOWN_CALL_BUGS: dict = {}  # xfail(strict) reasons of families with a known bug (none now; on 2e7f96f: the
# wrapper's training, a helper's code replaced, a partial's function's default, a class forward past the
# recompile limit, a partial's keyword changed to an equal number of another type or sign)


def _call_program(family, start=HIDDEN_SEED):
    """A fixed program of a call family: the module, data and sizes of a generated hidden program, the
    target, statements and steps fixed."""
    from tests.fuzz.gen_state import Step
    target, body, ret, changes = CALL_FAMILIES[family]
    p = generate_state(start, hidden=True)
    p.target, p.body, p.ret = target, body, ret
    p.steps = [Step(c, 3, 1, 200 + i) for i, c in enumerate(changes)]  # one size: a stale entry is not retraced
    return p


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("family", [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CALL_BUGS[f])) if f in KNOWN_CALL_BUGS else f
    for f in CALL_FAMILIES])
def test_a_program_of_each_call_family_compiled_matches_eager_results_and_state(family):
    """Before the fix (823985b) the compiled module ran its class's forward as of `ds.compile` and kept a
    patched submodule's traced code, a compiled partial ran another partial's entries and missed its
    keywords, a default left out was baked, a replaced `__code__` kept the old graph, and `cnet.tag = 3`
    stayed on the wrapper (`cnet.training` True for an eval module)."""
    fails = check_state_program(_call_program(family), modes=(None, True), backend="eager")
    assert not fails, script(fails[0])


def test_hidden_programs_compile_every_target_and_draw_its_changes():
    progs = [generate_state(s, hidden=True) for s in range(80)]
    assert {p.target for p in progs} == {"f", "net", "parts", "loop"}
    text = "\n".join(_text(p) for p in progs)
    for needle in ("net.forward = ", "net.__class__ = Net2", "Block.act = act_alt", "P2.keywords['shift'] = ",
                   "LOOP[1].__defaults__ = ", "f.__code__ = f_alt.__code__", "cnet.", "net.blk("):
        assert needle in text, needle
    p = next(p for p in progs if p.target == "net")
    ns = {"__name__": "repro"}  # a reduced script compiles the same target
    exec(compile(script(Failure("wrong", None, 0, "", program=p, calls=p.steps)), "<script>", "exec"), ns)
    assert ns["PROGRAM"].target == "net" and ns["PROGRAM"].source() == p.source()
