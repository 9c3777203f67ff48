"""Tests for dynashape/symbolic/printer.py: printed Python evaluates like sympy."""
import math

import pytest
import sympy
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.symbolic.strategies import divide
from dynashape.symbolic.functions import (
    FLOAT_OPS, MATH_CALLS, CeilDiv, CeilToInt, FloorDiv, FloorToInt, IntTrueDiv, Max, Min, Mod, ToFloat, TruncToInt,
)
from dynashape.symbolic.printer import pyexpr, sympy_str

s0, s1, s2 = sympy.symbols("s0 s1 s2", integer=True, positive=True)
x, y = sympy.symbols("x y", integer=True)
POSITIVE = [s0, s1, s2]
SYMS = POSITIVE + [x, y]

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
# Only these builtins and `math` (every namespace printed text runs in has it: floor and ceil of a float are
# math's, which raise OverflowError for an infinity as the user's math.floor does): never sympy or torch.
BUILTINS = {"int": int, "float": float, "max": max, "min": min, "abs": abs}

# ------------------------------------------------------------------ random expressions

int_leaves = st.one_of(st.sampled_from(SYMS), st.integers(-7, 7).map(sympy.Integer))




def _int_extend(children):
    pair = st.tuples(children, children)
    nonzero = children.filter(lambda e: e != 0)
    by_divisor = st.tuples(children, nonzero)
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]),
        pair.map(lambda t: t[0] - t[1]),
        pair.map(lambda t: t[0] * t[1]),
        children.map(lambda e: -e),
        divide(FloorDiv, by_divisor),
        divide(Mod, by_divisor),
        divide(CeilDiv, by_divisor),
        pair.map(lambda t: Max(*t)),
        pair.map(lambda t: Min(*t)),
        children.map(sympy.Abs),
        st.tuples(children, st.integers(2, 3)).map(lambda t: t[0] ** t[1]),
        st.tuples(st.integers(-3, 3).filter(bool), st.sampled_from(POSITIVE)).map(lambda t: t[0] ** t[1]),
        st.tuples(divide(IntTrueDiv, by_divisor), st.sampled_from([FloorToInt, CeilToInt, TruncToInt])).map(
            lambda t: t[1](t[0])),
    )


int_exprs = st.recursive(int_leaves, _int_extend, max_leaves=7)


def _float_extend(children):
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, st.integers(-5, 5)).map(lambda t: t[0] * t[1]),
        st.tuples(children, st.sampled_from([FloorToInt, CeilToInt, TruncToInt])).map(
            lambda t: ToFloat(t[1](t[0]))),
    )


float_leaves = st.one_of(
    divide(IntTrueDiv, st.tuples(int_exprs, int_exprs.filter(lambda e: e != 0))),
    int_exprs.map(ToFloat),
    st.tuples(int_exprs, st.sampled_from(POSITIVE)).map(lambda t: t[0] / t[1]),  # sympy Rational math
    st.tuples(int_exprs, st.integers(2, 5)).map(lambda t: t[0] * sympy.Rational(1, t[1])),
    st.floats(-100, 100, allow_nan=False).map(sympy.Float),
)
float_exprs = st.recursive(float_leaves, _float_extend, max_leaves=3)
_RELS = [sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge]
small_int_exprs = st.recursive(int_leaves, _int_extend, max_leaves=4)
relations = st.tuples(st.sampled_from(_RELS), small_int_exprs, small_int_exprs).map(
    lambda t: t[0](t[1], t[2]))
bool_exprs = st.recursive(relations, lambda c: st.one_of(
    st.tuples(c, c).map(lambda t: sympy.And(*t)),
    st.tuples(c, c).map(lambda t: sympy.Or(*t)),
    c.map(sympy.Not)), max_leaves=4)
envs = st.fixed_dictionaries(
    {s.name: (st.integers(1, 30) if s in POSITIVE else st.integers(-30, 30)) for s in SYMS})


def _both(expr, env):
    """(sympy's value, the printed text's value under plain Python)."""
    text = pyexpr(expr)
    try:
        want = expr.xreplace({s: sympy.Integer(env[s.name]) for s in SYMS})
    except ZeroDivisionError:
        assume(False)
    assume(want.is_finite is not False and want is not sympy.nan)
    try:
        got = eval(text, {"__builtins__": BUILTINS, "math": math}, dict(env))
    except ZeroDivisionError:
        pytest.fail(f"{text!r} divides by zero but sympy gave {want}")
    return want, got, text


