"""Violations and suggested fixes (dynashape/export/solve.py).

The oracle for a suggested fix is to paste it: run the fix lines in a namespace
holding the user's dims, rebuild the spec from that namespace, and export again,
which must succeed."""
import re

import pytest
import torch

import dynashape as ds
from dynashape import Dim
from tests.export.common import check_vs_eager


def paste_fixes(err: Exception, dims: dict) -> dict:
    """The user's dims after running the `Suggested fixes:` lines of the error."""
    text = str(err)
    assert "Suggested fixes:" in text, text
    lines = [ln.strip() for ln in text.split("Suggested fixes:", 1)[1].splitlines() if ln.strip()]
    ns = dict(dims, Dim=Dim)
    for ln in lines:
        if not ln.startswith("#"):
            exec(ln, ns)
    return ns


def export_then_paste(fn, args, make_spec, dims, *, match):
    with pytest.raises(ds.ConstraintViolationError, match=match) as e:
        ds.export(fn, args, dynamic_shapes=make_spec(dims))
    fixed = paste_fixes(e.value, dims)
    ep = ds.export(fn, args, dynamic_shapes=make_spec(fixed))
    return e.value, ep


def le6(x, c):
    if x.shape[0] <= 6:
        return x + 1, c + 2
    return x - 1, c - 2


def test_a_guard_that_narrows_a_dim_suggests_its_range():
    # PyTorch: test_non_strict_dynamic_shapes_suggested_fixes
    args = (torch.ones(5), torch.ones(4))
    err, ep = export_then_paste(
        le6, args, lambda d: ({0: d["dim"]}, None), {"dim": Dim("dim", min=3)},
        match=r"Constraints violated \(dim\)!(.*\n)*.*Not all values of dim.*satisfy the generated guard(.*\n)*.*"
              r"Suggested fixes:(.*\n)*.*dim = Dim\('dim', min=3, max=6\)")
    assert "le6" not in str(err) and "test_solve.py" in str(err)  # the user's line, not ours
    assert ep.range_constraints == {"s0": (3, 6)}


def test_an_unbounded_dim_gets_only_the_bound_it_needs():
    with pytest.raises(ds.ConstraintViolationError, match=re.escape("dim = Dim('dim', max=6)")):
        ds.export(le6, (torch.ones(5), torch.ones(4)), dynamic_shapes=({0: Dim("dim")}, None))


