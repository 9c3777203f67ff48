"""User-visible symbolic values: SymInt, SymFloat, SymBool.

They behave like int/float/bool; every decision (`bool()`, `int()`,
`__index__`) goes through the ShapeEnv, which records a guard, so that
`range(n)` specializes `n` visibly instead of silently.

>>> from dynashape.symbolic import ShapeEnv, LocalSource, SymInt
>>> env = ShapeEnv()
>>> n = env.symint(5, LocalSource("n"), is_size=False)
>>> n + 1
Sym(s0 + 1)
"""
from __future__ import annotations

from .symnode import SymNode


def wrap_node(node: SymNode):
    """A node as the env's SymInt/SymFloat/SymBool class, or a plain constant."""
    c = node.constant()
    if c is not None:
        return c
    types = getattr(node.env, "sym_types", None) or _DEFAULT_TYPES
    return types[node.pytype](node)


def _node(x):
    return x.node if isinstance(x, SymBase) else x


def _binop(op):
    def fwd(self, other):
        if not isinstance(other, (SymBase, int, float)):
            return NotImplemented
        return wrap_node(self.node.binary(op, _node(other)))

    def rev(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        return wrap_node(self.node.wrap(other).binary(op, self.node))

    return fwd, rev


class SymBase:
    """Shared plumbing; `node` is the SymNode."""

    def __init__(self, node: SymNode):
        self.node = node

    def __repr__(self) -> str:
        return f"Sym({self.node})"

    __str__ = __repr__

    __hash__ = None  # like PyTorch: a symbolic value has no value to hash

    __add__, __radd__ = _binop("add")
    __sub__, __rsub__ = _binop("sub")
    __mul__, __rmul__ = _binop("mul")
    __truediv__, __rtruediv__ = _binop("truediv")
    __floordiv__, __rfloordiv__ = _binop("floordiv")
    __mod__, __rmod__ = _binop("mod")
    __pow__, __rpow__ = _binop("pow")
    __eq__, _ = _binop("eq")
    __ne__, _ = _binop("ne")
    __lt__, _ = _binop("lt")
    __le__, _ = _binop("le")
    __gt__, _ = _binop("gt")
    __ge__, _ = _binop("ge")
    del _

    def __neg__(self):
        return wrap_node(self.node.unary("neg"))

    def __pos__(self):
        return self

    def __abs__(self):
        return wrap_node(self.node.unary("abs"))

    def __bool__(self) -> bool:
        return self.node.bool_()

    def __sym_max__(self, other):
        return wrap_node(self.node.binary("max", _node(other)))

    def __sym_min__(self, other):
        return wrap_node(self.node.binary("min", _node(other)))


class SymInt(SymBase):
    # integer bit operations (not on SymBool, whose & and | are logical)
    __and__, __rand__ = _binop("bitand")
    __or__, __ror__ = _binop("bitor")
    __xor__, __rxor__ = _binop("bitxor")
    __lshift__, __rlshift__ = _binop("lshift")
    __rshift__, __rrshift__ = _binop("rshift")

    """A symbolic int: a tensor size or an int argument."""

    def __int__(self) -> int:
        return self.node.int_()

    def __index__(self) -> int:
        return self.node.int_()

    def __float__(self) -> float:
        return float(self.node.int_())

    def __round__(self, ndigits=None):
        return self

    def __trunc__(self):
        return self

    __floor__ = __ceil__ = __trunc__

    def __sym_float__(self):
        return wrap_node(self.node.unary("float"))


class SymFloat(SymBase):
    """A symbolic float (specialized by default; see config.specialize_float)."""

    def __float__(self) -> float:
        return self.node.float_()

    def __int__(self) -> int:
        # int() must return an int: the truncated value is guarded (`int(s * 4) == 6`), not the float
        t = wrap_node(self.node.unary("trunc"))
        return t if isinstance(t, int) else int(t)

    def __trunc__(self):
        return wrap_node(self.node.unary("trunc"))

    def __floor__(self):
        return wrap_node(self.node.unary("floor"))

    def __ceil__(self):
        return wrap_node(self.node.unary("ceil"))

    def __sym_float__(self):
        return self


class SymBool(SymBase):
    """A symbolic condition; `bool()` decides it by the hint and records a guard."""

    def __and__(self, other):
        return wrap_node(self.node.binary("and", _node(other)))

    __rand__ = __and__

    def __or__(self, other):
        return wrap_node(self.node.binary("or", _node(other)))

    __ror__ = __or__

    def __invert__(self):
        return wrap_node(self.node.unary("not"))

    def __int__(self) -> int:
        return int(bool(self))


_DEFAULT_TYPES = {int: SymInt, float: SymFloat, bool: SymBool}


def sym_not(a):
    return wrap_node(a.node.unary("not")) if isinstance(a, SymBase) else not a


def sym_max(a, b):
    if isinstance(a, SymBase):
        return a.__sym_max__(b)
    if isinstance(b, SymBase):
        return b.__sym_max__(a)
    return max(a, b)


def sym_min(a, b):
    if isinstance(a, SymBase):
        return a.__sym_min__(b)
    if isinstance(b, SymBase):
        return b.__sym_min__(a)
    return min(a, b)


def sym_ite(cond, a, b):
    """`a if cond else b`; a symbolic cond is decided (and guarded) by its hint."""
    return a if bool(cond) else b


def guard_size_oblivious(cond) -> bool:
    """Decide a framework check with size-like symbols taken as >= 2."""
    return cond.node.guard_size_oblivious() if isinstance(cond, SymBase) else bool(cond)


def statically_known_true(cond) -> bool:
    """True only when the condition holds for every allowed value; never guards."""
    return cond.node.statically_known_true() if isinstance(cond, SymBase) else bool(cond)


def guard_or_false(cond) -> bool:
    if not isinstance(cond, SymBase):
        return bool(cond)
    return cond.node.env.guard_or_false(cond.node.expr, cond.node.hint)


def guard_or_true(cond) -> bool:
    if not isinstance(cond, SymBase):
        return bool(cond)
    return cond.node.env.guard_or_true(cond.node.expr, cond.node.hint)