@SETTINGS
@given(int_exprs, envs)
def test_printed_int_expression_evaluates_like_sympy(expr, env):
    want, got, text = _both(expr, env)
    if want.is_Integer:
        assert type(got) is int and got == int(want), (expr, text, env)
    else:  # negative powers: sympy keeps an exact Rational, Python makes a float
        assert math.isclose(got, float(want), rel_tol=1e-12), (expr, text, env)


# integer-valued products that sympy keeps with a rational coefficient: `s1*(2*s0 - 2*(s0 // 2))/2`
int_valued_with_rationals = st.tuples(small_int_exprs, small_int_exprs, small_int_exprs, st.integers(2, 5)).map(
    lambda t: sympy.Rational(1, t[3]) * t[0] * (t[3] * t[1] - t[3] * t[2]) + t[1])


@SETTINGS
@given(int_valued_with_rationals, envs)
def test_integer_printing_computes_sizes_in_ints_exactly(expr, env):
    _assert_prints_as_exact_int(expr, env)


@SETTINGS
@given(int_valued_with_rationals, small_int_exprs, st.integers(2, 5), st.sampled_from(["floordiv", "mod", "max", "min"]),
       envs)
def test_int_functions_of_int_values_with_rationals_stay_ints(inner, other, k, fn, env):
    # fuzz: FloorDiv(n/2, 2) of an n sympy knew was even printed `n/2 // 2`, a float, and
    # `narrow(-1, 0, size)` refused it
    expr = {"floordiv": lambda: FloorDiv(inner, k), "mod": lambda: Mod(inner, k),
            "max": lambda: Max(inner, other), "min": lambda: Min(inner, other)}[fn]()
    _assert_prints_as_exact_int(expr, env)


def _assert_prints_as_exact_int(expr, env):
    """pyexpr(expr, integer=True) evaluates to sympy's value at env, as a Python int."""
    text = pyexpr(expr, integer=True)
    try:
        want = expr.xreplace({s: sympy.Integer(env[s.name]) for s in SYMS})
    except ZeroDivisionError:
        assume(False)
    assume(want.is_Integer)
    got = eval(text, {"__builtins__": BUILTINS, "math": math}, dict(env))
    assert type(got) is int and got == int(want), (expr, text, env)


@SETTINGS
@given(float_exprs, envs)
def test_printed_float_expression_evaluates_like_sympy(expr, env):
    want, got, text = _both(expr, env)
    assert math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-9), (expr, text, env)


@SETTINGS
@given(bool_exprs, envs)
def test_printed_relation_evaluates_like_sympy(expr, env):
    want, got, text = _both(expr, env)
    assert got is bool(want), (expr, text, env)


# ------------------------------------------------------------------ spelling


class _Tensor:
    def __init__(self, *shape):
        self.shape = shape

    def size(self):
        return self.shape


def test_name_of_spells_symbols_as_sources():
    names = {s0: "L['x'].size()[0]", s1: "L['y'].size()[0]"}
    text = pyexpr(sympy.Eq(Mod(s0 + s1, 8), 0), names.__getitem__)
    assert text == "(L['x'].size()[0] + L['y'].size()[0]) % 8 == 0"
    assert eval(text, {}, {"L": {"x": _Tensor(5), "y": _Tensor(11)}}) is True
    assert pyexpr(FloorDiv(s0, 2), names.__getitem__) == "L['x'].size()[0] // 2"


def test_non_atomic_symbol_spelling_is_parenthesised():
    assert pyexpr(2 * s0, lambda s: "a + b") == "2*(a + b)"


@pytest.mark.parametrize("expr, text", [
    (s0 + s1 * s2, "s0 + s1*s2"),
    ((s0 + s1) * s2, "s2*(s0 + s1)"),
    (s0 - s1 - 1, "s0 - s1 - 1"),
    (2 * Mod(s0, 3), "2*(s0 % 3)"),
    (FloorDiv(s0 + s1, 2), "(s0 + s1) // 2"),
    (FloorDiv(s0, s1 * s2), "s0 // (s1*s2)"),
    (FloorDiv(s0 * s1, 3), "s0*s1 // 3"),
    (Mod(FloorDiv(x, s0), 4), "x // s0 % 4"),
    (FloorDiv(x, Mod(s0, 3) + 1), "x // (s0 % 3 + 1)"),
    (CeilDiv(s0, 2), "-(-s0 // 2)"),
    ((-x) ** 3 + x**2, "x**2 - x**3"),
    ((x + 1) ** 2, "(x + 1)**2"),
    (3 * s0 / 2, "3*s0/2"),
    (s0 / (s1 * s2), "s0/(s1*s2)"),
    (Max(s0, 3 * x), "max(s0, 3*x)"),
    (IntTrueDiv(s0, s1 + 1), "s0 / (s1 + 1)"),
    (FloorToInt(IntTrueDiv(x, 3)), "math.floor(x / 3)"),
    (TruncToInt(IntTrueDiv(x, 3)), "int(x / 3)"),
    (sympy.Not(sympy.Eq(s0, 3)), "s0 != 3"),
    (sympy.Or(sympy.And(s0 > 2, x < 3), sympy.Eq(x, 5)), "s0 > 2 and x < 3 or x == 5"),
    (sympy.And(sympy.Or(s0 > 2, x < 3), sympy.Eq(x, 5)), "x == 5 and (s0 > 2 or x < 3)"),
])
def test_parentheses_are_minimal_but_correct(expr, text):
    assert pyexpr(expr) == text


