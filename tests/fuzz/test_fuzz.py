"""The soundness fuzzer in the suite: random programs, compiled under every `dynamic=` mode, match eager.

`DYNASHAPE_FUZZ_SECONDS` scales the fixed-seed budget (default 45 s; 0 skips it);
`DYNASHAPE_FUZZ_TRAIN_SECONDS` the training-mode one (default 30 s; 0 skips it);
`DYNASHAPE_FUZZ_CUDAGRAPHS_SECONDS` the CUDA graphs one (default 10 s; 0 skips it).
`make fuzz` (`FUZZ_MODE=train`) runs the same loop with a random seed for longer.
"""
import os
import re
import runpy

import pytest
import torch

from dynashape.symbolic import LocalSource, ShapeEnv
from tests.fuzz import run as fuzz_run
from tests.fuzz.driver import MIXED, fuzz, key_of
from tests.fuzz.gen import REF_SIZES, Call, Input, Program, Stmt, generate, make_inputs
from tests.fuzz.gen_train import PRELUDE, call_tuple, generate_train, input_tuple
from tests.fuzz.oracle import compare
from tests.fuzz.phases import PHASES, groups, run_phase
from tests.fuzz.reduce import load_script, reduce, script
from tests.fuzz.oracle import find_leak
from tests.fuzz.run import check_program, difference, load, random_calls
from tests.fuzz.train import check_train_program

BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_SECONDS", "45"))
TRITON_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_TRITON_SECONDS", "15"))
TRAIN_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_TRAIN_SECONDS", "30"))
GRAPHS_BUDGET = float(os.environ.get("DYNASHAPE_FUZZ_CUDAGRAPHS_SECONDS", "10"))
SEED = 20261123
TRAIN_SEED = 20261124
# statements with a known bug, left out of the fixed-seed run until it is fixed (none: a float `.item()` times
# the int 0 was the int 0 in the trace, fixed in shape_env's float forms)
KNOWN_BUGS = None
GRAPHS_SEED = SEED + 4  # its first program pads: a loaded machine that runs one program in the budget still
# pads (the first padded replay of earlier seeds moved to later programs as the generator's draws changed)


@pytest.mark.skipif(BUDGET <= 0, reason="DYNASHAPE_FUZZ_SECONDS=0")
def test_random_programs_compiled_under_every_mode_match_eager():
    from dynashape.backends.fused import build
    failed_builds = build.counters["failures"]
    rep = fuzz(SEED, BUDGET, reduce_s=4.0, max_reduce=4, reserve_s=min(5.0, BUDGET / 4), log=lambda m: None,
               exclude=KNOWN_BUGS)
    assert rep.programs > 0
    if rep.failures:
        shown = "\n\n".join(f"# {f.headline()}\n{f.program.source()}# calls (sizes, n): {_calls(f)}"
                            for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz "
                    f"FUZZ_SEED={SEED}`, scripts in fuzz-failures/):\n\n{shown}", pytrace=False)
    # a region the fused backend could not lower or build is a gap in it, not a fallback to live with
    assert build.counters["failures"] == failed_builds, "the fused backend failed to build a region (its warning says why)"


@pytest.mark.skipif(TRAIN_BUDGET <= 0, reason="DYNASHAPE_FUZZ_TRAIN_SECONDS=0")
def test_random_training_programs_compiled_under_every_mode_match_eager_outputs_and_gradients():
    from dynashape.backends.fused import build
    failed_builds = build.counters["failures"]
    rep = fuzz(TRAIN_SEED, TRAIN_BUDGET, reduce_s=4.0, max_reduce=4, reserve_s=min(5.0, TRAIN_BUDGET / 4),
               log=lambda m: None, mode="train", backends=MIXED)
    assert rep.programs > 0 and len(rep.phases) > 1
    if rep.failures:
        shown = "\n\n".join(f"# {f.headline()}\n{f.program.source()}# inputs (name, kind, dims, grad): "
                            f"{[input_tuple(i) for i in f.program.inputs]}\n# calls (sizes, n): {_calls(f)}"
                            for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz FUZZ_MODE=train "
                    f"FUZZ_SEED={TRAIN_SEED}`, scripts in fuzz-failures/):\n\n{shown}", pytrace=False)
    assert build.counters["failures"] == failed_builds, "the fused backend failed to build a region (its warning says why)"