class AddShifted(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


def test_dims_the_program_ties_get_a_derived_dim():
    err, ep = export_then_paste(
        AddShifted(), (torch.randn(5), torch.randn(6)), lambda d: ({0: d["dimx"]}, {0: d["dimy"]}),
        {"dimx": Dim("dimx", min=3, max=6), "dimy": Dim("dimy", min=4, max=7)},
        match=r"The values of dimy = L\['y'\]\.size\(\)\[0\] must always be related to the values of dimx")
    assert [v.kind for v in err.violations] == ["relation"]
    assert ep.range_constraints == {"s0": (3, 6)}


def test_two_dims_the_program_equates():
    err, ep = export_then_paste(
        lambda x, y: x * y, (torch.randn(4), torch.randn(4)), lambda d: ({0: d["a"]}, {0: d["b"]}),
        {"a": Dim("a"), "b": Dim("b")}, match=r"(?s)Constraints violated \(b\)!.*b = a")
    assert len(ep.range_constraints) == 1


def test_a_dim_equal_to_a_static_size_must_be_static():
    err, ep = export_then_paste(
        lambda x, y: x + y, (torch.randn(6), torch.randn(6)), lambda d: ({0: d["dx"]}, None), {"dx": Dim("dx")},
        match=r"(?s)Specializations unexpectedly required \(dx\)!.*Suggested fixes:\n  dx = 6")
    assert ep.range_constraints == {}


def test_specialized_derived_roots_are_fixed_at_the_root():
    # PyTorch: test_specialize_derived_dim_roots
    class Foo(torch.nn.Module):
        def forward(self, x, y):
            return x.reshape([-1]) + y

    err, ep = export_then_paste(
        Foo(), (torch.randn(6, 2), torch.randn(12)), lambda d: {"x": (d["dy"] - 6, 2), "y": (d["dy"],)},
        {"dy": Dim("dy", min=6)},
        match=r"Specializations unexpectedly required \(dy\)!(.*\n)*.*.*solving the guards generated for dy - 6.*"
              r"resulted in a specialized value of 6(.*\n)*.*Suggested fixes(.*\n)*.*.*dy = 12(.*\n)*.*")
    assert "dy - 6 = 6" not in str(err)  # no fix for the derived dim, only for its root


def test_a_divisibility_guard_suggests_a_derived_dim():
    def f(x):
        return x.view(2, -1)

    err, ep = export_then_paste(f, (torch.randn(8),), lambda d: ({0: d["dx"]},), {"dx": Dim("dx", max=100)},
                                match=r"(?s)Not all values of dx satisfy the generated guard.*dx = 2\*_dx")
    assert ep.range_constraints == {"s0": (2, 50)}
    torch.testing.assert_close(ep(torch.arange(10.0)), torch.arange(10.0).view(2, 5))


def test_a_relation_between_dims_no_range_expresses_is_reported():
    def f(x, y):
        if x.shape[0] > y.shape[0]:
            return x[: y.shape[0]] + y
        return x + y[: x.shape[0]]

    with pytest.raises(ds.ConstraintViolationError, match=r"(?s)Not all values of dx, dy satisfy the generated "
                                                          r"guard.*Suggested fixes:.*Dim\.AUTO"):
        ds.export(f, (torch.randn(6), torch.randn(4)), dynamic_shapes=({0: Dim("dx")}, {0: Dim("dy")}))
    ep = ds.export(f, (torch.randn(6), torch.randn(4)), dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    torch.testing.assert_close(ep(torch.ones(9), torch.ones(3)), f(torch.ones(9), torch.ones(3)))
    with pytest.raises(RuntimeError, match=r"Expected the inputs to satisfy .*L\['x'\]\.size\(\)\[0\].*"
                                           r"args\[0\]\.shape\[0\] = 3, args\[1\]\.shape\[0\] = 5"):
        ep(torch.ones(3), torch.ones(5))


def test_dynamic_dims_may_not_be_specialized():
    def f(x):
        return x.reshape(4, 3)

    with pytest.raises(ds.ConstraintViolationError, match=r"(?s)Specializations unexpectedly required.*"
                                                          r"Dim\.DYNAMIC.*constant \(12\)"):
        ds.export(f, (torch.randn(12),), dynamic_shapes=({0: Dim.DYNAMIC},))
    ep = ds.export(f, (torch.randn(12),), dynamic_shapes=({0: Dim.AUTO},))
    assert ep.range_constraints == {}


def test_bounded_dynamic_dims_report_narrowing():
    with pytest.raises(ds.ConstraintViolationError, match=r"(?s)Not all values of args\[0\]\.shape\[0\].*"
                                                          r"Dim\.DYNAMIC\(max=6\)"):
        ds.export(le6, (torch.ones(5), torch.ones(4)), dynamic_shapes=({0: Dim.DYNAMIC(max=10)}, None))


def test_every_violation_is_reported_once():
    def f(x, y, z):
        if x.shape[0] <= 6:
            return x + y[1:], z + 1
        return x, z

    with pytest.raises(ds.ConstraintViolationError) as e:
        ds.export(f, (torch.randn(5), torch.randn(6), torch.randn(3, 4)),
                  dynamic_shapes=({0: Dim("a")}, {0: Dim("b")}, {1: Dim("c")}))
    text = str(e.value)
    assert text.startswith("Constraints violated (a, b)!")
    fixes = text.split("Suggested fixes:")[1]
    assert "a = Dim('a', max=6)" in fixes and "b = a + 1" in fixes
    assert fixes.index("a = Dim") < fixes.index("b = a + 1")  # the root first, so it pastes in order


# ---------------------------------------------------------------------------- guards that hold on the declared range
@pytest.mark.parametrize("fn", [
    lambda x: x[: x.size(0) // 2 + 1] * 2,  # guards s0 - s0 // 2 >= 1: true for every s0 >= 1
    lambda x: x[: x.size(0) % 2 + 1] + 1,  # s0 % 2 + 1 <= s0: true for every s0 >= 2
    lambda x: x[: (x.size(0) + 1) // 2].sum(0),
], ids=["half-plus-one", "mod-plus-one", "ceil-half"])
def test_a_guard_that_holds_on_the_whole_declared_range_is_not_a_violation(fn):
    ep = ds.export(fn, (torch.randn(6, 4),), dynamic_shapes={"x": {0: Dim("b", max=64)}})
    assert list(ep.range_constraints.values()) == [(2, 64)]
    check_vs_eager(ep, fn, (torch.randn(6, 4),), extra=[(torch.randn(n, 4),) for n in (2, 3, 17, 64)])


def test_holds_on_ranges_proves_floor_division_guards_and_refuses_false_ones():
    import sympy
    from dynashape.export.solve import holds_on_ranges
    from dynashape.symbolic.functions import FloorDiv, Mod
    from dynashape.symbolic.ranges import ValueRanges, int_oo
    s = sympy.Symbol("s0", integer=True, nonnegative=True)
    unbounded = {s: ValueRanges(2, int_oo)}
    assert holds_on_ranges(sympy.Ge(s - FloorDiv(s, 2), 1), unbounded)
    assert holds_on_ranges(sympy.Le(Mod(s, 3), 2), unbounded)
    assert not holds_on_ranges(sympy.Ge(FloorDiv(s, 2), 2), unbounded)  # false at s = 2, 3
    assert not holds_on_ranges(sympy.Eq(Mod(s, 2), 0), {s: ValueRanges(2, 64)})
    assert holds_on_ranges(sympy.Ne(s * s, 7), {s: ValueRanges(2, 64)})  # value by value on a small range
