"""Every distinct failure the fuzzer found, reduced, as a regression test (see findings.md).

Each case is a reduced program, its inputs, the calls that expose it and the `dynamic=` mode; the
runner compares compiled with eager on every call. Cases still failing on main (OPEN) are xfail;
the others failed on main at a9ab74a and pass since the issue 10 fixes (merged at 5ef06ea).
"""
import re

import pytest

from tests.fuzz.gen import Call, Input, Program, Stmt
from tests.fuzz.run import check_program

X3, Y3 = Input("x", "float", ("A", "B", "C")), Input("y", "float", ("A", "B", "C"))
N = Input("n", "int")

# id: (statements, returned, inputs, calls as (sizes, n[, y is x[, data seed[, a]]]), dynamic=)
CASES = {
    # ---- beyond issue 10's list
    "tolist_floats_traced_as_int64": (
        ["t = torch.tensor(y[:2].tolist())"], ["torch.zeros(2, dtype=t.dtype)"],
        [Input("y", "float", ("A",))], [({"A": 3}, 0)], True),
    "tolist_then_layer_norm_crashes": (
        ["v0 = torch.tensor(y.flatten()[:1].tolist())", "v1 = F.layer_norm(v0, v0.shape[-1:])"], ["v1"],
        [Input("y", "float", ("A",))], [({"A": 2}, 0)], None),
    "movedim_of_a_0d_tensor": (
        ["v0 = y.sum().movedim(0, -1)"], ["v0"], [Input("y", "float", ("A",))], [({"A": 3}, 0)], True),
    "squeeze_of_a_data_dependent_dim_of_size_one": (  # found after the issue 10 fixes
        ["v5 = torch.unique(y.round())", "v6 = v5.squeeze(0)"], ["v6"],
        [Input("y", "float", ("A",))], [({"A": 2}, 0, False, 2)], None),  # two values that round alike
    "stride_of_a_slice_after_a_size_one_dim_grows": (  # found after the issue 10 fixes
        [], ["x[..., -1:].stride()"], [Input("x", "float", ("C", "D", "A"))],
        [({"A": 0, "C": 0, "D": 0}, 0), ({"A": 1, "C": 2, "D": 2}, 0), ({"A": 2, "C": 2, "D": 2}, 0)], None),
    "cat_of_an_empty_data_dependent_vector_with_a_matrix": (
        ["v3 = x - x", "v7 = v3[v3 > 0]", "v9 = torch.cat([v7, v3], 0)"], ["v9"],
        [Input("x", "float", ("A", "B"))], [({"A": 0, "B": 0}, 0)], None),
    "cat_of_0d_tensors_raises_the_wrong_type": (
        ["v0 = y.squeeze()", "v1 = torch.cat([v0, v0])"], ["v1"],
        [Input("y", "float", ("A",))], [({"A": 1}, 0)], None),
    "stride_of_an_input_with_zero_sizes": (
        [], ["x.stride()"], [Input("x", "float", ("A", "B", "C", "D"))],
        [({"A": 0, "B": 0, "C": 1, "D": 0}, 0), ({"A": 0, "B": 0, "C": 0, "D": 0}, 0)], None),
    # ---- issue 10's families, as the fuzzer meets them
    "min_guard_dropped_after_int_float": (  # item 1
        ["v0 = torch.arange(n) * 1.0", "s1 = int(float(min(v0.size(0), y.size(0))))"], ["s1"],
        [Input("y", "float", ("A",)), N], [({"A": 0}, 0), ({"A": 3}, 3), ({"A": 0}, 3)], None),
    "branch_guard_dropped_after_range": (  # item 1
        ["v2 = y[:1] if y.size(0) > n else y.roll(1, 0)", "s5 = sum(range(y.size(0)))"], ["v2"],
        [Input("y", "float", ("A",)), N], [({"A": 0}, 0), ({"A": 7}, 8), ({"A": 7}, 0)], None),
    "max_in_a_slice_bound": (  # item 1
        ["v0 = y[: max(y.size(0) - n, 0)]", "v2 = y.unbind(0)[0]"], ["v0"],
        [Input("y", "float", ("A", "B")), N], [({"A": 0, "B": 0}, 0), ({"A": 5, "B": 1}, 9), ({"A": 5, "B": 0}, 1)],
        None),
    "floordiv_size_becomes_float": (  # item 2
        ["v0 = y[: max(y.size(0) - n, 0)]", "v1 = torch.cat([v0, v0 * 1], 0)",
         "v3 = torch.zeros(v1.size(0) * v1.size(-1) // 2)"], ["v3"],
        [Input("y", "float", ("A",)), N], [({"A": 0}, 0), ({"A": 1}, 1)], None),
    "floordiv_slice_bound_becomes_float": (  # item 2
        ["v0 = torch.cat([y, x])", "v1 = v0.transpose(0, 1).reshape(-1)", "v2 = v1[-(v1.size(0) // 2) :]"],
        ["v2"], [Input("x", "float", ("D", "B", "C", "A")), Input("y", "float", ("B", "B", "C", "A"))],
        [({"A": 0, "B": 2, "C": 0, "D": 0}, 0), ({"A": 1, "B": 2, "C": 1, "D": 1}, 0)], None),
    "contiguous_dropped_then_view": (  # item 3
        ["v2 = y.mT.contiguous()", "v4 = v2.view(v2.numel())"], ["v4"], [Input("y", "float", ("A", "B", "C"))],
        [({"A": 0, "B": 1, "C": 0}, 0), ({"A": 1, "B": 0, "C": 1}, 0), ({"A": 1, "B": 2, "C": 2}, 0)], None),
    "contiguous_dropped_then_mutated": (  # item 3: the caller's x is zeroed
        ["v2 = x.expand(2, *x.shape)", "v5 = v2.contiguous()\nv5.zero_()"], ["v5"],
        [Input("x", "float", ("A", "B"))], [({"A": 0, "B": 1}, 0), ({"A": 2, "B": 0}, 0), ({"A": 2, "B": 2}, 0)],
        None),
    "unbacked_broadcast_against_one": (  # item 4
        ["v5 = y[y > 0][:1] * y", "s7 = v5.reshape(-1).size(0)"], ["s7"],
        [Input("y", "float", ("A", 1))], [({"A": 3}, 0, False, 15490464644506508)], None),
    "stride_of_a_view": (  # item 5
        [], ["y.mT.stride()"], [Input("y", "float", ("A", "B", "C"))], [({"A": 0, "B": 0, "C": 2}, 0)], None),
    "storage_offset_of_an_index": (  # item 5
        ["v3 = x[m]", "v5 = v3[v3.size(0) // 2]"], ["v5.storage_offset()"],
        [Input("x", "float", ("A", 1, "B")), Input("y", "float", ("B", 1, "B")), Input("m", "mask", ("A", 1, "B"))],
        [({"A": 1, "B": 3}, 0, False, 18997791956503500)], None),
    "aliased_inputs": (  # item 8
        [], ["y"], [Input("x", "float", ("A",)), Input("y", "float", ("A",))],
        [({"A": 3}, 0, True), ({"A": 3}, 0, False)], False),
    "negative_zero_argument_reuses_the_zero_graph": (  # item 7
        ["v0 = x * math.copysign(1.0, a)"], ["v0"], [Input("x", "float", ("A",)), Input("a", "scalar")],
        [({"A": 3}, 0, False, 1, 0.0), ({"A": 3}, 0, False, 2, -0.0)], None),
    "inf_argument_in_a_guard": (  # item 9
        ["v0 = x + a"], ["v0"], [Input("x", "float", ("A",)), Input("a", "scalar")],
        [({"A": 3}, 0, False, 1, float("inf")), ({"A": 3}, 0, False, 2, 1.5)], None),
    "chunk_zero_division": (  # item 10
        ["v7 = y.chunk(1)[0]"], ["v7"], [Input("y", "float", ("A", "B"))], [({"A": 0, "B": 3}, 0)], None),
    "masked_select_then_broadcast": (  # item 11
        ["v0 = y.new_ones(y.size(0))", "v4 = torch.masked_select(v0, v0 > 0.5)", "v5 = v0.masked_fill(v4 > 1, 1.0)"],
        ["v5"], [Input("y", "float", ("A",))], [({"A": 3}, 0)], True),
    "unique_size_arithmetic_at_trace_time": (  # item 11
        ["v0 = torch.unique(x.round())", "v1 = F.pad(v0, (0, v0.size(-1) % 3))", "v5 = v1.new_ones(v1.size(0) - n)"],
        ["v5"], [Input("x", "float", ("A", "B")), N], [({"A": 1, "B": 11}, 6)], None),
    "shape_returned_as_tuple": (  # item 12
        [], ["y.shape"], [Input("y", "float", ("A",))], [({"A": 3}, 0)], True),
    "symint_shift": (  # item 13
        ["s0 = y.size(-1) >> 1"], ["s0"], [Input("y", "float", ("A",))], [({"A": 4}, 0)], True),
    "amax_of_an_empty_dim_changes_the_exception": (  # item 14
        ["v1 = y.amax(1)"], ["v1"], [Input("y", "float", ("A", "B"))], [({"A": 0, "B": 0}, 0)], True),
    # ---- the 30-minute run of seed 20261123 (issue 10's closing run)
    "stride_of_an_input_whose_size_oblivious_dim_is_zero": (  # the stride was s1*s2, not s1*max(s2, 1)
        [], ["y.stride()"], [Input("y", "float", ("C", "C", "A"))],
        [({"A": 1, "C": 0}, 0), ({"A": 0, "C": 2}, 0), ({"A": 0, "C": 3}, 0)], None),
    "broadcast_of_a_data_dependent_vector_with_its_first_element": (  # min(1, u0) stretches, no assert
        ["v9 = y[(y > 0).nonzero(as_tuple=True)]", "v10 = torch.broadcast_tensors(v9, v9[:1])[1]"], ["v10"],
        [Input("y", "float", ("B", "D"))], [({"B": 2, "D": 3}, 0), ({"B": 1, "D": 1}, 0, False, 5),
                                             ({"B": 3, "D": 2}, 0, False, 7)], None),
    # ---- the 30-minute run of seed 77231123 (with speculation)
    "int_of_data_after_an_in_place_change_of_a_view": (  # the real-value run changed the input a 2nd time
        ["v2 = y.view_as(y)", "v2.add_(1)", "v6 = y[: int((y > 0).sum())]"], ["v6", "y"],
        [Input("y", "float", ("D",))], [({"D": 1}, 0), ({"D": 4}, 0)], None),
    "stride_of_an_empty_computed_tensor": (  # the CPU kernel gives (1, 0), the meta kernel (1, 1)
        ["v0 = y * y.numel()"], ["v0.stride()"], [Input("y", "float", ("C", "D"))], [({"C": 0, "D": 1}, 0)], None),
    # ---- the 30-minute run of seed 99231123
    "stride_of_a_reshape_that_is_a_view_or_a_copy_by_size": (  # (0,) when reshape made a view, (1,) a copy
        ["v1 = y.std(0, keepdim=True)", "v2 = v1[:, :, None].expand(-1, -1, 3)", "v3 = v2.reshape(-1)"],
        ["v3.stride()"], [Input("y", "float", ("A", "C"))],
        [({"A": 0, "C": 0}, 0), ({"A": 1, "C": 2}, 0), ({"A": 0, "C": 1}, 0)], None),
    "stride_of_a_size_one_dim_of_a_computed_tensor": (  # CPU (2, 1, 2), meta (2, 1, 1)
        ["v2 = x.movedim(0, -1)", "v3 = v2 * 1"], ["v3.stride()"], [Input("x", "float", ("B", "C", "D"))],
        [({"B": 1, "C": 1, "D": 2}, 0)], False),
    "slice_of_a_slice_from_a_data_dependent_start_took_a_minute": (  # nested exact clamps: sympy blew up
        ["v0 = x[m]", "v1 = v0[: v0.size(0) // 2]", "v2 = v1[v1.size(0) // 3 : v1.size(0) - 1]",
         "v5 = F.pad(v2, (0, v2.size(0) // 2), value=-1.0)", "v6 = v5.flatten()[v5.flatten().argmax().item():]",
         "v7 = v6[v6.size(0) // 3 : v6.size(0) - 1]"],
        ["v7"], [Input("x", "float", ("D", "A", "B")), Input("m", "mask", ("D", "A", "B"))],
        [({"A": 8, "B": 6, "D": 5}, 0)], None),
    "where_of_a_data_dependent_matrix_and_its_last_column": (  # max(0, u0 - max(0, u0 - 1)) is 1 or u0
        ["v0 = y[torch.arange(y.size(0)) % 1 == 0]", "v3 = v0.mT", "v6 = v3[..., -1:]",
         "v7 = torch.where(v3 > 0, v6, v3)"], ["v7"], [Input("y", "float", ("D", "A"))],
        [({"A": 0, "D": 2}, 0), ({"A": 3, "D": 1}, 0), ({"A": 2, "D": 4}, 0)], None),
    "broadcast_of_a_unique_result_and_its_tail_when_it_has_one_element": (  # u0 vs u0 - 1: 1 vs 0 is 0
        ["v4 = y.mean(-1)", "v5 = v4 / (y.abs() + 1)", "v6 = torch.unique(v5.round())",
         "v7 = v6.split([1, v6.size(-1) - 1], -1)[1]", "v8 = v6 / (v7.abs() + 1)"], ["v8"],
        [Input("y", "float", ("A",))], [({"A": 2}, 0, False, 1157747298250000)], None),
    "narrow_by_half_of_an_even_size_got_a_float": (  # FloorDiv(n/2, 2) of an even n printed `n/2 // 2`
        ["v1 = torch.cat([F.pad(y, (1, 1, 0, 1))] * 2, 1)", "v9 = v1.reshape(-1)[..., 1::2]",
         "v12 = v9.narrow(-1, 0, v9.size(-1) // 2)"], ["v12"], [Input("y", "float", ("C", "D"))],
        [({"C": 0, "D": 0}, 0), ({"C": 1, "D": 1}, 0), ({"C": 2, "D": 3}, 0)], None),
    # ---- the `try:` template (gen._try): what the trace raises into a program that catches it (findings.md)
    "sqrt_of_a_negative_size_caught_is_not_guarded": (  # T1: the graph runs math.sqrt(s0 - 3) outside the try
        ["try:\n    v0 = y * math.sqrt(y.size(0) - 3)\nexcept ValueError:\n    v0 = y[:1] - 1"], ["v0"],
        [Input("y", "float", ("A",))], [({"A": 3}, 0), ({"A": 2}, 0)], True),
    "sqrt_of_a_negative_size_caught_at_trace_time_is_not_guarded": (  # T1: the handler's path, then A=5
        ["try:\n    v0 = y * math.sqrt(y.size(0) - 3)\nexcept ValueError:\n    v0 = y[:1] - 1"], ["v0"],
        [Input("y", "float", ("A",))], [({"A": 3}, 0), ({"A": 2}, 0), ({"A": 5}, 0)], None),
    "expand_of_a_data_dependent_size_asserts_outside_the_try": (  # T2: the runtime check escapes the handler
        ["v0 = y[torch.arange(y.size(0)) % 1 == 0]", "try:\n    v1 = v0.expand(1)\nexcept RuntimeError:\n    v1 = v0[:1] - 1"],
        ["v1"], [Input("y", "float", ("A",))], [({"A": 2}, 0)], True),
    "argmax_of_an_empty_data_dependent_tensor_raises_outside_the_try": (  # T2: the graph's argmax raises
        ["try:\n    v0 = y[y > 100]\n    v0 = v0[v0.argmax().item():]\nexcept Exception:\n    v0 = y[:1] - 1"], ["v0"],
        [Input("y", "float", ("A",))], [({"A": 3}, 0)], None),
    "a_tensor_times_a_sum_of_tolist_raises_a_type_error_the_program_catches": (  # T3: FakeTensor * SymFloat
        ["try:\n    v0 = y * sum(y.flatten()[:1].tolist())\nexcept Exception:\n    v0 = y * 0.5"], ["v0"],
        [Input("y", "float", ("A",))], [({"A": 3}, 0)], None),
    "argmax_of_an_empty_tensor_raises_a_runtime_error_the_program_catches": (  # T4: eager raises IndexError
        ["try:\n    v0 = y.flatten()[y.flatten().argmax().item():]\nexcept RuntimeError:\n    v0 = y.reshape(-1) * 0.5"],
        ["v0"], [Input("y", "float", ("A", "B"))], [({"A": 0, "B": 2}, 0)], None),
    "speculation_key_error_caught_by_the_program": (  # T5: tracing/speculate.py's KeyError, into the program
        ["v0 = x.view(x.size(0), -1)", "try:\n    v1 = v0 * int((v0 > 0).sum())\nexcept Exception:\n    v1 = v0 * 0.5"],
        ["v1"], [Input("x", "float", ("A", "B"))], [({"A": 0, "B": 0}, 0), ({"A": 3, "B": 1}, 0)], None),
    # ---- `contextlib.suppress` (gen._suppress): an op inside a manager that swallows what it raises
    "argmax_of_an_empty_tensor_inside_suppress_raises_out_of_the_graph": (  # the graph's argmax raised
        ["v1 = x.flatten() * 1.0\nwith contextlib.suppress(Exception):\n    v1 = x.flatten()[x.flatten().argmax().item():]"],
        ["v1.shape"], [Input("x", "float", ("A", "B"))], [({"A": 0, "B": 0}, 0), ({"A": 1, "B": 1}, 0), ({"A": 0, "B": 0}, 0)], None),
    "narrow_past_the_size_inside_suppress_raises_out_of_the_graph": (  # a run-time check on a dynamic size
        ["v0 = y * 0.5\nwith contextlib.suppress(RuntimeError):\n    v0 = y.narrow(0, 1, 2)"], ["v0"],
        [Input("y", "float", ("A",))], [({"A": 4}, 0), ({"A": 3}, 0), ({"A": 1}, 0)], True),
}


OPEN: set = set()  # cases still failing on main (none)


def _program(stmts, ret, inputs) -> Program:
    body = [Stmt(s.split("\n"), _name(s)) for s in stmts]
    return Program(inputs, body, ret)


def _name(stmt: str) -> str:
    """The name a statement assigns (a `try:` block's too)."""
    m = re.search(r"^\s*(\w+) = ", stmt, re.M)
    return m.group(1) if m else stmt.split("=")[0].strip()


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=False, reason="open: findings.md"))
    if n in OPEN else n for n in CASES])
def test_fuzz_finding_matches_eager(name):
    stmts, ret, inputs, calls, mode = CASES[name]
    prog = _program(stmts, ret, inputs)
    calls = [Call(dict(c[0]), c[1], c[3] if len(c) > 3 else 7 + i, len(c) > 2 and c[2], c[4] if len(c) > 4 else 1.5)
             for i, c in enumerate(calls)]
    failures = check_program(prog, calls, modes=(mode,))
    assert not failures, f"{failures[0].headline()}\n{prog.source()}"