@pytest.mark.skipif(TRITON_BUDGET <= 0, reason="DYNASHAPE_FUZZ_TRITON_SECONDS=0")
def test_random_programs_on_triton_kernels_in_the_interpreter_match_eager():
    pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[gpu]'): Triton kernels go unfuzzed")
    import dynashape as ds
    from dynashape.backends.fused import build, triton_run
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is not 1 (a GPU is present): run `make fuzz FUZZ_DEVICE=cuda` there")
    failed_builds, launches = build.counters["failures"], triton_run.counters["launches"]
    with ds.config.patch(triton="cpu"):
        rep = fuzz(SEED + 2, TRITON_BUDGET, reduce_s=4.0, max_reduce=4, reserve_s=min(5.0, TRITON_BUDGET / 4),
                   log=lambda m: None, backends=("fused",))
    assert rep.programs > 0 and triton_run.counters["launches"] > launches
    if rep.failures:
        shown = "\n\n".join(f"# {f.headline()}\n{f.program.source()}# calls (sizes, n): {_calls(f)}"
                            for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz FUZZ_DEVICE=interpret "
                    f"FUZZ_SEED={SEED + 2}`):\n\n{shown}", pytrace=False)
    assert build.counters["failures"] == failed_builds, "the fused backend failed to build a region (its warning says why)"


@pytest.mark.skipif(GRAPHS_BUDGET <= 0, reason="DYNASHAPE_FUZZ_CUDAGRAPHS_SECONDS=0")
def test_random_programs_through_cuda_graphs_per_bucket_match_eager(monkeypatch):
    """The padding proofs (which sizes may be rounded up to a bucket) judged against eager, through the
    simulated capture and replay on CPU tensors, each bucket captured at its first call."""
    import dynashape as ds
    from dynashape.backends import cudagraphs
    monkeypatch.setattr(cudagraphs, "SIMULATE", [True])
    monkeypatch.setattr(cudagraphs, "WARM_UP", [False])
    before = dict(cudagraphs.counters)
    with ds.config.patch(cudagraphs="buckets"):
        rep = fuzz(GRAPHS_SEED, GRAPHS_BUDGET, reduce_s=4.0, max_reduce=4, reserve_s=min(5.0, GRAPHS_BUDGET / 4),
                   log=lambda m: None)
    assert rep.programs > 0 and cudagraphs.counters["padded_replays"] > before["padded_replays"]
    if rep.failures:
        shown = "\n\n".join(f"# {f.headline()}\n{f.program.source()}# calls (sizes, n): {_calls(f)}"
                            for f, _ in rep.distinct.values())
        pytest.fail(f"{rep.summary()}\n\nreduced failing programs (reproduce with `make fuzz FUZZ_CUDAGRAPHS=buckets "
                    f"FUZZ_SEED={GRAPHS_SEED}`):\n\n{shown}", pytrace=False)


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
    assert "trace-time" in find_leak([1, (torch.ones(1), s)])
    assert find_leak([1, (torch.ones(1),)]) is None


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


def test_failures_the_driver_has_no_time_to_reduce_are_kept_as_found(monkeypatch, tmp_path):
    """A program that runs past the reserve left a run with failures counted and nothing written (seed
    25112957, training under the interpreter): what is not reduced is written out as found."""
    monkeypatch.setattr(fuzz_run.ds, "compile", _WrongCompile())
    rep = fuzz(7, 4.0, out_dir=str(tmp_path), max_reduce=0, log=lambda m: None)
    assert rep.failures and rep.distinct and all(sk == ("unreduced",) for _, sk in rep.distinct)
    scripts = sorted(tmp_path.glob("*-wrong.py"))
    assert len(scripts) == len(rep.distinct)
    compile(scripts[0].read_text(), str(scripts[0]), "exec")


