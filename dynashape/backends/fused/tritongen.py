"""Triton for one region: the loop IR that `cppgen` prints as C++, printed as a Triton kernel.

Sizes and strides are kernel arguments, so one kernel serves every shape the guards accept; the
block sizes are compile-time constants picked per size bucket (`triton_run`). Every value is a
2-D block, so row values and element values broadcast as in the loop model:

    flat kernels (pointwise regions):   f = pid * XBLOCK + arange(XBLOCK)[None, :]
                                        o = f // n_inner (the row), rr = f % n_inner
    row kernels (reductions, rows):     o = pid * XBLOCK + arange(XBLOCK)[:, None]     (X, 1)
                                        for roff in range(0, n_inner, RBLOCK):
                                            rr = roff + arange(RBLOCK)[None, :]         (1, R)
                                            one pass: accumulate (X, R) lanes, then tl.sum(acc, 1)

A row kernel makes one pass over the row per reduction level and one for the full-size outputs,
recomputing what several passes read (C++ buffers it per thread; a GPU rereads it from cache).
Column sums (a bias's gradient) are added with float64 atomics.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch

from ...symbolic.functions import (BitwiseAnd, BitwiseOr, BitwiseXor, CeilToInt, FloorDiv, FloorToInt, IntTrueDiv,
                                   Mod, ToFloat, TruncToInt)
from .loopir import IR, level
from .lower import Region

TL = {torch.float32: "tl.float32", torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32",
      torch.bool: "tl.int1", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16"}
_HALF = (torch.float16, torch.bfloat16)


class NoTriton(Exception):
    """The region has something the Triton printer does not express (the reason is the message)."""


@dataclass
class TritonSpec:
    source: str  # a module defining `kernel`
    flat: bool  # flat (pointwise) kernel, else one row per XBLOCK lane
    n_in: int
    n_out: int
    symbols: list  # sympy symbols passed as int64 scalars (a float one as float32), in order
    stride_dims: list  # per input: its rank (its strides follow the symbols)
    out_kinds: list = field(default_factory=list)  # 'full' | 'row' | 'col' | 'total' per output
    n_outer: object = 1  # sympy: rows (flat: all elements are n_outer * n_inner)
    n_inner: object = 1


# ---------------------------------------------------------------------------------- index arithmetic
def texpr(e) -> str:
    """A sympy integer expression as Triton (int64 blocks and scalars), the twin of `cprint.cexpr`."""
    e = sympy.sympify(e)
    if e.is_Symbol:
        return e.name
    if e.is_Integer:
        return str(int(e))
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(texpr(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        if any(a.is_Pow and a.exp.is_Integer and a.exp < 0 for a in e.args) or any(a.is_Rational and not a.is_Integer
                                                                                    for a in e.args):
            raise NoTriton(f"a non-integer index expression {e}")
        return "(" + " * ".join(texpr(a) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return "(" + " * ".join([texpr(e.base)] * int(e.exp)) + ")"
    if isinstance(e, (FloorDiv, Mod)):
        a, b = e.args
        if a.is_nonnegative and b.is_positive:  # `//` and `%` truncate in Triton: equal to floor here
            return f"({texpr(a)} {'//' if isinstance(e, FloorDiv) else '%'} {texpr(b)})"
        return f"TM.{'floordiv' if isinstance(e, FloorDiv) else 'mod'}({texpr(a)}, {texpr(b)})"
    if isinstance(e, sympy.Max):
        return _fold("tl.maximum", e.args)
    if isinstance(e, sympy.Min):
        return _fold("tl.minimum", e.args)
    if isinstance(e, sympy.Abs):
        return f"tl.abs({texpr(e.args[0])})"
    if isinstance(e, (BitwiseAnd, BitwiseOr, BitwiseXor)):
        op = {BitwiseAnd: "&", BitwiseOr: "|", BitwiseXor: "^"}[type(e)]
        return f"({texpr(e.args[0])} {op} {texpr(e.args[1])})"
    if isinstance(e, (IntTrueDiv, ToFloat, TruncToInt, FloorToInt, CeilToInt)) or e.is_Float or e.is_Rational:
        raise NoTriton(f"float arithmetic in an index or size: {e}")
    raise NoTriton(f"texpr cannot print {type(e).__name__}: {e}")


def _fold(fn: str, args) -> str:
    out = texpr(args[0])
    for a in args[1:]:
        out = f"{fn}({out}, {texpr(a)})"
    return out


def _lit(v, dt) -> str:
    """A Python literal that Triton types weakly (it takes the other operand's type)."""
    if dt == torch.bool:
        return "True" if v else "False"
    if dt.is_floating_point:
        v = float(v)
        if v != v:
            return 'float("nan")'
        if v in (float("inf"), float("-inf")):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    return str(int(v))


def _full(v, dt) -> str:
    return f"tl.full([1, 1], {_lit(v, dt)}, {TL[dt]})"


# ---------------------------------------------------------------------------------- pointwise ops
_TL_MATH = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "sin": "tl.sin", "cos": "tl.cos",
            "erf": "tl.math.erf", "exp2": "tl.exp2", "log2": "tl.log2", "floor": "tl.floor", "ceil": "tl.ceil"}
