"""The dynamic_shapes spec against the example inputs (dynashape/export/spec.py)."""
import math
import re
import warnings

import pytest
import torch

import dynashape as ds
from dynashape import Dim
from dynashape.export import DerivedDim, SpecError
from tests.export.common import check_vs_eager


def add(x, y):
    return x + y


def total(x, ys, zs):
    return x + ys[0] + ys[1] + zs["a"]


X, Y = torch.randn(5, 3), torch.randn(5, 3)


@pytest.mark.parametrize("spec,path", [
    ({"z": {0: Dim("d")}}, "dynamic_shapes['z']"),
    (({0: Dim("d")},), "dynamic_shapes"),
    ({"x": {2: Dim("d")}}, "dynamic_shapes['x'][2]"),
    ({"x": {-3: Dim("d")}}, "dynamic_shapes['x'][-3]"),
    ({"x": {"0": Dim("d")}}, "dynamic_shapes['x']"),
    ({"x": (Dim("d"),)}, "dynamic_shapes['x']"),
    ({"x": Dim("d")}, "dynamic_shapes['x']"),
    ({"x": {0: "batch"}}, "dynamic_shapes['x'][0]"),
    ({"x": {0: 4}}, "dynamic_shapes['x'][0]"),
    ({"x": {0: True}}, "dynamic_shapes['x'][0]"),
    ([None, {1: 1.5}], "dynamic_shapes[1][1]"),
    ("x", "dynamic_shapes"),
])
def test_malformed_specs_raise_value_error_naming_the_path(spec, path):
    with pytest.raises(ValueError, match=re.escape(path)) as e:
        ds.export(add, (X, Y), dynamic_shapes=spec)
    assert isinstance(e.value, SpecError)


@pytest.mark.parametrize("spec,path", [
    ({"ys": ({0: Dim("d")},)}, "dynamic_shapes['ys']"),
    ({"ys": {0: Dim("d")}}, "dynamic_shapes['ys']"),
    ({"zs": {"b": {0: Dim("d")}}}, "dynamic_shapes['zs']['b']"),
    ({"zs": [{0: Dim("d")}]}, "dynamic_shapes['zs']"),
    ({"ys": [None, {0: Dim("d"), 3: None}]}, "dynamic_shapes['ys'][1][3]"),
])
def test_nested_specs_follow_the_input_structure(spec, path):
    args = (torch.randn(4), [torch.randn(4), torch.randn(4)], {"a": torch.randn(4)})
    with pytest.raises(SpecError, match=re.escape(path)):
        ds.export(total, args, dynamic_shapes=spec)


def test_nested_specs_make_nested_dims_dynamic():
    args = (torch.randn(4), [torch.randn(4), torch.randn(4)], {"a": torch.randn(4)})
    d = Dim("d")
    ep = ds.export(total, args, dynamic_shapes={"x": (d,), "ys": [(d,), {0: d}], "zs": {"a": {0: d}}})
    assert list(ep.range_constraints) == ["s0"]
    out = ep(torch.ones(7), [torch.ones(7), torch.ones(7)], {"a": torch.ones(7)})
    assert out.shape == (7,)


def test_a_non_tensor_input_takes_no_dims():
    with pytest.raises(SpecError, match=re.escape("dynamic_shapes['s']")):
        ds.export(lambda x, s: x * s, (X, 2.0), dynamic_shapes={"x": None, "s": Dim("d")})


def test_an_example_outside_its_dim_range_is_not_in_range():
    # PyTorch: test_export_constraints_error_not_in_range
    with pytest.raises(ValueError, match="not in range"):
        ds.export(lambda x: x + 1, (torch.zeros(3),), dynamic_shapes={"x": {0: Dim("dim_x", min=6)}})
    with pytest.raises(ValueError, match="not in range"):
        ds.export(lambda x: x + 1, (torch.zeros(6),), dynamic_shapes={"x": {0: Dim.DYNAMIC(max=4)}})


@pytest.mark.parametrize("spec", [Dim("b"), Dim.DYNAMIC, 2 * Dim("h")])
def test_size_zero_or_one_for_a_dim_is_an_error_with_advice(spec):
    x = torch.randn(1 if not isinstance(spec, DerivedDim) else 2, 3)
    with pytest.raises(SpecError, match="0 and 1 are specialized") as e:
        ds.export(lambda x: x * 2, (x,), dynamic_shapes={"x": {0: spec}})
    assert "Dim.AUTO" in str(e.value)