@pytest.mark.filterwarnings("ignore")
def test_the_driver_s_programs_catch_exceptions_with_broad_and_narrow_handlers():
    """`try:` / `except` around statements that raise in the trace (a graph break, a decision on data)
    or in eager for some sizes: a trace that takes the handler where eager does not is wrong."""
    progs = [generate(seed, data_branches=True, half=True, catch=True) for seed in range(60)]
    caught = [p for p in progs if any(s.lines[0] == "try:" for s in p.body)]
    assert len(caught) > 8
    text = "\n".join(p.source() for p in caught)
    for needle in ("except Exception:", "except RuntimeError:", "except (ValueError, RuntimeError):",
                   ".nonzero()", ".item()", " @ ", ".view("):
        assert needle in text, needle
    for p in caught[:5]:  # valid on the sizes they were generated for
        load(p)(*make_inputs(p.inputs, Call({d: REF_SIZES[i % 3 + 1] for i, d in enumerate("ABCD")}, 3, 1)))


def test_a_try_block_is_reduced_to_one_branch_and_read_back_from_its_script(monkeypatch, tmp_path):
    monkeypatch.setattr(fuzz_run.ds, "compile", _WrongCompile())
    block = ["try:", "    v0 = x.view(2, -1)", "    v0 = v0 * int((v0 > 0).sum())", "except Exception:",
             "    v0 = x * 0.5"]
    prog = Program([Input("x", "float", ("A",))], [Stmt(block, "v0"), Stmt(["v1 = v0 + 1"], "v1", "v0")], ["v1"])
    (f,) = check_program(prog, [Call({"A": 6, "B": 2, "C": 2, "D": 2}, 1, 5)], modes=(True,))
    path = tmp_path / "repro.py"
    path.write_text(script(f))
    assert [s.lines for s in load_script(str(path)).program.body] == [block, ["v1 = v0 + 1"]]
    r = reduce(f, budget_s=20)
    assert r.signature() == f.signature()
    assert [s.lines for s in r.program.body] == [["v0 = x.view(1, -1)", "v0 = v0 * int((v0 > 0).sum())"]], \
        r.program.source()  # the body, dedented (`v1 = v0 + 1` dropped, a constant made 1)


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
    (f,) = check_program(prog, random_calls(3, prog, 3), modes=(True,), backend="eager")
    assert f.kind == "hang" and "0.3 s" in f.message
    (f,) = check_program(prog, random_calls(3, prog, 3), modes=(True,), backend="fused")  # waits for g++: longer
    assert f.kind == "hang" and f"{0.3 * fuzz_run.FUSED_SLOWER:g} s" in f.message


# ------------------------------------------------------------------ training mode
def _square_program(grad="leaf") -> Program:
    return Program([Input("x", "float", ("A", "B"), grad)], [Stmt(["v0 = x * x"], "v0", "x")], ["v0"])


_SAME_SIZES = [Call({"A": 3, "B": 4, "C": 2, "D": 2}, 1, seed) for seed in (11, 12, 13, 14)]


