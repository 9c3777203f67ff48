"""Lowering: the graph nodes of one region become loop-IR expressions at a symbolic index.

`Lowerer.value(node, idx)` is the node's element at `idx` (a tuple of sympy expressions in
the loop variables). Pointwise ops broadcast their operands' indices, views rewrite the
index (a permute swaps components, a reshape goes through the flat offset), reductions and
the composites built on them (softmax, layer_norm, ...) become `reduce` nodes read once per
row. Anything the loop model cannot express raises `Unfusable`, and the region stays a list
of torch calls.
"""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass, field

import sympy
import torch
import torch.nn.functional as F

from ...ir.graph import Node, SymExpr
from ...symbolic.functions import CeilToInt, FloorDiv, FloorToInt, Mod, TruncToInt
from . import ops
from .loopir import IR


class Unfusable(Exception):
    """The region cannot be expressed in the loop model (the reason is the message)."""


@dataclass
class Region:
    nodes: list  # graph call nodes, in graph order
    domain: tuple  # the loop domain (symbolic sizes); () becomes (1,)
    n_inner: int  # trailing dims iterated by the inner loop (reduced dims, or the last dim)
    inputs: list  # graph nodes read from outside (tensors), in argument order
    outputs: list  # member nodes whose values are used outside
    aliases: list = field(default_factory=list)  # member views used outside: re-run as torch calls after

    @property
    def k(self) -> int:
        return len(self.domain) - self.n_inner


def compute_dtype(dt):
    """The C type a value is computed in: half types in float32."""
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def _is_float(dt) -> bool:
    return dt in ops.FLOATS