_TM_MATH = ("log1p", "expm1", "tanh", "tan", "trunc")  # dynashape's tmath: libdevice, or formulas when interpreted


def _op(n, a) -> str:
    name, dt = n.key[0], n.dtype
    infix = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
             "gt": ">", "ge": ">=", "logical_and": "&", "logical_or": "|"}
    if name in infix:
        if name == "div" and not dt.is_floating_point:
            raise NoTriton("an integer division")
        if dt == torch.bool and name in ("add", "mul"):  # torch's bool + is or, * is and; Triton's i1 wraps (1 + 1 == 0)
            return f"({a[0]} {'|' if name == 'add' else '&'} {a[1]})"
        return f"({a[0]} {infix[name]} {a[1]})"
    x = a[0] if a else None
    one, zero = _lit(1, dt), _lit(0, dt)
    if name == "cast":
        target = n.key[1]
        if target == torch.bool:
            return f"({x} != 0)"
        if target == torch.bfloat16:  # computed in float32, rounded as the half type stores it
            return f"TM.bf16_round({x}.to(tl.float32))"
        if target == torch.float16:
            return f"{x}.to(tl.float16).to(tl.float32)"
        return f"{x}.to({TL[target]})"
    if name in ("maximum", "minimum"):  # a NaN wins, as torch.maximum
        op = ">" if name == "maximum" else "<"
        return f"tl.where(({a[0]} != {a[0]}) | ({a[0]} {op} {a[1]}), {a[0]}, {a[1]})"
    if name == "where":
        return f"tl.where({a[0]}, {a[1]}, {a[2]})"
    if name == "fma":  # where eager's kernel rounds once (lower.eager_fma); nothing else is fused (OPTIONS)
        return f"tl.fma({a[0]}, {a[1]}, {a[2]})"
    if name in ("clamp_min", "clamp_max"):  # a NaN bound gives NaN, as torch.clamp does
        op = "<" if name == "clamp_min" else ">"
        return f"tl.where(({a[0]} {op} {a[1]}) | ({a[1]} != {a[1]}), {a[1]}, {a[0]})"
    if name == "logical_not":
        return f"({x} == 0)"
    if name == "neg":
        return f"(-{x})"
    if name == "abs":
        return f"tl.abs({x})"
    if name in ("floor", "ceil", "trunc") and not dt.is_floating_point:
        return x
    if not dt.is_floating_point:
        raise NoTriton(f"{name} of {dt}")
    if name in _TL_MATH:
        return f"{_TL_MATH[name]}({x})"
    if name in _TM_MATH:
        return f"TM.{name}({x})"
    if name == "pow":
        return f"TM.pow({a[0]}, {a[1]})"
    if name == "rsqrt":
        return f"({one} / tl.sqrt({x}))"
    if name == "reciprocal":
        return f"({one} / {x})"
    if name == "square":
        return f"({x} * {x})"
    if name == "sigmoid":
        return f"({one} / ({one} + tl.exp(-{x})))"
    if name == "silu":
        return f"({x} / ({one} + tl.exp(-{x})))"
    if name == "relu":
        return f"tl.where({x} < 0, {zero}, {x})"
    if name == "relu6":
        return f"tl.where({x} < 0, {zero}, tl.where({x} > 6, {_lit(6, dt)}, {x}))"
    if name == "gelu":
        if n.key[1] == "tanh":
            inner = f"({_lit(0.7978845608028654, dt)} * ({x} + {_lit(0.044715, dt)} * {x} * {x} * {x}))"
            return f"({_lit(0.5, dt)} * {x} * ({one} + TM.tanh({inner})))"
        return f"({_lit(0.5, dt)} * {x} * ({one} + tl.math.erf({x} * {_lit(0.7071067811865476, dt)})))"
    if name == "leaky_relu":
        return f"tl.where({x} > 0, {x}, {x} * {_lit(n.key[1], dt)})"
    if name == "softplus":
        beta, th = _lit(n.key[1], dt), _lit(n.key[2], dt)
        return f"tl.where({x} * {beta} > {th}, {x}, TM.log1p(tl.exp({x} * {beta})) / {beta})"
    if name == "elu":  # a zero is itself in eager, whatever alpha (NaN, inf, -0.0)
        return f"tl.where({x} >= 0, {x}, {_lit(n.key[1], dt)} * TM.expm1({x}))"
    if name == "mish":
        sp = f"tl.where({x} > {_lit(20, dt)}, {x}, TM.log1p(tl.exp({x})))"
        return f"({x} * TM.tanh({sp}))"
    if name in ("hardsigmoid", "hardswish"):
        # by comparisons, as the C++ std::max/std::min: tl.maximum/minimum drop a NaN (eager's result is NaN)
        h = f"{x} / {_lit(6, dt)} + {_lit(0.5, dt)}"
        h = f"tl.where(({h}) > {one}, {one}, tl.where(({h}) < {zero}, {zero}, {h}))"
        return h if name == "hardsigmoid" else f"({x} * {h})"
    if name == "finite_or_zero":
        return f"tl.where(({x} == float(\"inf\")) | ({x} == float(\"-inf\")), {zero}, {x})"
    raise NoTriton(name)


