"""Letting a trace made for sizes >= 2 also take size 1, when nothing in it depended on the difference.

With 0/1 specialization a dynamic size has the range [2, inf]; a call where it is 1 fails
the range guard and, as in PyTorch, would trace the function again. But a trace decides
nothing about its sizes except through the ShapeEnv: conditions it decided statically
(`env.decisions`, recorded as they are made) and conditions it guarded (`env.guards`). If,
in a fresh ShapeEnv where the size's range starts at 1 and that learns the same guards, every
one of those statically decided conditions is still decided, the same way, then every branch
the trace took (in the program, in meta rules) is the one a trace at size 1 would take for
every size the guards accept, and the graph is that trace: the entry's range guard can start
at 1 instead. (Framework questions asked size-obliviously, `oblivious_value`, such as whether a
dim broadcasts, are not recorded: their answers are right at 0 and 1 too, which is what the
size-oblivious compile after a 0/1 recompile already relies on.) Anything else that could carry
an assumption (facts that did not come from a guard, data-dependent symbols, runtime asserts, a
range the user declared from 2 up) keeps the recompile.
"""
from __future__ import annotations

import dataclasses

from .ranges import ValueRanges


def widened(env, sym, lo: int):
    """(a ShapeEnv like `env` in which `sym`'s range starts at `lo`, not at 2, with the same guards
    and in which every condition `env` decided statically is decided the same way, None), or
    (None, why not, in words)."""
    info = env.var_info.get(sym)
    why = ("its size is specialized" if info is None or sym in env.replacements or lo >= 2 else
           "it was not traced from 2 up" if info.initial_range is None or info.initial_range.lo != 2 else
           "its trace has data-dependent sizes" if env._unbacked else
           "its trace read a fact its guards do not check (a range, ds.check, check_is_size)"
           if env.outside_facts or env.runtime_asserts or env.violations else
           "its range was declared from 2 up" if any(c.vr is not None and c.vr.lo >= 2
                                                    for c in env.constraints.values()) else None)
    if why:
        return None, why
    new = type(env)(specialize_zero_one=env.specialize_zero_one, duck_shape=env.duck_shape,
                    backed_size_oblivious=env.backed_size_oblivious)
    new.var_to_val = dict(env.var_to_val)
    new.var_info = dict(env.var_info)
    new.var_info[sym] = dataclasses.replace(info, initial_range=ValueRanges(lo, info.initial_range.hi))
    new.var_to_range = {s: i.initial_range for s, i in new.var_info.items()}
    new._nsym, new._duck = env._nsym, dict(env._duck)
    new.specializations, new.constraints = list(env.specializations), dict(env.constraints)
    try:
        for g in env.guards:
            new.add_guard(g.expr, g.location)
        for (expr, size_oblivious), value in env.decisions.items():
            if new.static_value(expr, size_oblivious) != value:
                return None, f"its trace took {env.describe(expr)} to be {value}, which holds only from 2 up"
    except Exception as e:  # noqa: BLE001 - a guard contradicting the wider range: keep the recompile
        return None, f"its guards do not admit it ({type(e).__name__})"
    if new.violations:
        return None, "a dim you marked dynamic would be specialized"
    return new, None