def test_size_one_for_auto_is_specialized_with_a_warning():
    with pytest.warns(UserWarning, match="specialized"):
        ep = ds.export(lambda x: x * 2, (torch.randn(1, 3),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert ep.range_constraints == {}
    with pytest.raises(RuntimeError, match=re.escape("args[0].shape[0] to be equal to 1, but got 4")):
        ep(torch.randn(4, 3))


def test_dims_with_one_name_are_one_dim_and_need_the_same_bounds():
    ep = ds.export(add, (X, Y), dynamic_shapes={"x": {0: Dim("b", max=9)}, "y": {0: Dim("b", max=9)}})
    assert list(ep.range_constraints) == ["s0"]
    with pytest.raises(SpecError, match="named 'b'"):
        ds.export(add, (X, Y), dynamic_shapes={"x": {0: Dim("b", max=9)}, "y": {0: Dim("b")}})


def test_one_dim_on_two_different_example_sizes_is_an_error():
    d = Dim("dx")
    with pytest.raises(SpecError, match=r"args\[1\]\.shape\[0\].* to be equal to dx, where dx = 5, but got 6"):
        ds.export(add, (X, torch.randn(6, 3)), dynamic_shapes=({0: d}, {0: d}))


def test_a_derived_dim_the_example_does_not_fit_is_an_error():
    # PyTorch: test_derived_dim_integer
    dimx = Dim("dimx", min=3, max=6)
    with pytest.raises(SpecError, match=r"shape.*= 10 to be of the form 2\*dimx \+ 1, where dimx is an integer"):
        ds.export(lambda w: w[::2], (torch.randn(10),), dynamic_shapes=({0: dimx * 2 + 1},))


def test_int_specs_must_equal_the_example_and_are_static():
    ep = ds.export(add, (X, Y), dynamic_shapes={"x": {0: 5, 1: None}, "y": (Dim.STATIC, 3)})
    assert ep.range_constraints == {}


def test_specs_by_keyword_argument():
    ep = ds.export(add, (X,), {"y": Y}, dynamic_shapes={"x": {0: Dim("b")}, "y": {0: Dim("b")}})
    assert ep(torch.ones(8, 3), y=torch.ones(8, 3)).shape == (8, 3)
    assert ep(x=torch.ones(8, 3), y=torch.ones(8, 3)).shape == (8, 3)
    with pytest.raises(RuntimeError, match=re.escape("kwargs['y'].shape[0] to be equal to 8, but got 5")):
        ep(torch.ones(8, 3), y=torch.ones(5, 3))


def test_int_inputs_take_hints_but_not_named_dims():
    with pytest.raises(SpecError, match="Dim.DYNAMIC or Dim.AUTO"):
        ds.export(lambda x, n: x * n, (X, 3), dynamic_shapes=(None, Dim("n")))
    ep = ds.export(lambda x, n: x[:n] * n, (X, 3), dynamic_shapes=(None, Dim.DYNAMIC))
    torch.testing.assert_close(ep(X, 4), X[:4] * 4)


def test_hints_warn_nothing_when_the_example_is_fine():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds.export(add, (X, Y), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}})


# ---------------------------------------------------------------------------- sizes 0 and 1 inside the user's range
def _small_size_programs():
    yield "scale", lambda x: x * 2, Dim("dx", min=1, max=2)
    yield "broadcast with a static row", lambda x: (x + torch.ones(1, 3)).sum(0), Dim("dx", min=1, max=16)
    yield "view and size arithmetic", lambda x: x.reshape(-1) * x.size(0), Dim("dx", min=0, max=9)
    yield "slice", lambda x: x[: x.size(0)] + x.flip(0), Dim("dx", min=1)


@pytest.mark.parametrize("name,fn,dim", list(_small_size_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_a_dim_with_min_below_two_accepts_those_sizes(name, fn, dim):
    ep = ds.export(fn, (torch.randn(2, 3),), dynamic_shapes={"x": {0: dim}})
    (lo, hi), = ep.range_constraints.values()
    assert (lo, hi) == (dim._min, dim._max if dim._max is not None else math.inf)  # the user's range
    sizes = [n for n in (0, 1, 2, 3, 7) if dim._min <= n <= (dim._max or 99)]
    check_vs_eager(ep, fn, (torch.randn(2, 3),), extra=[(torch.randn(n, 3),) for n in sizes])


def test_a_branch_on_a_small_size_is_a_violation_not_a_silent_specialization():
    with pytest.raises(ds.ConstraintViolationError, match=r"dx >= 1 satisfy the generated guard .* >= 2"):
        ds.export(lambda x: x[1:] if x.size(0) > 1 else x, (torch.randn(3, 3),),
                  dynamic_shapes={"x": {0: Dim("dx", min=1)}})
