"""The soundness fuzzer in the suite: random programs, compiled under every `dynamic=` mode, match eager.

`DYNASHAPE_FUZZ_SECONDS` scales the fixed-seed budget (default 60 s; 0 skips it).
`make fuzz` runs the same loop with a random seed for longer.
"""
import os

import pytest
import torch

from dynashape.symbolic import LocalSource, ShapeEnv
from tests.fuzz import run as fuzz_run
from tests.fuzz.driver import fuzz, key_of
from tests.fuzz.gen import REF_SIZES, Call, Input, Program, Stmt, generate, make_inputs
from tests.fuzz.reduce import reduce, script
from tests.fuzz.run import check_program, difference, leaks, load, random_calls

BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_SECONDS", "60"))
SEED = 20261123


@pytest.mark.skipif(BUDGET <= 0, reason="DYNASHAPE_FUZZ_SECONDS=0")
def test_random_programs_compiled_under_every_mode_match_eager():
    rep = fuzz(SEED, BUDGET, reduce_s=4.0, max_reduce=4, reserve_s=min(5.0, BUDGET / 4), log=lambda m: None)
    assert rep.programs > 0
    if rep.failures:
        shown = "\n\n".join(f"# {f.headline()}\n{f.program.source()}# calls (sizes, n): {_calls(f)}"
                            for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz "
                    f"FUZZ_SEED={SEED}`, scripts in fuzz-failures/):\n\n{shown}", pytrace=False)


def _calls(f):
    used = {d for i in f.program.inputs for d in i.dims if isinstance(d, str)}
    return [({d: v for d, v in c.dims.items() if d in used}, c.n) for c in f.calls]


# ------------------------------------------------------------------ the tool itself
@pytest.mark.filterwarnings("ignore")  # std() of one element and the like: programs may warn
def test_generated_programs_run_eagerly_on_the_sizes_they_were_generated_for():
    for seed in range(25):
        prog = generate(seed)
        assert 1 <= len(prog.body) <= 15
        fn = load(prog)
        fn(*make_inputs(prog.inputs, Call({d: REF_SIZES[i % 3 + 1] for i, d in enumerate("ABCD")}, 3, seed)))


def test_calls_cover_sizes_zero_one_and_primes():
    seen = set()
    for seed in range(20):
        for c in random_calls(seed, generate(seed), 20):
            seen.update(c.dims.values())
    assert {0, 1, 2, 3, 5, 7, 13} <= seen


def test_difference_sees_container_type_shape_dtype_values_and_float_sign():
    t = torch.ones(2, 3)
    assert difference(torch.Size([2]), (2,)) == "out: type tuple, eager Size"
    assert "shape" in difference(t, torch.ones(3, 2))
    assert "dtype" in difference(t, t.double())
    assert "values" in difference(t, t * 2)
    assert difference(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert difference(0.0, -0.0) is not None
    assert difference([t, 3], [t.clone(), 3]) is None


def test_leaks_finds_symbolic_values_in_nested_outputs():
    env = ShapeEnv()
    s = env.symint(5, LocalSource("x"), is_size=False)
    assert "symbolic" in leaks([1, (torch.ones(1), s)])
    assert leaks([1, (torch.ones(1),)]) is None


class _WrongCompile:
    """A stand-in compiler that is wrong when the first input has more than 4 rows."""

    def __call__(self, fn, dynamic=None):
        def run(*args):
            out = fn(*args)
            if args[0].size(0) > 4:
                return tuple(o + 1 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)
            return out
        return run


def test_a_wrong_compiler_is_caught_and_reduced_to_a_short_standalone_script(monkeypatch, tmp_path):
    monkeypatch.setattr(fuzz_run.ds, "compile", _WrongCompile())
    for seed in range(50):
        prog = generate(seed)
        calls = random_calls(seed, prog, 15)
        fails = [f for f in check_program(prog, calls, modes=(True,)) if f.kind == "wrong"]
        if fails and len(prog.body) >= 6:
            break
    else:
        pytest.skip("no candidate program")
    f = fails[0]
    r = reduce(f, budget_s=20)
    assert key_of(r)[0] == "wrong" and r.signature() == f.signature()
    assert len(r.program.body) < len(f.program.body) and len(r.calls) == 1
    path = tmp_path / "repro.py"
    path.write_text(script(r))
    compile(path.read_text(), str(path), "exec")  # a valid standalone script


class _ExactCompile:
    """A stand-in compiler that computes in float64 (rounded once at the end), plus `error`."""

    def __init__(self, error):
        self.error = error

    def __call__(self, fn, dynamic=None):
        def run(*args):
            torch.set_default_dtype(torch.float64)
            try:
                out = fn(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args])
            finally:
                torch.set_default_dtype(torch.float32)
            return tuple(o.float() + self.error for o in out)
        return run


def _cancelling_sum() -> tuple:
    # fuzz (fused, seed 13231123): an output that is ~0 by cancellation; the kernel summed in another
    # order and landed 1.2e-5 from eager (over atol), but nearer the float64 result than eager
    prog = Program([Input("x", "float", ("A", "D"))],
                   [Stmt(["v0 = x @ torch.eye(x.size(-1)) * 1000 + 3"], "v0")],  # a float32 factory too
                   ["(v0 - v0.mean(-1, keepdim=True)).sum(-1)"])
    return prog, [Call({"A": 4, "D": 300}, 0, 3)]


@pytest.mark.parametrize("error, caught", [(0.0, False), (1e-2, True)])
def test_rounding_in_a_cancelling_sum_is_not_a_failure_and_a_real_error_is(monkeypatch, error, caught):
    prog, calls = _cancelling_sum()
    fn = load(prog)
    eager, exact = fn(*make_inputs(prog.inputs, calls[0])), _ExactCompile(0.0)(fn)(*make_inputs(prog.inputs, calls[0]))
    assert difference(eager, exact) is not None  # the exact answer is over the tolerance from eager's
    monkeypatch.setattr(fuzz_run.ds, "compile", _ExactCompile(error))
    fails = check_program(prog, calls, modes=(True,))
    assert bool(fails) is caught, [f.headline() for f in fails]


class _SlowCompile:
    """A stand-in compiler whose compiled function never finishes in time."""

    def __call__(self, fn, dynamic=None):
        def run(*args):
            import time
            time.sleep(5)
        return run


def test_a_compile_slower_than_the_time_limit_is_a_hang_not_a_stuck_run(monkeypatch):
    monkeypatch.setattr(fuzz_run.ds, "compile", _SlowCompile())
    monkeypatch.setattr(fuzz_run, "TIME_LIMIT_S", 0.3)
    prog = generate(3)
    (f,) = check_program(prog, random_calls(3, prog, 3), modes=(True,))
    assert f.kind == "hang" and "0.3 s" in f.message
