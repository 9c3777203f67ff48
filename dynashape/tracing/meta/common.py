"""Shape helpers shared by the meta rules."""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch (our own frames get its answer anyway)
import sympy

from ...symbolic.errors import DataDependentError
from ...symbolic.symtypes import SymBase, sym_max, sym_min


def shape(t) -> tuple:
    """Symbolic sizes of a FakeTensor; `()` for Python scalars."""
    return getattr(t, "ds_sizes", ())


def is_tensor(t) -> bool:
    return hasattr(t, "ds_sizes")


def norm_dim(dim, ndim: int, what: str = "dim") -> int:
    """A possibly negative dim as an index in [0, ndim) (0-d tensors accept -1 and 0)."""
    dim = int(dim)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def norm_dims(dims, ndim: int) -> list[int]:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int) or isinstance(dims, SymBase):
        dims = [dims]
    return [norm_dim(d, ndim) for d in dims]


def is_one(s, oblivious: bool = False):
    """`s == 1`: True or False when known (a guard for a backed size), None when it depends on
    data. Callers take a path that is right for every value or check at run time: assuming a
    data-dependent size is >= 2 would be wrong when it is 0 or 1. `oblivious`: the caller's
    result is the same whether the size is 1 or not (broadcasting it against n), so a backed
    size-oblivious size (a Dim with min=1) counts as >= 2 without a guard."""
    if isinstance(s, int):
        return s == 1
    if oblivious and isinstance(s, SymBase) and s.node.hint != 1:  # a size that is 1 here: an exact guard
        v = s.node.env.oblivious_value(sympy.Eq(s.node.expr, 1))
        if v is not None:
            return bool(v)
    try:
        return bool(s == 1)
    except DataDependentError:
        return None


def in_bounds(i, n) -> bool:
    """Whether int index `i` selects within a dim of `n`, decided by their values (a guard where either
    is symbolic; True where that depends on data: the op checks at run time). Eager raises IndexError
    past it, and a program may catch that (`try: x[i] except IndexError:`): the trace must take the
    path eager takes, under a guard, not compile the in-bounds path for every i."""
    if isinstance(i, int) and isinstance(n, int):
        return -n <= i < n
    try:
        return bool(-n <= i) and bool(i < n)
    except DataDependentError:
        return True


def assert_at_runtime(cond, message: str) -> None:
    """A fact about data-dependent sizes the rule relies on, checked when the compiled code runs."""
    from ..state import current_tracer
    tracer = current_tracer()
    if tracer is None:
        raise DataDependentError(message, getattr(cond, "node", None) and cond.node.expr, None)
    tracer.runtime_assert(cond, message)