def test_number_side_of_a_relation_prints_on_the_right():
    assert pyexpr(sympy.Le(2, s0)) == "s0 >= 2"
    assert pyexpr(sympy.Eq(4, s0, evaluate=False)) == "s0 == 4"
    assert pyexpr(sympy.Lt(s0, 30)) == "s0 < 30"


def test_infinity_prints_without_imports():
    text = pyexpr(sympy.Le(s0, sympy.oo, evaluate=False))
    assert text == "s0 <= float('inf')"
    assert eval(text, {"__builtins__": BUILTINS, "math": math}, {"s0": 10**30}) is True


def test_booleans_print_as_python_literals():
    assert pyexpr(sympy.true) == "True" and pyexpr(sympy.false) == "False"


def test_unprintable_expression_raises():
    with pytest.raises(TypeError):
        pyexpr(sympy.sin(x))


def test_sympy_str_uses_pytorch_spelling():
    assert sympy_str(sympy.Eq(s0, 4)) == "Eq(s0, 4)"
    assert sympy_str(FloorDiv(s0, 2)) == "FloorDiv(s0, 2)"
    assert sympy_str(2 * Mod(s0, 3)) == "2*Mod(s0, 3)"
    assert sympy_str(s0 + s1) == "s0 + s1"


# ------------------------------------------------------------------ float formulas, as Python rounds them
f0 = sympy.Symbol("f0", real=True)
_PY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b}
float_leaves = st.one_of(st.just((f0, lambda v: v)),
                         st.floats(-1e3, 1e3, allow_nan=False).filter(bool).map(lambda c: (sympy.Float(c), lambda v: c)))
float_formulas = st.recursive(float_leaves, lambda ch: st.tuples(st.sampled_from(sorted(_PY)), ch, ch).map(
    lambda t: (FLOAT_OPS[t[0]](t[1][0], t[2][0]), lambda v, op=_PY[t[0]], a=t[1][1], b=t[2][1]: op(a(v), b(v)))),
    max_leaves=6)


@SETTINGS
@given(float_formulas, st.floats(-1e3, 1e3, allow_nan=False))
def test_a_printed_float_formula_rounds_as_the_program_does(formula, v):
    # sympy's Add/Mul would reassociate `f0*0.1*3` into `0.3*f0`: another rounding than the program's
    expr, program = formula
    try:
        want = program(v)
    except ZeroDivisionError:
        assume(False)
    got = eval(pyexpr(expr), {"__builtins__": BUILTINS, "math": math}, {"f0": v})
    assert got == want or (math.isnan(got) and math.isnan(want)), (expr, pyexpr(expr), v)


def test_float_formulas_and_math_calls_print_as_python():
    assert pyexpr(FLOAT_OPS["mul"](FLOAT_OPS["mul"](f0, 0.1), 3)) == "f0 * 0.1 * 3"
    assert pyexpr(FLOAT_OPS["sub"](f0, FLOAT_OPS["add"](f0, 1.0))) == "f0 - (f0 + 1.0)"
    assert pyexpr(FLOAT_OPS["pow"](FLOAT_OPS["add"](f0, 1), 2)) == "(f0 + 1) ** 2"
    assert pyexpr(1 / MATH_CALLS["sqrt"](s0)) == "1/math.sqrt(s0)"


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 2.5, -2.5, 1e300])
def test_floor_and_ceil_of_a_float_raise_and_round_as_maths(value):
    # `int(inf // 1)` raised ValueError where the user's math.floor(x.item()) raises OverflowError
    f0 = sympy.Symbol("f0", real=True)
    for fn, want_fn in ((FloorToInt, math.floor), (CeilToInt, math.ceil)):
        text = pyexpr(fn(f0))
        try:
            want = want_fn(value)
        except (OverflowError, ValueError) as e:
            with pytest.raises(type(e)):
                eval(text, {"__builtins__": BUILTINS, "math": math}, {"f0": value})
        else:
            assert eval(text, {"__builtins__": BUILTINS, "math": math}, {"f0": value}) == want
