"""Tests for dynashape/symbolic/functions.py: simplifications must keep Python's values."""
import ast
import math
import pathlib

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynashape.symbolic.functions import (
    FLOAT_OPS, MATH_CALLS, CeilDiv, CeilToInt, CleanDiv, FloorDiv, FloorToInt, IntTrueDiv, Max, Min, Mod, ToFloat,
    TruncToInt,
)

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
x, y = sympy.symbols("x y", integer=True)
POSITIVE = [s0, s1]
SYMS = POSITIVE + [x, y]

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------ random expressions
# Each strategy yields (sympy expression, the same computation on Python ints).


def _sym(s):
    return s, lambda env: env[s.name]


def _const(c):
    return sympy.Integer(c), lambda env: c


def _bin(sop, pop):
    def build(pair):
        (a, fa), (b, fb) = pair
        return sop(a, b), lambda env: pop(fa(env), fb(env))
    return build


def _ceildiv(a, b):
    return -(-a // b)


leaves = st.one_of(st.sampled_from(SYMS).map(_sym), st.integers(-6, 6).map(_const))


def _divisors(children):
    """Divisors that are never zero: nonzero constants, positive symbols, |e| + 1."""
    abs_plus_one = children.map(lambda c: (sympy.Abs(c[0]) + 1, lambda env, f=c[1]: abs(f(env)) + 1))
    scaled = st.tuples(st.sampled_from(POSITIVE), st.integers(1, 4)).map(
        lambda t: (t[0] * t[1], lambda env, s=t[0].name, k=t[1]: env[s] * k))
    return st.one_of(st.integers(-6, 6).filter(bool).map(_const), st.sampled_from(POSITIVE).map(_sym),
                     scaled, abs_plus_one)


def _extend(children):
    divisors = _divisors(children)
    pair = st.tuples(children, children)
    by_divisor = st.tuples(children, divisors)

    # k*d + r over d: exercises the pull-out-multiples and cancellation rules
    def multiple_plus(t):
        (k, fk), (d, fd), (r, fr), op = t
        sop, pop = {"//": (FloorDiv, lambda a, b: a // b), "%": (Mod, lambda a, b: a % b)}[op]
        return sop(k * d + r, d), lambda env: pop(fk(env) * fd(env) + fr(env), fd(env))

    def nested(t):
        (e, fe), a, b = t
        return FloorDiv(FloorDiv(e, a), b), lambda env: fe(env) // a // b

    def scaled_both(t):
        (e, fe), (d, fd), g = t
        return FloorDiv(g * e, g * d), lambda env: (g * fe(env)) // (g * fd(env))

    return st.one_of(
        pair.map(_bin(lambda a, b: a + b, lambda a, b: a + b)),
        pair.map(_bin(lambda a, b: a - b, lambda a, b: a - b)),
        pair.map(_bin(lambda a, b: a * b, lambda a, b: a * b)),
        pair.map(_bin(Max, max)),
        pair.map(_bin(Min, min)),
        by_divisor.map(_bin(FloorDiv, lambda a, b: a // b)),
        by_divisor.map(_bin(Mod, lambda a, b: a % b)),
        by_divisor.map(_bin(CeilDiv, _ceildiv)),
        st.tuples(children, divisors, children, st.sampled_from(["//", "%"])).map(multiple_plus),
        st.tuples(children, st.integers(1, 5), st.integers(1, 5)).map(nested),
        st.tuples(children, divisors, st.integers(2, 6)).map(scaled_both),
    )


int_exprs = st.recursive(leaves, _extend, max_leaves=8)
envs = st.fixed_dictionaries(
    {s.name: (st.integers(1, 40) if s in POSITIVE else st.integers(-40, 40)) for s in SYMS})


def _eval(expr, env):
    return expr.xreplace({s: sympy.Integer(env[s.name]) for s in SYMS})


@SETTINGS
@given(int_exprs, envs)
def test_simplified_expression_evaluates_like_python(e, env):
    expr, py = e
    value, want = _eval(expr, env), py(env)
    # sympy's own Max/Min may leave a numeric `Min(0, 1)` unevaluated (inside a sum too: `1 + Max(0, 1)`,
    # hypothesis found); ours must fold
    assert value.is_number and not value.has(FloorDiv, Mod, CeilDiv), (expr, value)
    assert int(value) == want, (expr, env)
    # the sign facts sympy derives (partly from our _eval_is_* hooks) must hold too
    assert expr.is_nonnegative is not True or want >= 0, expr
    assert expr.is_positive is not True or want > 0, expr
    assert expr.is_nonpositive is not True or want <= 0, expr


# ------------------------------------------------------------------ number folding


@given(st.integers(-10**6, 10**6), st.integers(-50, 50).filter(bool))
def test_floordiv_and_mod_of_numbers_fold_like_python(a, b):
    assert FloorDiv(a, b) == a // b
    assert Mod(a, b) == a % b
    assert CeilDiv(a, b) == -(-a // b)


@given(st.integers(-10**6, 10**6), st.integers(-50, 50).filter(bool))
def test_int_true_div_of_numbers_is_python_float_division(a, b):
    assert float(IntTrueDiv(a, b)) == a / b


@given(st.floats(-1e6, 1e6, allow_nan=False))
def test_float_to_int_conversions_round_like_python(f):
    assert FloorToInt(sympy.Float(f)) == math.floor(f)
    assert CeilToInt(sympy.Float(f)) == math.ceil(f)
    assert TruncToInt(sympy.Float(f)) == int(f)


@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False).filter(bool),
       st.sampled_from(["add", "sub", "mul", "truediv", "floordiv", "mod"]))
def test_float_operations_of_numbers_fold_to_pythons_value_exactly(a, b, op):
    import operator
    want = getattr(operator, op)(a, b)
    got = FLOAT_OPS[op](sympy.Float(a), sympy.Float(b))
    if not math.isfinite(want):  # overflow: left to the program, which computes inf when it runs
        assert got.func is FLOAT_OPS[op]
    else:
        assert float(got) == want


def test_float_operations_stay_as_written_over_symbols():
    f = sympy.Symbol("f", real=True)
    assert FLOAT_OPS["sub"](FLOAT_OPS["add"](f, 1e16), 1e16) != f  # sympy's Add would cancel to f
    assert FLOAT_OPS["mul"](FLOAT_OPS["mul"](f, 0.1), 3).args[1] == 3  # not 0.3*f
    assert FLOAT_OPS["truediv"](f, 0).func is FLOAT_OPS["truediv"]  # the program raises at run time
    assert float(MATH_CALLS["sqrt"](sympy.Integer(2))) == math.sqrt(2)
    assert MATH_CALLS["sqrt"](sympy.Float(-1.0)).func is MATH_CALLS["sqrt"]  # math.sqrt raises: not folded


def test_mod_takes_the_sign_of_the_divisor():
    assert (Mod(-7, 3), Mod(7, -3), Mod(-7, -3)) == (2, -2, -1)


# ------------------------------------------------------------------ named simplifications


def test_floordiv_of_multiple_cancels():
    assert FloorDiv(2 * s0, 2) == s0
    assert FloorDiv(s0 * s1, s1) == s0
    assert CleanDiv(6 * s0, 3) == 2 * s0


def test_floordiv_by_one_and_of_zero_fold():
    assert FloorDiv(x, 1) == x
    assert FloorDiv(0, s0) == 0


def test_floordiv_reduces_common_factors():
    assert FloorDiv(6 * s0, 4) == FloorDiv(3 * s0, 2)
    assert FloorDiv(2 * s0 * s1, 4 * s1) == FloorDiv(s0, 2)


def test_nested_floordiv_merges_divisors():
    assert FloorDiv(FloorDiv(x, 3), 4) == FloorDiv(x, 12)


def test_floordiv_pulls_out_multiples_of_the_divisor():
    assert FloorDiv(4 * s0 + x, 2) == 2 * s0 + FloorDiv(x, 2)
    assert FloorDiv(s0 * s1 + x, s1) == s0 + FloorDiv(x, s1)


def test_floordiv_times_divisor_stays_unsimplified():
    e = FloorDiv(s0, 2) * 2
    assert e != s0
    assert e.xreplace({s0: 3}) == 2


def test_mod_of_multiple_is_zero():
    assert Mod(4 * s0, 2) == 0
    assert Mod(s0, s0) == 0
    assert Mod(s0 * s1, s1) == 0
    assert Mod(x, 1) == 0


def test_mod_is_idempotent():
    assert Mod(Mod(x, s0), s0) == Mod(x, s0)
    assert Mod(Mod(x, 12), 4) == Mod(x, 4)


def test_mod_drops_multiples_of_the_divisor():
    assert Mod(x + 3 * s0, s0) == Mod(x, s0)
    assert Mod(x + 6 * y, 3) == Mod(x, 3)


def test_ceildiv_of_multiple_cancels():
    assert CeilDiv(2 * s0, 2) == s0
    assert CeilDiv(s0, 2).xreplace({s0: 5}) == 3


def test_symbol_free_arguments_fold_even_when_sympy_left_them_unevaluated():
    m = sympy.Min(0, 5, evaluate=False)
    assert FloorDiv(m + 7, 2) == 3 and Mod(m + 7, 4) == 3
    assert IntTrueDiv(m + 1, 2) == sympy.Float(0.5) and FloorToInt(m) == 0


def test_float_to_int_of_an_int_passes_through():
    assert FloorToInt(x) == x
    assert CeilToInt(ToFloat(x)) == x
    assert TruncToInt(sympy.Integer(4)) == 4


def test_to_float_folds_numbers():
    assert ToFloat(3) == sympy.Float(3.0)
    assert ToFloat(x).xreplace({x: 7}) == sympy.Float(7.0)


def test_max_and_min_are_sympys():
    assert Max(s0, 3).xreplace({s0: 5}) == 5
    assert Min(x, -2).xreplace({x: 0}) == -2


# ------------------------------------------------------------------ assumptions and errors


def test_integer_functions_declare_integer_results():
    for e in (FloorDiv(x, s0), Mod(x, s0), FloorToInt(IntTrueDiv(x, 2)), CleanDiv(x, 3)):
        assert e.is_integer is True and e.is_real is True, e
    assert IntTrueDiv(x, 3).is_integer is not True and IntTrueDiv(x, 3).is_real
    assert ToFloat(x).is_real


def test_mod_by_positive_divisor_is_nonnegative():
    assert Mod(x, s0).is_nonnegative is True
    assert FloorDiv(s0, 2).is_nonnegative is True
    assert FloorDiv(x, 2).is_nonnegative is None


def test_division_by_zero_raises():
    for fn in (FloorDiv, Mod, IntTrueDiv):
        with pytest.raises(ZeroDivisionError):
            fn(x, 0)


def test_non_integer_arguments_are_rejected():
    with pytest.raises(TypeError):
        FloorDiv(sympy.Float(1.5), 2)
    with pytest.raises(TypeError):
        Mod(sympy.Rational(1, 2), 2)
    with pytest.raises(TypeError):
        FloorDiv(sympy.true, 2)


def test_symbolic_modules_do_not_import_torch():
    root = pathlib.Path(__file__).resolve().parents[2] / "dynashape" / "symbolic"
    for name in ("functions.py", "ranges.py", "printer.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m.split(".")[0] == "torch" for m in mods), (name, mods)


# ---------------------------------------------------------------- bit operations
import operator as _op  # noqa: E402

from hypothesis import given as _given, settings as _settings, strategies as _st  # noqa: E402

from dynashape.symbolic.functions import BitwiseAnd, BitwiseOr, BitwiseXor, LShift, RShift  # noqa: E402
from dynashape.symbolic.printer import pyexpr as _pyexpr  # noqa: E402
from dynashape.symbolic.ranges import ValueRanges as _VR, bound_sympy as _bound  # noqa: E402

_BITOPS = [(BitwiseAnd, _op.and_), (BitwiseOr, _op.or_), (BitwiseXor, _op.xor), (LShift, _op.lshift),
           (RShift, _op.rshift)]


@_settings(max_examples=300, deadline=None)
@_given(_st.sampled_from(_BITOPS), _st.integers(-40, 40), _st.integers(-40, 40), _st.integers(0, 40),
        _st.integers(0, 40))
def test_bit_operations_match_python_ints_in_value_print_and_range(ops, a, b, lo, width):
    fn, py = ops
    if fn in (LShift, RShift):
        b = abs(b) % 6
    s = sympy.Symbol("s", integer=True)
    expr = fn(s, b)
    want = py(a, b)
    assert expr.xreplace({s: a}) == want
    assert eval(_pyexpr(expr), {}, {"s": a}) == want
    r = _VR(min(a, lo), max(a, lo) + width)  # a range holding a
    assert want in _bound(expr, {s: r}), (expr, r)