def same(a, b) -> bool:
    """Decide `a == b` (a guard when symbolic)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(a == b)


def check_equal(a, b) -> None:
    """The op requires `a == b` (it failed on the example otherwise): guard it, or, when the
    sizes depend on data, assert it when the code runs (as torch._check does)."""
    try:
        ok = same(a, b)
    except DataDependentError:
        env = (a if isinstance(a, SymBase) else b).node.env
        assert_at_runtime(a == b, f"sizes must match: {env.describe((a == b).node.expr)}")
        return
    if not ok:
        raise RuntimeError(f"size mismatch: {a} vs {b}")


def broadcast(*shapes) -> tuple:
    """Broadcast shapes as torch does: a dim of 1 stretches, others must be equal."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        dims = [s[i] for s in shapes if len(s) >= -i]
        if all(_same_expr(d, dims[0]) for d in dims[1:]):  # equal sizes broadcast trivially: ask nothing
            out.append(dims[0])
            continue
        known, unknown = _split_ones(dims, oblivious=True)
        if unknown:  # next to a data-dependent dim, a size taken as not 1 unguarded could be 1: ask
            known, unknown = _split_ones(dims, oblivious=False)
        elif any(_data_dependent(d) for d in known):
            # a size taken as not 1 without a guard, against a data-dependent size not 1: their equality is
            # only checked when the code runs, where the first may be 1 and stretch (eager broadcasts);
            # it is checked as 1 or equal there, and the result is the data-dependent size either way
            unknown = [d for d in known if not _data_dependent(d) and not _statically_not_one(d)]
            known = [d for d in known if not any(d is u for u in unknown)]
        if known:  # the result is that size; a data-dependent dim must be 1 or equal to it
            cur = known[0]
            for d in known[1:]:
                check_equal(cur, d)
            for d in unknown:
                assert_at_runtime((d == 1) | (d == cur), f"sizes must broadcast: {_describe(d)} must be 1 or "
                                  f"{_describe(cur)}")
        elif unknown:  # only data-dependent dims (and 1s): each is 1 or equal to the first (checked when the
            cur = unknown[0]  # code runs); `min(1, other)` is that already, so it needs no check
            for d in unknown[1:]:
                if _one_or(d, cur):
                    continue
                if _one_or(cur, d):
                    cur = d
                    continue
                if _same_expr(cur, d):
                    continue
                # either stretches when it is 1 at run time (`x[..., -1:]` of a data-dependent x, or
                # `v / v[1:]` of a unique() result of one element), else they are equal: assert only what
                # eager needs, and the size is the one eager gives in each case (0 when either is 0)
                assert_at_runtime((d == 1) | (cur == 1) | (d == cur),
                                  f"sizes must broadcast: {_describe(cur)} and {_describe(d)} (equal, or one is 1)")
                cur = sym_max(cur, d) * sym_min(cur, 1) * sym_min(d, 1)
        else:
            cur = 1
        out.append(cur)
    return tuple(out)


def _describe(d) -> str:
    """A size in the user's terms (`x.nonzero().size(0)`, not `u0`)."""
    return d.node.env.describe(d.node.expr) if isinstance(d, SymBase) else str(d)


def _data_dependent(d) -> bool:
    """Whether size `d` depends on data (a symbol from `.item()`, `nonzero()`, ...)."""
    if not isinstance(d, SymBase):
        return False
    env = d.node.env
    return bool(sympy.sympify(d.node.expr).free_symbols & env._unbacked_set())


def _statically_not_one(d) -> bool:
    """`d != 1` for every value its symbols can take (ranges and facts; no guard)."""
    return isinstance(d, int) or d.node.env.static_value(sympy.Ne(d.node.expr, 1)) is True


def _one_or(d, other) -> bool:
    """`d` is `min(1, other)`: 1 when `other` >= 1, else equal to it (`x[:1]` of a data-dependent x)."""
    if not (isinstance(d, SymBase) and isinstance(other, SymBase)):
        return False
    e = d.node.expr
    return isinstance(e, sympy.Min) and set(e.args) == {sympy.Integer(1), other.node.expr}


def _split_ones(dims, oblivious):
    """(dims known not to be 1, dims that are 1 or not by data); dims known to be 1 drop out."""
    known, unknown = [], []
    for d in dims:
        one = is_one(d, oblivious=oblivious)
        if one is not True:
            (known if one is False else unknown).append(d)
    return known, unknown


def prod(sizes, start=1):
    out = start
    for s in sizes:
        out = out * s
    return out


def contiguous_strides(sizes) -> tuple:
    strides = []
    acc = 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * _max1(s)
    return tuple(reversed(strides))


def canonical_strides(shape) -> tuple:
    """The strides of `torch.empty(shape)` (concrete sizes)."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _max1(s):
    if isinstance(s, int):
        return max(s, 1)
    if s.node.env.static_value(s.node.expr >= 1):
        return s
    return sym_max(s, 1)  # a size that may be 0 (size-oblivious, data-dependent): a stride stays exact


def _same_expr(a, b) -> bool:
    if isinstance(a, SymBase) and isinstance(b, SymBase):
        return a.node.expr == b.node.expr
    return type(a) is type(b) is int and a == b