@functools.lru_cache(maxsize=None)
def eager_fma() -> bool:
    """Whether eager's kernels of add/sub with alpha, addcmul and lerp round `a * b + c` once: ATen's
    vector code calls fmadd and its builds contract the scalar tails, except x86's DEFAULT kernels (no
    FMA instruction). The C++ kernels contract nothing (-ffp-contract=off), so these say where to fuse."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return True
    return torch.backends.cpu.get_cpu_capability().startswith(("AVX2", "AVX512"))


def _c_strides(shape) -> list:
    out, acc = [], sympy.Integer(1)
    for s in reversed(shape):
        out.append(acc)
        acc = acc * s
    return list(reversed(out))


class Lowerer:
    def __init__(self, region: Region):
        self.r = region
        self.ir = IR(len(region.domain), region.n_inner)
        self.members = set(region.nodes)
        self.buf = {n: i for i, n in enumerate(region.inputs)}
        self.memo: dict = {}
        self.float_exprs: dict = {}  # float formula -> the symbol the kernel reads its value as
        # (symbolic number, type): eager's call raises when its value does not fit the type (masked_fill(m, n)
        # of an int32 tensor, n = 2**40): the wrapper runs the torch calls for such a value
        self.fit_checks: list = []

    # ------------------------------------------------------------------ helpers
    def cast(self, v, dt):
        dt = compute_dtype(dt)
        return v if v.dtype == dt else self.ir.op("cast", (v,), dt, dt)

    def scalar(self, v, dt):
        dt = compute_dtype(dt)
        if isinstance(v, SymExpr) and _by_caller(v):
            # a float formula (`s * 0.1 * 3`), or an int made from one (`math.floor(x.item())`): the wrapper
            # computes it in Python, with eager's rounding and errors (ZeroDivisionError, OverflowError for
            # an infinity), and the kernel reads its value
            stand_in = self.wrapper_value(v)
            return self.cast(self.ir.sym(stand_in, torch.float64 if v.pytype is float else torch.int64), dt)
        if isinstance(v, SymExpr):
            return self.cast(self.ir.sym(v.expr, torch.float64 if v.pytype is float else torch.int64), dt)
        if isinstance(v, bool) and dt != torch.bool:
            v = int(v)
        try:  # the value eager's wrapped number has in `dt`: 2**40 in int32 wraps to 0, 2**63 in int64 to -2**63
            if dt in (torch.int32, torch.int64) and isinstance(v, int):
                bits = 32 if dt == torch.int32 else 64
                v = (v + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)
            elif dt in (torch.int32, torch.int64):
                v = int(v)
            elif dt != torch.bool:
                v = float(v)
        except (OverflowError, ValueError):
            raise Unfusable(f"the number {v!r} as {dt}") from None
        return self.ir.const(v, dt)

    def wrapper_value(self, v: SymExpr):
        """The expression the region's wrapper evaluates to get symbolic number `v` (a float formula's
        stand-in symbol, which the caller computes)."""
        if _by_caller(v):
            n = len(self.float_exprs)
            return self.float_exprs.setdefault(v.expr, sympy.Symbol(f"zfx{n}", real=True) if v.pytype is float
                                               else sympy.Symbol(f"zix{n}", integer=True))
        return v.expr

    def narrowed(self, v, half):
        """A Python number or a 0-d tensor in an op eager computes in the half type `half`: the value cast to
        it first, as TensorIterator casts such an operand to the common type (`x > 0.1` in bfloat16 compares
        with 0.10009765625; `1.1 ** x` in float16 raises 1.099609375 to x; 257 is 256), in float32. None:
        not such an operand. (A mul's or div's second operand is read in float32 unrounded instead: _pointwise.)"""
        if half not in (torch.float16, torch.bfloat16):
            return None
        if ops.is_tensor(v):  # a 0-d tensor of another type (type promotion leaves the op in `half`)
            if v.meta.shape or v.meta.dtype == half:
                return None
            return self.cast_to(self.cast(self.value(v, ()), torch.float32), half)
        if not ops.is_scalar(v):
            return None
        if isinstance(v, SymExpr):
            return self.cast_to(self.scalar(v, torch.float32), half)
        if isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63:
            raise Unfusable(f"the number {v!r} in {half}")
        # eager's own conversion (an int64 goes through float32, which may round twice)
        src = torch.int64 if isinstance(v, int) and not isinstance(v, bool) else torch.float64
        return self.ir.const(torch.tensor(v, dtype=src).to(half).item(), torch.float32)

    @staticmethod
    def bidx(v: Node, idx: tuple, out: tuple) -> tuple:
        """The index into `v` of element `idx` of its broadcast to the shape `out`."""
        shape = v.meta.shape
        tail = idx[len(idx) - len(shape):] if shape else ()
        if len(tail) != len(shape) or len(idx) != len(out):
            raise Unfusable("operand of higher rank than its use")
        res = []
        for s, o, i in zip(shape, out[len(out) - len(shape):], tail):
            if isinstance(s, int) and s == 1:
                res.append(0)
            elif sympy.sympify(s) == sympy.sympify(o):
                res.append(i)
            else:  # s may be 1 at run time (Min(1, s0), a slice, a size from data): then it broadcasts,
                # else it equals o (the trace's guards or runtime asserts): index i * (s != 1)
                res.append(i * sympy.Min(1, sympy.sympify(s) - 1))
        return tuple(res)

    def at(self, v, idx, dt, out: tuple, half=None):
        """Operand `v` of a node of shape `out` whose element `idx` is being computed, as dtype `dt`.
        `half`: the op computes in that half type, to which eager casts every operand of another type
        first: an integer or bool tensor (`x + positions` in bfloat16 adds 256 for 257), a 0-d tensor, a
        Python number (`narrowed`)."""
        if half is not None and compute_dtype(dt) == torch.float32:  # (not a where's or an and's bool operand)
            got = self.narrowed(v, half)
            if got is not None:
                return got
        if ops.is_tensor(v):
            got = self.value(v, self.bidx(v, idx, out))
            if half is not None and v.meta.shape and not v.meta.dtype.is_floating_point \
                    and compute_dtype(dt) == torch.float32:
                got = self.cast_to(self.cast(got, torch.float32), half)
            return self.cast(got, dt)
        if ops.is_scalar(v):
            return self.scalar(v, dt)
        raise Unfusable(f"operand {v!r}")

    def value(self, v: Node, idx: tuple):
        idx = tuple(sympy.sympify(i) for i in idx)
        key = (v, idx)
        got = self.memo.get(key)
        if got is not None:
            return got
        if v not in self.members:
            got = self.ir.load(self.buf[v], idx, compute_dtype(v.meta.dtype))
        else:
            fam = ops.family(v)
            got = getattr(self, "_" + fam)(v, idx)
            half = getattr(v.meta, "dtype", None)
            if half in (torch.float16, torch.bfloat16) and fam not in ("identity", "view") \
                    and not (got.kind == "op" and got.key[:2] == ("cast", half)):
                # computed in float32, rounded to the half type as eager's result of each op is: unrounded,
                # `(x * 10).long()` or `x * 3 > 1` of a bfloat16 x gave other integers and booleans
                got = self.ir.op("cast", (got,), torch.float32, half)
        self.memo[key] = got
        return got

    # ------------------------------------------------------------------ families
    def _identity(self, n, idx):
        return self.value(n.args[0], idx)

    def _view(self, n, idx):
        x = n.args[0]
        name = ops.op_name(n.target)
        src, out = tuple(x.meta.shape), tuple(n.meta.shape)
        if name in ("permute", "transpose", "t", "movedim"):
            perm = _perm(n, name, len(src))
            sidx = [0] * len(src)
            for j, p in enumerate(perm):
                sidx[p] = idx[j]
            return self.value(x, tuple(sidx))
        if name in ("expand", "expand_as"):
            return self.value(x, self.bidx(x, idx, tuple(n.meta.shape)))
        return self.value(x, _reshape_index(src, out, idx))

    def _pointwise(self, n, idx):
        name = ops.op_name(n.target)
        dt = compute_dtype(n.meta.dtype)
        ir = self.ir
        half = n.meta.dtype if n.meta.dtype in (torch.float16, torch.bfloat16) else None
        A = lambda v, t=dt: self.at(v, idx, t, tuple(n.meta.shape), half)  # noqa: E731
        # a number eager reads in the op's (float32) compute type, not rounded to the half type first
        W = lambda v: self.at(v, idx, dt, tuple(n.meta.shape))  # noqa: E731
        a0 = n.args[0] if n.args else n.kwargs.get("input")
        for v in list(n.args) + list(n.kwargs.values()):
            if isinstance(v, SymExpr) and ops.eager_raises(n, probe=v):  # some values raise: checked per call
                self.fit_checks.append((self.wrapper_value(v), n.meta.dtype))
        if name in ops.CASTS:
            return self.cast_to(self.value(a0, self.bidx(a0, idx, tuple(n.meta.shape))), n.meta.dtype)
        if name in ("add", "sub", "rsub"):
            a, b = a0, ops.arg(n, 1, "other")
            alpha = ops.arg(n, 2, "alpha", 1)
            if name == "rsub":
                a, b = b, a
            if alpha != 1 and half is not None:  # eager: one fma in float32 in its vector loop, `x + alpha * y`
                raise Unfusable("add with alpha in a half type")  # rounded after each op in its scalar tail
            if alpha != 1 and _is_float(dt) and eager_fma():  # eager: fmadd(b, alpha, a), alpha negated for sub
                al = A(alpha) if name == "add" else ir.op("neg", (A(alpha),), dt)
                return ir.op("fma", (A(b), al, A(a)), dt)
            bb = A(b) if alpha == 1 else ir.op("mul", (A(b), A(alpha)), dt)
            return ir.op("add" if name == "add" else "sub", (A(a), bb), dt)
        if name in ("mul", "div"):
            # a half-type kernel reads a second operand that is one value (a number, a 0-d tensor: `is_scalar(2)`)
            # in float32 as given (`x * 0.1`, `x / t`); any other operand is cast to the half type first (`t * x`)
            b = ops.arg(n, 1, "other")
            one = not ops.is_tensor(b) or all(isinstance(d, int) and d == 1 for d in b.meta.shape)
            return ir.op(name, (A(a0), W(b) if one else A(b)), dt)
        if name in ("maximum", "minimum"):
            return ir.op(name, (A(a0), A(ops.arg(n, 1, "other"))), dt)
        if name == "rdiv":  # b / a is a.reciprocal() * b in eager (Tensor.__rtruediv__): two roundings
            r = ir.op("reciprocal", (A(a0),), dt)
            return ir.op("mul", (self.cast(self.cast_to(r, n.meta.dtype), dt), W(n.args[1])), dt)
        if name in ("pow", "rpow"):
            return self._pow(n, idx, A)
        if name in ops.COMPARE:
            other = ops.arg(n, 1, "other")
            cdt = ops.result_type([a0, other])  # a 0-d int64 tensor with an int32 one: compared in int32
            h = cdt if cdt in (torch.float16, torch.bfloat16) else None
            B = lambda v: self.at(v, idx, cdt, tuple(n.meta.shape), h)  # noqa: E731
            return ir.op(name, (B(a0), B(other)), torch.bool)
        if name in ("logical_and", "logical_or", "logical_not") and n.meta.dtype != torch.bool:
            raise Unfusable("bitwise op on integers")
        if name in ("logical_and", "logical_or"):
            return ir.op(name, (A(a0, torch.bool), A(n.args[1], torch.bool)), torch.bool)
        if name == "logical_not":
            return ir.op("logical_not", (A(a0, torch.bool),), torch.bool)
        if name == "where":
            c, a, b = a0, ops.arg(n, 1, "input"), ops.arg(n, 2, "other")
            return ir.op("where", (A(c, torch.bool), A(a), A(b)), dt)
        if name == "masked_fill":
            return ir.op("where", (A(n.args[1], torch.bool), A(ops.arg(n, 2, "value")), A(a0)), dt)
        if name in ("clamp", "clamp_min", "clamp_max"):
            lo = ops.arg(n, 1, "min") if name != "clamp_max" else None
            hi = ops.arg(n, 2 if name == "clamp" else 1, "max") if name != "clamp_min" else None
            v = A(a0)
            if lo is not None:
                v = ir.op("clamp_min", (v, A(lo)), dt)
            if hi is not None:
                v = ir.op("clamp_max", (v, A(hi)), dt)
            return v
        if name == "lerp":
            w = ops.arg(n, 2, "weight")  # a Python number: read in float32; a 0-d tensor: cast to the half type
            a, b, w = A(a0), A(n.args[1]), (A(w) if ops.is_tensor(w) else W(w))
            # eager (ATen's lerp_vec): |w| < 0.5 ? a + w * (b - a) : b + (w - 1) * (b - a), as one fma each
            small = ir.op("lt", (ir.op("abs", (w,), dt), ir.const(0.5, dt)), torch.bool)
            coeff = ir.op("where", (small, w, ir.op("sub", (w, ir.const(1.0, dt)), dt)), dt)
            return self.muladd(coeff, ir.op("sub", (b, a), dt), ir.op("where", (small, a, b), dt), dt)
        if name == "addcmul":
            v = ops.arg(n, 3, "value", 1)  # eager: self + value * t1 * t2, value in the compute type
            t1 = A(n.args[1]) if v == 1 else ir.op("mul", (self.scalar(v, dt), A(n.args[1])), dt)
            return self.muladd(t1, A(n.args[2]), A(a0), dt)
        if name in ops.UNARY:
            if not _is_float(dt) and name not in ("neg", "abs", "relu", "square", "sign"):
                raise Unfusable(f"{name} on {dt}")
            if name == "hardtanh":
                return self._hardtanh(n, A)
            x = A(a0)
            extra = ()
            if name == "gelu":
                extra = (ops.arg(n, 1, "approximate", "none"),)
            elif name in _PARAMS:
                extra = _activation_params(n, name)
            elif len(n.args) > 1 or set(n.kwargs) - {"input", "inplace"}:
                raise Unfusable(f"{name} with extra arguments")
            return ir.op(name, (x,), dt, *extra)
        raise Unfusable(f"no lowering for {name}")

    def _hardtanh(self, n, A):
        """Eager's hardtanh is clamp (min(max(x, min_val), max_val)): a NaN bound gives NaN, and min_val >
        max_val gives max_val. F.hardtanh's symbolic bound stays a torch call: the Python function raises
        ValueError when min_val > max_val, a check its call makes each time and a kernel would skip."""
        lo, hi = ops.arg(n, 1, "min_val", -1.0), ops.arg(n, 2, "max_val", 1.0)
        if n.target is F.hardtanh and (isinstance(lo, SymExpr) or isinstance(hi, SymExpr)):
            raise Unfusable("a symbolic hardtanh bound (F.hardtanh checks min_val <= max_val per call)")
        dt = compute_dtype(n.meta.dtype)
        a0 = n.args[0] if n.args else n.kwargs.get("input")
        return self.ir.op("clamp_max", (self.ir.op("clamp_min", (A(a0), A(lo)), dt), A(hi)), dt)

    def _pow(self, n, idx, A):
        """pow and rpow: both operands in the op's type (a half type's exponent or base rounded to it, as
        TensorIterator casts a wrapped number and `pow(x, c)` takes `c.to<scalar_t>()`), and eager's shortcuts
        for some exponents: sqrt, rsqrt, reciprocal for 0.5, -0.5, -1 (not for float16), then x * x, x * x * x,
        1 / (x * x) for 2, 3, -2 of the exponent in the type (bfloat16's products rounded to it). A symbolic
        exponent picks among them at run time, as eager's call does by its value."""
        ir, dt, out = self.ir, compute_dtype(n.meta.dtype), n.meta.dtype
        name = ops.op_name(n.target)
        a0 = n.args[0] if n.args else n.kwargs.get("input")
        base, ex = (a0, ops.arg(n, 1, "exponent")) if name == "pow" else (n.args[1], a0)
        if not _is_float(dt):
            if ex == 2:
                x = A(base)
                return ir.op("mul", (x, x), dt)
            raise Unfusable("integer pow")
        if name != "pow" or isinstance(ex, bool) or not ops.is_scalar(ex):
            return ir.op("pow", (A(base), A(ex)), dt)
        x = A(base)
        if isinstance(ex, SymExpr):
            return self._pow_select(x, ex, A, dt, out) if ex.pytype in (int, float) else ir.op("pow", (x, A(ex)), dt)
        if ex == 1:
            return x
        raw = {0.5: 0, -0.5: 1, -1: 2}  # compared as given (exp_scalar.equal(.5))
        e = torch.tensor(float(ex), dtype=torch.float64).to(out).item() if out == torch.bfloat16 else ex
        typed = {2: 3, 3: 4, -2: 5}  # compared in the type (bfloat16's exponent rounded first)
        k = raw.get(ex) if out != torch.float16 else None
        if k is None:
            k = typed.get(e)
        if k is None or (out == torch.float16 and k == 5):
            return ir.op("pow", (x, A(ex)), dt)
        return self._pow_shortcut(k, x, dt, out)

    def _pow_shortcut(self, k, x, dt, out):
        """Eager's k-th pow shortcut of x: sqrt, rsqrt, reciprocal, x * x, x * x * x, 1 / (x * x)."""
        ir = self.ir
        if k < 3:
            return ir.op(("sqrt", "rsqrt", "reciprocal")[k], (x,), dt)
        sq = ir.op("mul", (x, x), dt)
        if out == torch.bfloat16 and k > 3:  # bfloat16's cube and 1 / square round x * x first
            sq = self.cast(self.cast_to(sq, out), dt)  # (float16's cube is pow, which rounds once)
        if k == 3:
            return sq
        if k == 4:
            return ir.op("mul", (sq, x), dt)
        return ir.op("div", (ir.const(1.0, dt), sq), dt)

    def _pow_select(self, x, ex, A, dt, out):
        """x ** c for a symbolic number c: eager's shortcut for c's value at run time, else pow. float16
        takes none (its kernel calls pow); the others compare c as given with 0.5, -0.5, -1 and in the
        type with 2, 3, -2 (bfloat16 rounds c first: 2.004 squares)."""
        ir, f32 = self.ir, torch.float32
        v = ir.op("pow", (x, A(ex)), dt)
        if out == torch.float16:
            return v
        for k, value in enumerate((0.5, -0.5, -1.0, 2.0, 3.0, -2.0)):
            if k >= 3 and out == torch.bfloat16:
                hit = ir.op("eq", (A(ex), ir.const(value, f32)), torch.bool)
            else:  # c - value, computed by the wrapper in float64: 0 exactly when c is value, and in float32
                # too (a Triton kernel reads a float argument as float32, which would round 0.5 + 1e-12 to 0.5)
                diff = self.scalar(SymExpr(ex.expr - sympy.Float(value), float), f32)
                hit = ir.op("eq", (diff, ir.const(0.0, f32)), torch.bool)
            v = ir.op("where", (hit, self._pow_shortcut(k, x, dt, out), v), dt)
        return v

    def muladd(self, a, b, c, dt):
        """a * b + c as eager's kernel computes it: one fused multiply-add, or two roundings."""
        if _is_float(dt) and eager_fma():
            return self.ir.op("fma", (a, b, c), dt)
        return self.ir.op("add", (self.ir.op("mul", (a, b), dt), c), dt)

    def cast_to(self, v, target):
        return self.ir.op("cast", (v,), compute_dtype(target), target)

    # ------------------------------------------------------------------ reductions
    def _row(self, n, idx, keep: bool):
        r, k = self.r, self.r.k
        kept = idx[:k] if keep else idx
        if len(kept) != k or tuple(kept) != self.ir.vars[:k]:
            raise Unfusable("a row value read at another row's index")

    def _check_dims(self, x, dims):
        r = self.r
        if tuple(x.meta.shape) != tuple(r.domain) or tuple(dims) != tuple(range(r.k, len(r.domain))):
            raise Unfusable("reduction over other dims than the region's inner dims")

    def count(self):
        c = sympy.Integer(1)
        for s in self.r.domain[self.r.k:]:
            c = c * s
        return c

    def _reduce(self, n, idx):
        name = ops.op_name(n.target)
        x, dims, keep = ops.reduce_dims(n)
        self._check_dims(x, dims)
        self._row(n, idx, keep)
        ir = self.ir
        dt = compute_dtype(n.meta.dtype)
        a = self.cast(self.value(x, self.ir.vars), dt)
        if name == "sum":
            return ir.reduce("sum", a, dt)
        if name == "mean":
            return self.mean(a, dt)
        if name in ("amax", "amin"):
            if dt.is_floating_point:  # stays a torch call (ops._zero_tie): the kernels have no NaN rule for it
                raise Unfusable("a float amax/amin: eager picks its signed zero by position")
            return ir.reduce("max" if name == "amax" else "min", a, dt)
        if name == "logsumexp":  # shifted by a finite max, so an all -inf or +inf row gives torch's +-inf
            mm = ir.op("finite_or_zero", (ir.reduce("shift", a, dt),), dt)
            return ir.op("add", (ir.op("log", (self.sum_exp(a, mm, dt),), dt), mm), dt)
        if name in ("var", "std"):
            corr = n.kwargs.get("correction")
            if corr is None:
                unbiased = n.kwargs.get("unbiased", n.args[2] if len(n.args) > 2 and isinstance(n.args[2], bool)
                                        else True)
                corr = 1 if unbiased else 0
            return self.var_or_std(a, dt, corr, name == "std")
        raise Unfusable(name)

    def var_or_std(self, a, dt, corr, take_sqrt: bool):
        """var/std over the row. Eager's CPU kernel (WelfordOps<scalar_t, double>) works in float64 for
        float32 and the half types: deviations, squares, the division and the sqrt, rounded to the type at
        the end; in float32 a deviation's square is 0 below 1e-19 and inf past 1.8e19 (a std of 0 or inf
        where eager's is 1e-25 or 5e20). (layer_norm's kernel accumulates in float: `var` keeps its type.)"""
        wide = torch.float64 if dt == torch.float32 else dt
        v = self.var(self.cast(a, wide), wide, corr)
        if take_sqrt:
            v = self.ir.op("sqrt", (v,), wide)
        return self.cast(v, dt)

    def shift_and_sum_exp(self, a, dt):
        """(m, sum(exp(a - m))) over the row, m its max: softmax's and cross-entropy's shift. A NaN
        or an inf - inf reaches every output through the sum, as in torch's kernels."""
        m = self.ir.reduce("shift", a, dt)
        return m, self.sum_exp(a, m, dt)

    def sum_exp(self, a, m, dt):
        ir = self.ir
        return ir.reduce("sum", ir.op("exp", (ir.op("sub", (a, m), dt),), dt), dt)

    def mean(self, a, dt):
        return self.ir.op("div", (self.ir.reduce("sum", a, dt), self.ir.sym(self.count(), dt)), dt)

    def shift(self, a, dt):
        """The row mean that var and layer_norm subtract, summed in float64: in float32 its rounding
        error (an ulp of the row sum) is what the deviations lose when the mean is large next to the
        spread (rows of 209 + N(0, 1): 3x eager's error, which keeps an accurate running mean)."""
        if dt != torch.float32:
            return self.mean(a, dt)
        ir, f64 = self.ir, torch.float64
        total = ir.reduce("sum", self.cast(a, f64), f64)
        return self.cast(ir.op("div", (total, ir.sym(self.count(), f64)), f64), dt)

    def var(self, a, dt, corr):
        ir = self.ir
        d = ir.op("sub", (a, self.shift(a, dt)), dt)
        ss = ir.reduce("sum", ir.op("mul", (d, d), dt), dt)
        # torch divides by max(0, n - correction): an empty row gives 0/0, NaN (not 0/-1)
        return ir.op("div", (ss, ir.sym(sympy.Max(0, self.count() - corr), dt)), dt)

    def _xent(self, n, idx):
        """The loss of row idx[0] (the wrapper sums or averages the rows)."""
        x, t = n.args[0], ops.arg(n, 1, "target")
        ii = ops.arg(n, 4, "ignore_index", -100)
        ir = self.ir
        dt = compute_dtype(x.meta.dtype)
        i0 = self.ir.vars[0]
        lse = self._lse64(x, dt)
        tv = self.value(t, (i0,))
        picked = self.cast(ir.gather(self.buf[x], (i0, 0), 1, x.meta.shape[1], tv, dt), torch.float64)
        valid = ir.op("ne", (tv, ir.const(ii, torch.int64)), torch.bool)
        # a target out of [0, C) that is not ignored: -inf, which no loss is (the logsumexp is at least
        # every logit, or NaN), so the wrapper tells it from a NaN or inf logit's NaN (eager raises)
        c = x.meta.shape[1]
        c = ir.const(c, torch.int64) if isinstance(c, int) else ir.sym(c, torch.int64)
        inside = ir.op("logical_and", (ir.op("ge", (tv, ir.const(0, torch.int64)), torch.bool),
                                       ir.op("lt", (tv, c), torch.bool)), torch.bool)
        loss = ir.op("where", (inside, ir.op("sub", (lse, picked), torch.float64),
                               ir.const(float("-inf"), torch.float64)), torch.float64)
        return ir.op("where", (valid, loss, ir.const(0.0, torch.float64)), torch.float64)

    def _lse64(self, x, dt):
        """A row's logsumexp in float64 from the row pass's max (one of the logits, exact) and sum of
        exps (in `dt`; its rounding is relative, and log keeps it so): ~1e-7 absolute, where `dt`'s
        max + log(sum) rounds to an ulp of the max (3.8e-6 at 40 in float32), an error the loss
        `lse - x[t]` of a confident row and every probability `exp(x - lse)` carry (train fuzz seed
        25112946: x's gradient 0.7% off)."""
        m, s = self.shift_and_sum_exp(self.cast(self.value(x, self.ir.vars), dt), dt)
        d64 = torch.float64
        return self.ir.op("add", (self.ir.op("log", (self.cast(s, d64),), d64), self.cast(m, d64)), d64)

    def xent_lse(self, n):
        """Row idx[0]'s logsumexp of cross-entropy `n`'s logits, in float64: the same IR nodes as its
        loss (interned), so writing it costs one store per row; the backward reads it instead of
        recomputing softmax."""
        return self._lse64(n.args[0], compute_dtype(n.args[0].meta.dtype))

    def _composite(self, n, idx):
        name = ops.op_name(n.target)
        x, dims, _ = ops.reduce_dims(n)
        self._check_dims(x, dims)
        self._row(n, idx, True)
        ir = self.ir
        dt = compute_dtype(n.meta.dtype)
        full = self.cast(self.value(x, self.ir.vars), dt)
        here = self.cast(self.value(x, idx), dt)
        if name in ("softmax", "log_softmax"):
            m, s = self.shift_and_sum_exp(full, dt)
            if name == "softmax":
                # times the row's 1 / sum, as eager's softmax kernel normalizes (not a division per element)
                return ir.op("mul", (ir.op("exp", (ir.op("sub", (here, m), dt),), dt), ir.op("reciprocal", (s,), dt)), dt)
            lse = ir.op("log", (s,), dt)
            if n.meta.dtype in (torch.float16, torch.bfloat16):  # eager's kernel keeps the row's log(sum) in the half type
                lse = self.cast(self.cast_to(lse, n.meta.dtype), dt)
            return ir.op("sub", (ir.op("sub", (here, m), dt), lse), dt)
        if name == "layer_norm":
            eps = ops.arg(n, 4, "eps", 1e-5)
            w, b = ops.arg(n, 2, "weight"), ops.arg(n, 3, "bias")
            # TODO: rows past sqrt(float32 max) (|x| > 1.8e19): eager's kernel (RowwiseMoments, a float Welford
            # whose lanes merge by mean differences squared) gives NaN for some of them, by the row's length and
            # the CPU's vector width ([1e20, 1e20]: NaN, [1e20, -1e20]: 0); the kernel gives 0 or finite values
            mean = self.shift(full, dt)
            var = self.var(full, dt, 0)
            rstd = ir.op("rsqrt", (ir.op("add", (var, self.scalar(eps, dt)), dt),), dt)
            out = ir.op("mul", (ir.op("sub", (here, mean), dt), rstd), dt)
        else:  # rms_norm
            eps = ops.arg(n, 3, "eps")
            if eps is None:
                eps = ops.rms_norm_eps(x.meta.dtype)
            w, b = ops.arg(n, 2, "weight"), None
            ms = self.mean(ir.op("mul", (full, full), dt), dt)
            out = ir.op("mul", (here, ir.op("rsqrt", (ir.op("add", (ms, self.scalar(eps, dt)), dt),), dt)), dt)
        if w is not None:
            out = ir.op("mul", (out, self.at(w, idx, dt, tuple(n.meta.shape))), dt)
        if b is not None:
            out = ir.op("add", (out, self.at(b, idx, dt, tuple(n.meta.shape))), dt)
        return out


# an activation's number parameters: (name, position, default); elu's scale and input_scale are
# torch._C._nn.elu's (F.elu's third argument is `inplace`, a bool), which the kernels do not apply
_PARAMS = {"leaky_relu": (("negative_slope", 1, 0.01),), "softplus": (("beta", 1, 1.0), ("threshold", 2, 20.0)),
           "elu": (("alpha", 1, 1.0), ("scale", 2, 1.0), ("input_scale", 3, 1.0))}


def _activation_params(n, name) -> tuple:
    """The constant parameters of an activation, as floats; Unfusable for a symbolic one or an elu scale."""
    vals = []
    for pname, pos, default in _PARAMS[name]:
        v = ops.arg(n, pos, pname, default)
        if isinstance(v, bool) and pname in ("scale", "input_scale"):
            v = default  # F.elu(x, alpha, inplace): `inplace` in the place of torch._C._nn.elu's scale
        if isinstance(v, SymExpr):
            raise Unfusable(f"a symbolic {name} parameter ({pname})")
        if not isinstance(v, (int, float)):
            raise Unfusable(f"{name}'s {pname} {v!r}")
        vals.append(float(v))
    if name == "elu":
        if vals[1:] != [1.0, 1.0]:
            raise Unfusable("elu with scale or input_scale")
        return (vals[0],)
    return tuple(vals)


def _perm(n, name, rank):
    if name == "permute":
        dims = n.args[1:] if len(n.args) > 2 or not isinstance(n.args[1], (list, tuple)) else n.args[1]
        if "dims" in n.kwargs:
            dims = n.kwargs["dims"]
        return [d % rank for d in dims]
    if name == "t":
        return list(range(rank))[::-1]
    if name == "transpose":
        a, b = n.args[1] % rank, n.args[2] % rank
        p = list(range(rank))
        p[a], p[b] = p[b], p[a]
        return p
    raise Unfusable("movedim")


def _reshape_index(src: tuple, out: tuple, idx: tuple) -> tuple:
    """Index into `src` of element `idx` of its row-major reshape to `out`."""
    if src == out:
        return idx
    keep = [(s, i) for s, i in zip(out, idx) if not (isinstance(s, int) and s == 1)]
    src_big = [s for s in src if not (isinstance(s, int) and s == 1)]
    if [s for s, _ in keep] == src_big:  # only size-1 dims added or removed
        it = iter(i for _, i in keep)
        return tuple(0 if (isinstance(s, int) and s == 1) else next(it) for s in src)
    flat = sum((i * st for i, st in zip(idx, _c_strides(out))), sympy.Integer(0))
    res = []
    for d, (s, st) in enumerate(zip(src, _c_strides(src))):
        if (isinstance(s, int) and s == 1) or st == 0 or s == 0:  # size 1, or an empty tensor (no element)
            res.append(sympy.Integer(0))
            continue
        q = FloorDiv(flat, st) if st != 1 else flat
        res.append(q if d == 0 else Mod(q, s))
    return tuple(res)


def _by_caller(v: SymExpr) -> bool:
    """A number the region's wrapper computes in Python: a float formula, or an int converted from a float
    (floor, ceil, int() of one: C's conversion of an infinity or NaN is undefined, Python's raises)."""
    if v.expr.is_Symbol or v.expr.is_Number:
        return False
    return v.pytype is float or v.expr.has(FloorToInt, CeilToInt, TruncToInt)