# ---------------------------------------------------------------------------------- the kernel
class _Scope:
    """Names of IR values at row scope (computed once per row block) and in the current pass."""

    def __init__(self, gen: "TritonGen"):
        self.g = gen
        self.row: list[str] = []  # statements at row scope
        self.row_names: dict = {}
        self.inner_names: dict = {}
        self.lines: list[str] = []  # the current pass's loop body

    def name(self, n) -> str:
        row = not n.inner or self.g.flat
        names, out = (self.row_names, self.row) if row else (self.inner_names, self.lines)
        got = names.get(n.id)
        if got is None:
            text = self.expr(n)
            got = names[n.id] = f"{'r' if row else 't'}{n.id}"
            out.append(f"{got} = {text}")
        return got

    def expr(self, n) -> str:
        g = self.g
        mask, zero = ("m", "zm") if (n.inner or g.flat) else ("xmask", "zx")  # pointers as wide as their mask
        if n.kind in ("load", "gather"):
            buf, idx = n.key[0], n.key[1]
            shape = g.region.inputs[buf].meta.shape
            sdt = g.region.inputs[buf].meta.dtype
            skip = n.key[2] if n.kind == "gather" else None
            off = sympy.Integer(0)
            for d, i in enumerate(idx):
                if d == skip or (isinstance(shape[d], int) and shape[d] == 1):
                    continue
                off = off + i * sympy.Symbol(f"st{buf}_{d}", integer=True)
            text = texpr(off)
            if n.kind == "load" and tuple(idx) == tuple(g.ir.vars) and tuple(shape) == tuple(g.region.domain):
                # every input row-major (CONTIG, decided per launch): the element's flat index, which
                # Triton sees is contiguous (vector loads), where the strided sum of i0, i1... is not
                flat = "f" if g.flat else "(o * n_inner + rr)"
                text = f"({flat} if CONTIG else {text})"
            if n.kind == "gather":
                t = self.name(n.args[0])
                ok = f"(({t} >= 0) & ({t} < {texpr(n.key[3])}))"
                v = f"tl.load(in{buf} + {text} + {t} * st{buf}_{skip} + {zero}, mask={mask} & {ok}, other=float(\"nan\"))"
            else:
                v = f"tl.load(in{buf} + {text} + {zero}, mask={mask}, other=0)"
            return v if sdt == n.dtype else f"{v}.to({TL[n.dtype]})"
        if n.kind == "const":
            return _full(n.key[0], n.dtype)
        if n.kind == "sym":
            e = n.key[0]  # (a float symbol: its float32 value, which only a float32 cast reads, _float_symbols_ok)
            return f"({texpr(e)} + z).to({TL[n.dtype]})"
        if n.kind == "reduce":
            return f"red{n.id}"
        return _op(n, [self.name(x) for x in n.args])


