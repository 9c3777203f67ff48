"""cexpr oracle: the C text of an index formula, evaluated (C's integer semantics emulated in
Python), equals sympy's value of the formula at random sizes."""
import random
import re

import sympy

from dynashape.backends.fused.cprint import cexpr
from dynashape.symbolic.functions import FloorDiv, Mod

s0, s1, i0, i1 = sympy.symbols("s0 s1 i0 i1", integer=True, nonnegative=True)

FORMULAS = [
    i0 * s1 + i1,
    FloorDiv(i0 * s1 + i1, 2),
    Mod(i0 * s1 + i1, s1 + 3),
    FloorDiv(Mod(i0 * 4 + i1, s0 * 4), 4) * s1,
    sympy.Max(s0, s1) - sympy.Min(s0 - 1, 3),
    (s0 + 1) ** 2 - s1 * 3,
    2 * s0 * s1 - i0,
]


def c_eval(text: str, env: dict) -> int:
    # operands are non-negative here, where C's `/` and `%` agree with Python's `//` and `%`
    py = re.sub(r"(\d+)L\b", r"\1", text).replace("std::max<int64_t>", "max").replace("std::min<int64_t>", "min")
    return eval(py, {"ds_floordiv": lambda a, b: a // b, "ds_mod": lambda a, b: a % b, "max": max, "min": min},
                env)


def test_c_text_of_index_formulas_evaluates_to_sympys_value():
    rng = random.Random(0)
    for e in FORMULAS:
        text = cexpr(e)
        for _ in range(20):
            env = {"s0": rng.randint(2, 50), "s1": rng.randint(2, 50), "i0": rng.randint(0, 40), "i1": rng.randint(0, 40)}
            want = int(e.subs({sympy.Symbol(k, integer=True, nonnegative=True): v for k, v in env.items()}))
            assert c_eval(text, env) == want, (e, text, env)