class _GradScaled:
    """A stand-in compiler whose results have eager's values, flags and grad_fn, and `scale` times the gradient."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, fn, dynamic=None, backend=None):
        def run(*args):
            return tuple(o.detach() + (o - o.detach()) * self.scale if isinstance(o, torch.Tensor) and o.grad_fn
                         else o for o in fn(*args))
        return run


@pytest.mark.parametrize("scale, caught", [(1.0, False), (1.5, True)])
def test_the_gradient_oracle_sees_a_wrong_gradient_and_accepts_a_right_one(monkeypatch, scale, caught):
    monkeypatch.setattr(fuzz_run.ds, "compile", _GradScaled(scale))
    fails = check_train_program(_square_program(), _SAME_SIZES[:2], "plain", modes=(True,))
    assert bool(fails) is caught, [f.headline() for f in fails]
    if caught:
        (f,) = fails
        assert f.kind == "wrong" and f.message.startswith("leaf grads[0]: values differ") and f.phase == "plain"


def test_a_size_decided_by_rounding_is_judged_by_the_float64_run():
    """`v[v > 0]` of a layer-normalised row sum, 0 by cancellation: eager's float32 keeps an element
    at 1.2e-7, the fused kernel's sum is 0 and keeps none, as the float64 run does (fuzz seed 25112936):
    no failure. A size the float64 run does not give, or wrong values, still are."""
    prog = Program([Input("x", "float", ("D", "B", "A"))],
                   [Stmt(["v7 = F.layer_norm(-x, (x.size(-1),))"], "v7"),
                    Stmt(["v8 = F.linear(v7, torch.ones(1, v7.size(-1)))"], "v8")],
                   ["v8[v8 > 0] * 1"])
    call = Call({"A": 2, "B": 1, "D": 2}, 0, 18177047119000100)
    fn = fuzz_run.load(prog)
    want = fn(*make_inputs(prog.inputs, call))
    assert want[0].shape == (1,)  # eager's rounding keeps one
    assert fuzz_run._rounding_explains(fn, prog, call, want, (torch.zeros(0),))
    assert not fuzz_run._rounding_explains(fn, prog, call, want, (torch.zeros(2),))
    assert not fuzz_run._rounding_explains(fn, prog, call, (torch.zeros(0),), want)


def test_the_float64_arbiter_accepts_a_gradient_nearer_the_exact_one_and_not_a_wrong_one():
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = [("leaf grads", [(exact + 1e-4).float()])]  # eager's own rounding error, past the tolerance
    ref = [("leaf grads", [exact])]
    assert compare(eager, [("leaf grads", [exact.float()])], lambda: ref) is None
    kind, _, message = compare(eager, [("leaf grads", [(exact + 1e-2).float()])], lambda: ref)
    assert kind == "wrong" and "leaf grads[0]" in message


def test_the_float64_arbiter_takes_eager_s_worst_error_as_the_noise_of_a_cancelling_gradient():
    # layer_norm's gradient of a row-constant gradient is 0 exactly: eager and ours are rounding
    # noise of one size at different positions (train fuzz seed 25112702); a gradient off by more
    # than that noise is still wrong
    exact = torch.zeros(4, dtype=torch.float64)
    eager = [("leaf grads", [torch.tensor([0.0, -1.9e-6, -2.3e-5, 0.0])])]
    ref = [("leaf grads", [exact])]
    ours = torch.tensor([1.5e-6, 1.4e-6, 8e-7, 1.46e-5])
    assert compare(eager, [("leaf grads", [ours])], lambda: ref) is None
    kind, _, _ = compare(eager, [("leaf grads", [ours + torch.tensor([0, 0, 0, 1e-3])])], lambda: ref)
    assert kind == "wrong"


def test_where_float32_cannot_judge_the_compiled_function_in_float64_does():
    # eager's float32 gradient is off by 60 where the exact one is at most 25 (train fuzz seed
    # 25112941): ours, off by more, stands only if its float64 run gives the float64 answer
    exact = torch.tensor([24.7, -3.0, 0.5], dtype=torch.float64)
    eager = [("leaf grads", [(exact + torch.tensor([60.0, 1.0, -2.0], dtype=torch.float64)).float()])]
    ours = [("leaf grads", [(exact + torch.tensor([-500.0, 5.0, 9.0], dtype=torch.float64)).float()])]
    ref = [("leaf grads", [exact])]
    assert compare(eager, ours, lambda: ref, None, lambda: [("leaf grads", [exact + 1e-9])]) is None
    wrong64 = [("leaf grads", [exact + torch.tensor([0.0, 0.0, 1e-3], dtype=torch.float64)])]
    assert compare(eager, ours, lambda: ref, None, lambda: wrong64)[0] == "wrong"
    assert compare(eager, ours, lambda: ref)[0] == "wrong"  # (without the float64 run of ours)
    # where eager's float32 is good, a float32 difference is not excused by a good float64 run
    fine = [("leaf grads", [(exact + 1e-5).float()])]
    assert compare(fine, ours, lambda: ref, None, lambda: [("leaf grads", [exact])])[0] == "wrong"


def test_the_record_comparison_classifies_crashes_noraises_and_exception_types():
    out = [("out", torch.ones(2))]
    assert compare(out + [("leaf grads", [None])], out + [("raised", "backward", RuntimeError("x"))])[0] == "crash"
    assert compare(out + [("raised", "backward", RuntimeError("x"))], out + [("leaf grads", [None])])[0] == "noraise"
    assert compare([("raised", "forward", IndexError("x"))], [("raised", "forward", RuntimeError("x"))])[:2] == \
        ("exc-type", "IndexError->RuntimeError")
    assert compare([("raised", "forward", IndexError("x"))], [("raised", "forward", IndexError("y"))]) is None
    assert compare([("out flags", ["requires_grad=True"])], [("out flags", ["requires_grad=False"])])[0] == "wrong"


@pytest.mark.parametrize("phase", list(PHASES))
def test_every_phase_runs_and_records_gradients(phase):
    inputs = [("x", "float", ("A", "B"), "leaf"), ("y", "float", ("A", "B"), "mul")]
    calls = [call_tuple(c) for c in _SAME_SIZES[:2]]
    for group in groups(calls, phase):
        rec = run_phase(lambda x, y: (x.pow(3) * y,), inputs, group, phase)
        labels = [r[0] for r in rec]
        assert "raised" not in labels and any("out flags" in lb for lb in labels)
        grads = [v for lb, v in rec if "leaf grads" in lb]  # x's, then y's leaf (y = leaf * 1)
        assert grads and all(g[1].abs().sum() > 0 for g in grads), labels
        if phase != "no_grad":  # under no_grad the outputs do not depend on x for autograd
            assert all(g[0].abs().sum() > 0 for g in grads), labels
    assert ("gradient flags" in labels) is (phase == "grad_penalty")
    assert sum(lb.endswith("out") for lb in labels) == {"two_forwards": 2, "accumulate": 3}.get(phase, 1)


def test_under_no_grad_the_outputs_do_not_require_grad_and_backward_is_skipped():
    rec = run_phase(lambda x: (x * 2,), [("x", "float", ("A",), "leaf")], [({"A": 3}, 0, 1, False, 1.5)], "no_grad")
    assert dict(rec)["out flags"] == ["requires_grad=False is_leaf=True grad_fn=None"]
    assert dict(rec)["backward"].startswith("skipped")


class _SharedBuffer:
    """A stand-in compiler for f(x) = x * x whose backward reads a buffer the next call overwrites."""

    def __call__(self, fn, dynamic=None, backend=None):
        buf = {}

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                buf["x"] = x.detach().clone()
                return x * x

            @staticmethod
            def backward(ctx, g):
                return 2 * buf["x"] * g

        return lambda x: (Square.apply(x),)


class _NoDoubleBackward:
    """A stand-in compiler for f(x) = x * x whose gradient is not differentiable (a detached backward)."""

    def __call__(self, fn, dynamic=None, backend=None):
        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x.detach() * g.detach()

        return lambda x: (Square.apply(x),)


@pytest.mark.parametrize("compiler, phase", [(_SharedBuffer, "two_forwards"), (_NoDoubleBackward, "grad_penalty")])
def test_a_phase_catches_what_the_plain_phase_does_not(monkeypatch, compiler, phase):
    monkeypatch.setattr(fuzz_run.ds, "compile", compiler())
    prog = _square_program()
    assert check_train_program(prog, _SAME_SIZES, "plain", modes=(True,)) == []
    (f,) = check_train_program(prog, _SAME_SIZES, phase, modes=(True,))
    assert f.kind == "wrong" and f.phase == phase, f.headline()


@pytest.mark.filterwarnings("ignore")
def test_generated_training_programs_run_eagerly_on_the_sizes_they_were_generated_for():
    stages = []
    for seed in range(25):
        prog = generate_train(seed)
        assert 1 <= len(prog.body) <= 15 and any(i.grad for i in prog.inputs)
        call = Call({d: REF_SIZES[i % 3 + 1] for i, d in enumerate("ABCD")}, 3, seed)
        rec = run_phase(load(prog), [input_tuple(i) for i in prog.inputs], [call_tuple(call)], "plain")
        assert rec[0][0] == "out", (prog.source(), rec[0])  # the forward runs; backward may raise, as in eager
        stages.append(rec[-1][0])
    assert stages.count("output grads") > 15  # most programs train


def test_training_programs_use_grad_modes_detach_retain_grad_and_branches_on_autograd_state():
    text = "\n".join(generate_train(seed).source() for seed in range(150))
    for needle in ("with torch.no_grad():", "with torch.enable_grad():", "torch.set_grad_enabled(False)",
                   ".detach()", ".retain_grad()", ".requires_grad:", ".is_leaf", ".grad_fn is None",
                   "torch.masked_select(", "torch.unique(", ".nonzero()", "F.cross_entropy(", ".shape[-2:])",
                   "F.rms_norm(", "F.gelu(", "F.silu(", ".register_hook(", "torch.autograd.grad(", ".backward(",
                   "Square.apply(", "checkpoint(", "torch.inference_mode()"):
        assert needle in text, needle
    assert re.search(r"(v\d+) = v\d+\[.*\]\n    \1\.\w+_\(", text)  # v = h[:, :2]; v.mul_(2)


def test_a_training_failure_is_reduced_to_a_script_that_reproduces_it_standalone(monkeypatch, tmp_path):
    monkeypatch.setattr(fuzz_run.ds, "compile", _GradScaled(2.0))
    for seed in range(60):
        prog = generate_train(seed)
        fails = check_train_program(prog, random_calls(seed, prog, 4), "accumulate", modes=(False,), backend="eager")
        if fails and fails[0].kind == "wrong" and len(prog.body) >= 5:
            break
    else:
        pytest.skip("no candidate program")
    r = reduce(fails[0], budget_s=20)
    assert r.signature() == fails[0].signature() and r.phase in ("plain", "accumulate") and r.backend == "eager"
    assert len(r.program.body) < len(prog.body)
    path = tmp_path / "repro.py"
    path.write_text(script(r))
    case = load_script(str(path))
    assert case.program.source() == r.program.source() and case.phase == r.phase and case.mode is False
    assert [input_tuple(i) for i in case.program.inputs] == [input_tuple(i) for i in r.program.inputs]
    ns = runpy.run_path(str(path), run_name="repro")  # its own harness, the stand-in compiler
    assert ns["main"]() == 1
    monkeypatch.setattr(fuzz_run.ds, "compile", _GradScaled(1.0))
    assert ns["main"]() == 0


def test_eager_s_own_spread_under_input_noise_explains_an_amplified_rounding_and_not_a_wrong_value():
    # train fuzz seed 25112925: rms_norm(v2.sum() * v2) with v2 layer-normalised: the sum cancels to
    # ~0 (eager's float32 sum landed on exactly 0, ours and Inductor's ~3e-7) and rms_norm multiplies
    # it by 1/sqrt(eps): outputs ~1e-3 apart; eager's own result moves that far when the inputs move
    # by 1e-6. A value off by more than eager's own spread is still wrong.
    pattern = torch.tensor([0.7, -1.2, 0.5])
    eager = [("out", (torch.zeros(3),))]
    noisy = [[("out", (pattern * s,))] for s in (1.9e-3, -0.4e-3, 0.0)]
    ours = [("out", (pattern * 1.3e-3,))]
    ref = [("out", (pattern.double() * 1e-7,))]
    assert compare(eager, ours, lambda: ref, lambda k: noisy[k]) is None
    assert compare(eager, ours, lambda: ref)[0] == "wrong"  # without eager's spread: past the float64 arbiter
    kind, _, _ = compare(eager, [("out", (pattern * 1.3e-3 + torch.tensor([0.0, 0.0, 0.1]),))], lambda: ref,
                         lambda k: noisy[k])
    assert kind == "wrong"


def test_a_program_the_fused_backend_could_not_build_is_kept_as_a_script(monkeypatch, tmp_path):
    """A fused build failure is no wrong result (the eager code runs), but one met once in a long run
    (a trace tree's CannotMerge, 11-25 and 11-27) could not be reproduced: its program is kept."""
    from dynashape.backends.fused import backend as fused_backend
    from .driver import fuzz

    def broken(*args, **kwargs):
        raise RuntimeError("a stand-in build failure")
    monkeypatch.setattr(fused_backend, "build_fused", broken)
    monkeypatch.setattr(fused_backend, "build_fused_tree", broken)  # (the program may branch on data)
    rep = fuzz(SEED, 3.0, out_dir=str(tmp_path), backends=("fused",), log=lambda m: None)
    assert rep.programs and not rep.failures
    kept = sorted(tmp_path.glob("build-failure-*.py"))
    assert kept and len(kept) <= 5
    text = kept[0].read_text()
    assert "a stand-in build failure" in text.splitlines()[0]
    compile(text, str(kept[0]), "exec")  # a valid standalone script


# ------------------------------------------------------------------ the families of the third hunt by hand
def _numbers_program() -> tuple:
    """gen.py `_numbers`: text of sizes and of the float argument returned, an integer division by a size
    that the third call makes 0 (on the entry automatic dynamic made after the second), branches on the
    float argument (0.0, -0.0 and 1.0 among the calls) and on an `.item()` equal to 0 or 1, the number then
    used where its type decides the dtype."""
    inputs = [Input("x", "float", ("A", "B")), Input("n", "int"), Input("a", "scalar")]
    body = [Stmt(["p0 = repr(x.size(0))"], "p0"), Stmt(["p1 = str(list(x.shape))"], "p1"),
            Stmt(["p2 = f'{tuple(x.shape)}'"], "p2"), Stmt(["s3 = x.numel() // x.size(0)"], "s3"),
            Stmt(["p4 = x.size(0) * a"], "p4"),
            Stmt(["if a:", "    v5 = x * a", "else:", "    v5 = (x > 0).int() + a"], "v5", "x"),
            Stmt(["v6 = torch.arange(4, dtype=torch.int32) + (a if a == 0 or a == 1 else 2 * a)"], "v6", "x"),
            Stmt(["v7_w = (x > 0).all().float().item()", "if v7_w == 0 or v7_w == 1:",
                  "    v7 = (x > 0).int() + v7_w", "else:", "    v7 = x * v7_w"], "v7", "x")]
    prog = Program(inputs, body, ["v5", "v6", "v7", "s3", "p0", "p1", "p2", "p4", "a"])
    calls = [Call({"A": a, "B": 3, "C": 2, "D": 2}, 2, seed, False, v)
             for seed, (a, v) in enumerate([(5, 1.5), (7, 1.5), (0, 1.5), (4, 0.0), (6, -0.0), (3, 1.0), (2, 0.0),
                                            (3, -0.0)])]
    return prog, calls


@pytest.mark.filterwarnings("ignore")
def test_python_numbers_from_sizes_and_the_float_argument_match_eager():
    """Before the fixes (d75e1c0): `Sym(s0)` in the text, the int 0 for a float argument of 0.0, int32 where
    eager's is float32, a number where eager raises ZeroDivisionError for a size-0 call."""
    prog, calls = _numbers_program()
    fails = check_program(prog, calls, backend="eager")
    assert not fails, [f.headline() for f in fails]


def test_the_generator_makes_python_numbers_only_when_asked():
    progs = [generate(seed, data_branches=True, half=True, catch=True, numbers=True) for seed in range(150)]
    text = "\n".join(p.source() for p in progs)
    for needle in ("repr(", "str(list(", "f'{tuple(", " // ", "_w = ", "if a", " * a"):
        assert needle in text, needle
    assert any(r.startswith("p") for p in progs for r in p.ret)  # the Python values are returned
    assert not any(s.out.startswith("p") for seed in range(40) for s in generate(seed).body)


def _autograd_state_program(lazy: bool) -> Program:
    """gen_train.py `_autograd_state`: grad_fn read (a Node, one object, its class's name branched on and
    returned), the custom Function through `sq = Square.apply`; or a lazily made parameter, returned."""
    inputs = [Input("x", "float", ("A", "B"), "leaf"), Input("y", "float", ("B",), "mul")]
    if lazy:
        body = [Stmt(["v0 = x * y"], "v0", "x"), Stmt(["v1_m = Lazy()", "v1 = v1_m(v0)"], "v1", "v0")]
        ret = ["v1", "v1_m.w"]
    else:
        body = [Stmt(["v0 = x * y"], "v0", "x"),
                Stmt(["if isinstance(v0.grad_fn, torch.autograd.graph.Node):", "    v1 = v0 * 2", "else:",
                      "    v1 = v0 + 1"], "v1", "v0"),
                Stmt(["if v1.grad_fn is v1.grad_fn:", "    v2 = v1.sin()", "else:", "    v2 = -v1"], "v2", "v1"),
                Stmt(["p3 = type(v2.grad_fn).__name__"], "p3"), Stmt(["v4 = sq(v2) + v2"], "v4", "v2")]
        ret = ["v4", "p3"]
    return Program(inputs, body, ret, prelude=PRELUDE)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("lazy", [False, True], ids=["grad_fn and a bound apply", "a lazily made parameter"])
def test_autograd_state_read_in_the_function_matches_eager(lazy):
    """Before the fixes (d75e1c0): the other branch of `isinstance(grad_fn, Node)` and `grad_fn is grad_fn`,
    a class of ours for `type(grad_fn)`, `sq(...)` traced through with its backward lost; the lazily made
    parameter apart from the graph (no gradient reached it)."""
    fails = check_train_program(_autograd_state_program(lazy), _SAME_SIZES[:2] + [
        Call({"A": 5, "B": 4, "C": 2, "D": 2}, 1, 15)], "plain", modes=(None,), backend="eager")
    assert not fails, [f.headline() for f in fails]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("phase", ["saved_hooks", "function_mode"])
def test_the_caller_s_saved_tensors_hooks_and_torch_function_mode_see_real_tensors_only(phase):
    """phases.py: the caller's pack hook and TorchFunctionMode got the trace's FakeTensors before the fixes
    (d75e1c0), and a warm entry ran its graph where the mode changes `sin` into `cos`."""
    prog = Program([Input("x", "float", ("A", "B"), "leaf")],
                   [Stmt(["v0 = x.sin() * x"], "v0", "x"), Stmt(["v1 = v0.tanh() + x"], "v1", "v0")], ["v1"])
    calls = [Call({"A": a, "B": 4, "C": 2, "D": 2}, 1, seed) for seed, a in zip((1, 2, 3, 4, 5), (3, 3, 5, 5, 6))]
    fails = check_train_program(prog, calls, phase, modes=(None,), backend="eager")  # (function_mode: not seed 3)
    assert not fails, [f.headline() for f in fails]