class TritonGen:
    def __init__(self, region: Region, ir: IR, outputs: list):
        self.region, self.ir, self.outputs = region, ir, outputs  # outputs: [(graph node, IR node, kind)]
        memo: dict = {}
        self.levels: list[list] = []
        for r in (n for n in ir.order if n.kind == "reduce"):
            lv = level(r, memo)
            while len(self.levels) < lv:
                self.levels.append([])
            self.levels[lv - 1].append(r)
        kinds = [kind for _, _, kind in outputs]
        self.flat = not self.levels and all(k == "full" for k in kinds)
        self.full = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "full"]
        self.rows = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "row"]
        self.cols = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind in ("col", "total")]

    def _index(self, dims, flat_name: str) -> list[str]:
        """Statements giving the loop variables of `dims` from their flattened index."""
        D = self.region.domain
        out, rem = [], flat_name
        for j, d in enumerate(reversed(dims)):
            if j == len(dims) - 1:
                out.append(f"i{d} = {rem}")
            else:
                out.append(f"i{d} = {rem} % {texpr(D[d])}")
                out.append(f"q{d} = {rem} // {texpr(D[d])}")
                rem = f"q{d}"
        return out

    def _pass(self, s: _Scope, reds: list, final: bool) -> list[str]:
        """One loop over the row: accumulate `reds` (and, when final, store the full/column outputs)."""
        D, k = self.region.domain, self.region.k
        s.inner_names, s.lines = {}, []
        pre = len(s.row)
        inits, post = [], []
        for r in reds:
            kind, dt = r.key[0], r.dtype
            v = s.name(r.args[0])
            if dt == torch.bool:  # any / all, in int32 lanes
                init = "1" if kind == "min" else "0"
                inits.append(f"acc{r.id} = tl.full([XBLOCK, RBLOCK], {init}, tl.int32)")
                fn = "tl.minimum" if kind == "min" else "tl.maximum"
                s.lines.append(f"acc{r.id} = tl.where(m, {fn}(acc{r.id}, {v}.to(tl.int32)), acc{r.id})")
                post.append(f"red{r.id} = ({'tl.min' if kind == 'min' else 'tl.max'}(acc{r.id}, 1)[:, None] != 0)")
                continue
            if kind == "sum":
                inits.append(f"acc{r.id} = tl.full([XBLOCK, RBLOCK], 0, {TL[dt]})")
                s.lines.append(f"acc{r.id} = acc{r.id} + tl.where(m, {v}, 0)")
                post.append(f"red{r.id} = tl.sum(acc{r.id}, 1)[:, None]")
                continue
            lo = kind in ("max", "shift")
            if dt.is_floating_point:
                init = 'float("-inf")' if lo else 'float("inf")'
            else:
                init = str(torch.iinfo(dt).min if lo else torch.iinfo(dt).max)
            inits.append(f"acc{r.id} = tl.full([XBLOCK, RBLOCK], {init}, {TL[dt]})")
            op = ">" if lo else "<"
            s.lines.append(f"acc{r.id} = tl.where(m, tl.where(acc{r.id} {op} {v}, acc{r.id}, {v}), acc{r.id})")
            post.append(f"red{r.id} = {'tl.max' if lo else 'tl.min'}(acc{r.id}, 1)[:, None]")
        if final:
            for i, n in self.full:
                s.lines.append(f"tl.store(out{i} + o * n_inner + rr, {self._stored(s.name(n), i)}, mask=m)")
            for i, n in self.cols:
                lanes = f"tl.where(m, {s.name(n)}, 0).to(tl.float64)"
                if self.outputs[i][2] == "total":
                    inits.append(f"tacc{i} = tl.full([XBLOCK, RBLOCK], 0, tl.float64)")
                    s.lines.append(f"tacc{i} = tacc{i} + {lanes}")
                    post.append(f"tl.atomic_add(out{i}, tl.sum(tl.sum(tacc{i}, 1), 0))")
                else:  # this block's rows added into the columns
                    s.lines.append(f"tl.atomic_add(out{i} + rr, tl.sum({lanes}, 0)[None, :], mask=rmask)")
        body = ["rr = roff + tl.arange(0, RBLOCK)[None, :].to(tl.int64)", "rmask = rr < n_inner",
                "m = xmask & rmask", "zm = tl.zeros([XBLOCK, RBLOCK], tl.int64)"] + self._index(list(range(k, len(D))), "rr") + s.lines
        row_stmts = s.row[pre:]
        del s.row[pre:]
        return row_stmts + inits + ["for roff in range(0, n_inner, RBLOCK):"] + ["    " + x for x in body] + post

    def _stored(self, v: str, i: int) -> str:
        dt = self.outputs[i][0].meta.dtype
        return f"TM.to_bf16({v})" if dt == torch.bfloat16 else f"{v}.to({TL[dt]})"

    def _float_symbols_ok(self) -> bool:
        """Whether each float symbol (a module's eps under dynamic=True, a float formula's stand-in) is
        a lone symbol of the kernel's expressions that only a cast to float32 or to a half type reads:
        Triton passes a Python float as float32, the value that cast gives from float64, and torch
        converts a float to a half type through float32 too."""
        readers: dict = {}
        for n in self.ir.order:
            for a in n.args:
                readers.setdefault(a.id, []).append(n)
        for n in self.ir.order:
            if n.kind != "sym" or all(s.is_integer for s in n.key[0].free_symbols):
                continue
            if not n.key[0].is_Symbol:
                return False
            for m in readers.get(n.id, []):
                if not (m.kind == "op" and m.key[0] == "cast" and m.dtype == torch.float32):
                    return False
        return not any(n.kind in ("load", "gather") and any(not s.is_integer for e in n.key[1] for s in e.free_symbols)
                       for n in self.ir.order)

    def generate(self) -> TritonSpec:
        r = self.region
        D, k = r.domain, r.k
        syms: set = set()
        for e in D:
            syms |= sympy.sympify(e).free_symbols
        for t in r.inputs:
            for sz in t.meta.shape:
                syms |= sympy.sympify(sz).free_symbols
        for n in self.ir.order:
            if n.kind == "sym":
                syms |= n.key[0].free_symbols
            if n.kind in ("load", "gather"):
                for e in n.key[1]:
                    syms |= e.free_symbols
            if n.kind == "gather":
                syms |= n.key[3].free_symbols
        syms -= set(self.ir.vars)
        if any(not s.is_integer for s in syms) and not self._float_symbols_ok():
            raise NoTriton("a float symbol read at float64 precision (Triton passes it as float32)")
        symbols = sorted(syms, key=lambda s: s.name)
        n_outer = sympy.Mul(*[sympy.sympify(D[d]) for d in range(k)])
        n_inner = sympy.Mul(*[sympy.sympify(D[d]) for d in range(k, len(D))])
        params = [f"in{i}" for i in range(len(r.inputs))] + [f"out{i}" for i in range(len(self.outputs))]
        params += [s.name for s in symbols]
        strides = [f"st{i}_{d}" for i, t in enumerate(r.inputs) for d in range(len(t.meta.shape))]
        params += strides + ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr", "CONTIG: tl.constexpr"]
        L = ["import triton", "import triton.language as tl", "from dynashape.backends.fused import tmath as TM", "",
             "",  # sizes are not specialized (one kernel for all); strides are, so unit strides load contiguously
             f"@triton.jit(do_not_specialize={[s.name for s in symbols]!r})",
             f"def kernel({', '.join(params)}):"]
        B = [f"{s.name} = {s.name}.to(tl.int64)" for s in symbols if s.is_integer]
        B += ["z = tl.zeros([1, 1], tl.int64)",  # makes scalars int64 blocks
              f"n_outer = {texpr(n_outer)}", f"n_inner = {texpr(n_inner)}",
              "pid = tl.program_id(0).to(tl.int64)"]
        s = _Scope(self)
        if self.flat:
            # an empty domain never launches (the wrapper runs torch's calls): n_inner > 0 here
            B += ["f = pid * XBLOCK + tl.arange(0, XBLOCK)[None, :].to(tl.int64)", "m = f < n_outer * n_inner",
                  "zm = tl.zeros([1, XBLOCK], tl.int64)", "o = f // n_inner", "rr = f % n_inner"]
            B += self._index(list(range(k)), "o") + self._index(list(range(k, len(D))), "rr")
            for i, n in self.full:
                v = s.name(n)
                B += s.row
                s.row = []
                B.append(f"tl.store(out{i} + f, {self._stored(v, i)}, mask=m)")
        else:
            B += ["o = pid * XBLOCK + tl.arange(0, XBLOCK)[:, None].to(tl.int64)", "xmask = o < n_outer",
                  "zx = tl.zeros([XBLOCK, 1], tl.int64)"]
            B += self._index(list(range(k)), "o")
            for p, lv in enumerate(self.levels):
                B += self._pass(s, lv, final=False)
            if self.full or self.cols:
                B += self._pass(s, [], final=True)
            pre = len(s.row)
            stores = [f"tl.store(out{i} + o, {self._stored(s.name(n), i)}, mask=xmask)" for i, n in self.rows]
            B += s.row[pre:] + stores
        L += ["    " + x for x in B]
        src = "\n".join(L) + "\n"
        return TritonSpec(src, self.flat, len(r.inputs), len(self.outputs), symbols,
                          [len(t.meta.shape) for t in r.inputs], [kind for _, _, kind in self.outputs],
                          n_outer, n_inner)
