"""C++ for one region: OpenMP over rows, a `#pragma omp simd` inner loop, sizes and strides as
runtime arguments (one kernel serves every shape the guards accept).

    extern "C" void kernel(const void* p0, void* q0, int64_t s0, int64_t s1,
                           int64_t st0_0, int64_t st0_1, int nthreads)
      contig = every input has its row-major strides -> the fast path (unit-stride loads)
      parallel for o in rows:                      # the outer dims, flattened
        pass 1..L: one inner loop per reduction level; sibling reductions share the loop
        final pass: the full-size outputs; row outputs after it

Values used by several passes (the chain under a mean and a var) are computed once into a
per-thread row buffer, so no pointwise work is repeated and no reduction is recomputed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy
import torch

from .cprint import cexpr
from .loopir import IR, level
from .lower import Region, _c_strides

_CTYPE = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
          torch.bool: "bool"}
_STORE = {torch.float16: "uint16_t", torch.bfloat16: "uint16_t", **_CTYPE}

_MATH_F1 = ("expf", "logf", "log1pf", "expm1f", "tanhf", "erff", "sinf", "cosf", "tanf", "exp2f", "log2f")
_MATH_F2 = ("powf",)


def _lane_consistent_math(used: tuple) -> str:
    """C++ that routes every call of glibc's vector math (libmvec) through ONE vector variant: the
    widest the target has (AVX-512: 16 floats / 8 doubles, else AVX2: 8 / 4). A vectorized loop
    calls the variant of its own width and its remainder calls the scalar function, and glibc's
    scalar, SSE, AVX2 and AVX-512 versions round differently: equal inputs gave outputs an ulp
    apart by position, which log_softmax over large equal logits turned into -3.6e16 for -2.64.
    Here each width's variant, and the scalar one, pads or splits its lanes into the base's."""
    out = ["#if defined(DS_MVEC) && (defined(__AVX512F__) || defined(__AVX2__))",
           "#if defined(__AVX512F__)",
           "#define DS_BASE_F(NAME) _ZGVeN16v_##NAME", "#define DS_BASE_F2(NAME) _ZGVeN16vv_##NAME",
           "#define DS_BASE_D(NAME) _ZGVeN8v_##NAME", "#define DS_BASE_D2(NAME) _ZGVeN8vv_##NAME",
           "#define DS_WF 16", "#define DS_WD 8", "#else",
           "#define DS_BASE_F(NAME) _ZGVdN8v_##NAME", "#define DS_BASE_F2(NAME) _ZGVdN8vv_##NAME",
           "#define DS_BASE_D(NAME) _ZGVdN4v_##NAME", "#define DS_BASE_D2(NAME) _ZGVdN4vv_##NAME",
           "#define DS_WF 8", "#define DS_WD 4", "#endif",
           "typedef float ds_bf __attribute__((vector_size(DS_WF * 4)));",
           "typedef double ds_bd __attribute__((vector_size(DS_WD * 8)));"]
    for lanes_f, lanes_d, isa in ((4, 2, "b"), (8, 4, "c"), (8, 4, "d"), (16, 8, "e")):
        out.append(f"typedef float ds_f{isa} __attribute__((vector_size({lanes_f * 4})));")
        out.append(f"typedef double ds_d{isa} __attribute__((vector_size({lanes_d * 8})));")
    for fname in used:
        for prec in ("f", "d"):
            name = fname if prec == "f" else fname[:-1]
            two = fname in _MATH_F2
            ct, bt, base, w = ("float", "ds_bf", "DS_BASE_F", "DS_WF") if prec == "f" else \
                ("double", "ds_bd", "DS_BASE_D", "DS_WD")
            base = f"{base}2" if two else base
            params = f"{ct} a, {ct} b" if two else f"{ct} a"
            out.append(f'extern "C" {bt} {base}({name})({bt}{", " + bt if two else ""});')
            out.append(f'extern "C" {ct} ds_{name}({params}) noexcept __attribute__((simd("notinbranch")));')
            fill_b = "vb[i] = b; " if two else ""
            out.append(f'extern "C" {ct} ds_s_{name}({params}) noexcept __asm__("ds_{name}");')
            out.append(f'extern "C" {ct} ds_s_{name}({params}) noexcept {{ {bt} va, vb; '
                       f'for (int i = 0; i < {w}; ++i) {{ va[i] = a; {fill_b}}} '
                       f'return {base}({name})(va{", vb" if two else ""})[0]; }}')
            for lanes_f, lanes_d, isa in ((4, 2, "b"), (8, 4, "c"), (8, 4, "d"), (16, 8, "e")):
                n = lanes_f if prec == "f" else lanes_d
                vt = f"ds_{prec}{isa}"
                vparams = f"{vt} a, {vt} b" if two else f"{vt} a"
                fb = "vb[i] = b[(k + i) % {n}]; ".format(n=n) if two else ""
                out.append(f'extern "C" {vt} _ZGV{isa}N{n}{"vv" if two else "v"}_ds_{name}({vparams}) noexcept {{ '
                           f'{vt} r; for (int k = 0; k < {n}; k += {w}) {{ {bt} va, vb; '
                           f'for (int i = 0; i < {w}; ++i) {{ va[i] = a[(k + i) % {n}]; {fb}}} '
                           f'{bt} o = {base}({name})(va{", vb" if two else ""}); '
                           f'for (int i = 0; i < {w} && k + i < {n}; ++i) r[k + i] = o[i]; }} return r; }}')
            out.append(f"#define {name} ds_{name}")
    out.append("#endif")
    return "\n".join(out) + "\n"


_HEAD = r"""
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <omp.h>
{MVEC}// b == 0 only where a size is 0 at run time, so no element is computed: 0 rather than a trap
static inline int64_t ds_floordiv(int64_t a, int64_t b) { if (b == 0) return 0; int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t ds_mod(int64_t a, int64_t b) { if (b == 0) return 0; int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline float ds_h2f(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
static inline uint16_t ds_f2h(float f) { _Float16 v = (_Float16)f; uint16_t h; std::memcpy(&h, &v, 2); return h; }
static inline float ds_bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t ds_f2bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16);
}
// float -> integer as eager's x86 kernels convert (cvttss2si): NaN and out of range give the "integer
// indefinite" INT32_MIN / INT64_MIN; a narrower type takes the int32's low bits. A plain cast is UB
// there, and (float)(int)x was folded into trunc(x): (-1, 1) goes in as +0, so -0.5 comes back +0.0
template <class I, class F> static inline I ds_f2i(F x) {
  typedef typename std::conditional<sizeof(I) == 8, int64_t, int32_t>::type W;
  const F lim = (F)std::numeric_limits<W>::max() + (F)1, lo = -lim - (F)1;  // 2^31 or 2^63, exact
  const bool ok = (lo == -lim ? x >= lo : x > lo) && x < lim;  // (-2^31 - 1 rounds to -2^31 in float)
  const F y = ok ? ((x > (F)-1 && x < (F)1) ? (F)0 : x) : -lim;
  return (I)(W)y;
}
template <class T> static inline T ds_maximum(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> static inline T ds_minimum(T a, T b) { return (a != a || a < b) ? a : b; }
"""
_MARK = "// ---- kernels\n"  # between the prelude and the kernels (combine)


def _used_math(body: str) -> tuple:
    """The math functions `body` names (float or double form): only their vector wrappers are compiled.
    Each wrapper is ~30 ms of g++ and all 24 were most of a kernel's second; a name the body lacks is a
    `#define` that changes nothing, so leaving its wrapper out keeps the code the same."""
    return tuple(f for f in _MATH_F1 + _MATH_F2 if re.search(rf"\b({f}|{f[:-1]})\b", body))


def with_prelude(body: str) -> str:
    """A translation unit: the includes, helpers and the math wrappers `body` uses, then `body`."""
    return _HEAD.replace("{MVEC}", _lane_consistent_math(_used_math(body))) + _MARK + body


def combine(sources: list) -> str:
    """One translation unit of several kernels' sources (their symbols already distinct): the prelude
    once, for all their math. A graph's regions then cost one compiler run, not one each."""
    bodies = "".join(src.split(_MARK, 1)[1] for src in sources)
    return with_prelude(bodies)


@dataclass
class KernelSpec:
    source: str
    n_in: int
    n_out: int
    symbols: list  # sympy symbols passed as int64, in order
    stride_dims: list  # per input: its rank (its strides follow the symbols)
    out_kinds: list = field(default_factory=list)  # 'full' | 'row' | 'col' per output


def _f(dt) -> str:
    return _CTYPE[dt]


def _lit(v, dt) -> str:
    if dt == torch.bool:
        return "true" if v else "false"
    if dt in (torch.float32, torch.float64):
        v = float(v)
        if v != v:
            return "NAN" if dt == torch.float32 else "((double)NAN)"
        if v in (float("inf"), float("-inf")):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
            return s if dt == torch.float32 else f"((double){s})"
        return f"(({_f(dt)}){v!r})"
    return f"(({_f(dt)}){int(v)}L)"


def _fn(name: str, dt) -> str:
    return name + "f" if dt == torch.float32 else name


class _Body:
    """C statements of one row, for one stride mode (contiguous or strided)."""

    def __init__(self, gen: "CppGen", contig: bool):
        self.g, self.contig = gen, contig
        self.row: list[str] = []  # statements at row scope
        self.row_names: dict = {}  # IR id -> C name at row scope
        self.inner_names: dict = {}  # IR id -> C name in the current inner loop
        self.lines: list[str] = []  # current inner-loop body
        self.stored: set = set()  # buffered nodes already written

    def name(self, n) -> str:
        if not n.inner:
            got = self.row_names.get(n.id)
            if got is None:
                got = self.row_names[n.id] = f"r{n.id}"
                self.row.append(f"const {_f(n.dtype)} r{n.id} = {self.expr(n)};")
            return got
        got = self.inner_names.get(n.id)
        if got is not None:
            return got
        if n.id in self.g.buffered and n.id in self.stored:
            return f"buf{n.id}[rr]"
        text = self.expr(n)
        nm = self.inner_names[n.id] = f"t{n.id}"
        self.lines.append(f"const {_f(n.dtype)} t{n.id} = {text};")
        if n.id in self.g.buffered:
            self.lines.append(f"buf{n.id}[rr] = t{n.id};")
            self.stored_now.add(n.id)
        return nm

    def expr(self, n) -> str:
        g = self.g
        if n.kind == "load":
            buf, idx = n.key
            off = sympy.Integer(0)
            shape = g.region.inputs[buf].meta.shape
            strides = _c_strides(shape) if self.contig else [sympy.Symbol(f"st{buf}_{d}") for d in range(len(shape))]
            for d, (i, st) in enumerate(zip(idx, strides)):
                if isinstance(shape[d], int) and shape[d] == 1:
                    continue
                off = off + i * st
            sdt = g.region.inputs[buf].meta.dtype
            ref = f"in{buf}[{cexpr(off)}]"
            if sdt == torch.float16:
                return f"ds_h2f({ref})"
            if sdt == torch.bfloat16:
                return f"ds_bf2f({ref})"
            return ref if _CTYPE[sdt] == _f(n.dtype) else f"(({_f(n.dtype)}){ref})"
        if n.kind == "gather":
            buf, idx, dim, size = n.key
            shape = g.region.inputs[buf].meta.shape
            strides = _c_strides(shape) if self.contig else [sympy.Symbol(f"st{buf}_{d}") for d in range(len(shape))]
            off = sum((i * st for d, (i, st) in enumerate(zip(idx, strides)) if d != dim), sympy.Integer(0))
            t = self.name(n.args[0])
            ref = f"in{buf}[{cexpr(off)} + {t} * {cexpr(strides[dim])}]"
            sdt = g.region.inputs[buf].meta.dtype
            if sdt == torch.float16:
                ref = f"ds_h2f({ref})"
            elif sdt == torch.bfloat16:
                ref = f"ds_bf2f({ref})"
            return f"(({t}) >= 0 && ({t}) < {cexpr(size)} ? ({_f(n.dtype)}){ref} : ({_f(n.dtype)})NAN)"
        if n.kind == "const":
            return _lit(n.key[0], n.dtype)
        if n.kind == "sym":
            return f"(({_f(n.dtype)}){cexpr(n.key[0])})"
        if n.kind == "reduce":
            return f"red{n.id}"
        a = [self.name(x) for x in n.args]
        return _op(n, a)


def _op(n, a) -> str:
    name, dt = n.key[0], n.dtype
    F = _f(dt)
    infix = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
             "gt": ">", "ge": ">=", "logical_and": "&&", "logical_or": "||"}
    if name in infix:
        return f"({a[0]} {infix[name]} {a[1]})"
    one = lambda: _lit(1, dt)  # noqa: E731
    zero = lambda: _lit(0, dt)  # noqa: E731
    x = a[0] if a else None
    if name == "cast":
        target, src = n.key[1], n.args[0].dtype
        if target == torch.bool:
            return f"({x} != 0)"
        if src == torch.bool and target in (torch.float32, torch.float64):
            # through int: g++ 12 cannot vectorize bool -> float, and the loop around the conversion
            # stayed scalar (cross-entropy's backward, onehot.to(float): 5 ns an element)
            return f"(({F})(int){x})"
        if target == torch.float16:
            return f"ds_h2f(ds_f2h((float){x}))"
        if target == torch.bfloat16:
            return f"ds_bf2f(ds_f2bf((float){x}))"
        if src.is_floating_point and not target.is_floating_point:
            return f"ds_f2i<{F}>({x})"
        return f"(({F}){x})"
    if name in ("maximum", "minimum"):
        return f"ds_{name}<{F}>({a[0]}, {a[1]})"
    if name == "where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if name == "fma":  # where eager's kernel rounds once (lower.eager_fma); nothing else is contracted
        return f"std::fma({a[0]}, {a[1]}, {a[2]})"
    if name in ("clamp_min", "clamp_max"):  # a NaN bound gives NaN, as torch.clamp does
        op = "<" if name == "clamp_min" else ">"
        return f"(({a[0]} {op} {a[1]} || {a[1]} != {a[1]}) ? {a[1]} : {a[0]})"
    if name == "logical_not":
        return f"(!{x})"
    if name == "neg":
        return f"(-{x})"
    if name == "abs":
        return f"std::fabs({x})" if dt in (torch.float32, torch.float64) else f"({x} < 0 ? -{x} : {x})"
    if name in ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "exp2", "log2", "floor",
                "ceil", "trunc", "sqrt"):
        return f"{_fn(name, dt)}({x})"
    if name == "pow":
        return f"{_fn('pow', dt)}({a[0]}, {a[1]})"
    if name == "rsqrt":
        return f"({one()} / {_fn('sqrt', dt)}({x}))"
    if name == "reciprocal":
        return f"({one()} / {x})"
    if name == "square":
        return f"({x} * {x})"
    if name == "sigmoid":
        return f"({one()} / ({one()} + {_fn('exp', dt)}(-{x})))"
    if name == "silu":
        return f"({x} / ({one()} + {_fn('exp', dt)}(-{x})))"
    if name == "relu":
        return f"({x} < 0 ? {zero()} : {x})"
    if name == "relu6":
        return f"({x} < 0 ? {zero()} : ({x} > 6 ? {_lit(6, dt)} : {x}))"
    if name == "gelu":
        if n.key[1] == "tanh":
            inner = f"({_lit(0.7978845608028654, dt)} * ({x} + {_lit(0.044715, dt)} * {x} * {x} * {x}))"
            return f"({_lit(0.5, dt)} * {x} * ({one()} + {_fn('tanh', dt)}{inner}))"
        return f"({_lit(0.5, dt)} * {x} * ({one()} + {_fn('erf', dt)}({x} * {_lit(0.7071067811865476, dt)})))"
    if name == "leaky_relu":
        return f"({x} > 0 ? {x} : {x} * {_lit(n.key[1], dt)})"
    if name == "softplus":
        beta, th = _lit(n.key[1], dt), _lit(n.key[2], dt)
        return f"({x} * {beta} > {th} ? {x} : {_fn('log1p', dt)}({_fn('exp', dt)}({x} * {beta})) / {beta})"
    if name == "elu":  # a zero is itself in eager, whatever alpha (NaN, inf, -0.0)
        return f"({x} >= 0 ? {x} : {_lit(n.key[1], dt)} * {_fn('expm1', dt)}({x}))"
    if name == "mish":
        sp = f"({x} > {_lit(20, dt)} ? {x} : {_fn('log1p', dt)}({_fn('exp', dt)}({x})))"
        return f"({x} * {_fn('tanh', dt)}({sp}))"
    if name in ("hardsigmoid", "hardswish"):
        h = f"std::min<{F}>(std::max<{F}>({x} / {_lit(6, dt)} + {_lit(0.5, dt)}, {zero()}), {one()})"
        return h if name == "hardsigmoid" else f"({x} * {h})"
    if name == "finite_or_zero":
        return f"(std::isinf({x}) ? {zero()} : {x})"
    raise NotImplementedError(name)


class CppGen:
    def __init__(self, region: Region, ir: IR, outputs: list):
        self.region, self.ir, self.outputs = region, ir, outputs  # outputs: [(graph node, IR node, kind)]
        memo: dict = {}
        reds = [n for n in ir.order if n.kind == "reduce"]
        self.levels: list[list] = []
        for r in reds:
            lv = level(r, memo)
            while len(self.levels) < lv:
                self.levels.append([])
            self.levels[lv - 1].append(r)
        self.full = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "full"]
        self.rows = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "row"]
        self.cols = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "col"]
        self.totals = [(i, n) for i, (_, n, kind) in enumerate(outputs) if kind == "total"]
        self.cols += self.totals
        self.passes = [[r.args[0] for r in lv] for lv in self.levels]
        if self.full or self.cols:
            self.passes.append([n for _, n in self.full + self.cols])
        self.buffered = self._choose_buffered()

    def _reach(self, buffered: set) -> dict:
        """IR id -> number of passes that evaluate it, given which nodes are buffered."""
        count: dict = {}
        stored: set = set()
        for roots in self.passes:
            seen: set = set()
            todo = [r for r in roots if r.inner]
            while todo:
                m = todo.pop()
                if m.id in seen:
                    continue
                seen.add(m.id)
                count[m.id] = count.get(m.id, 0) + 1
                if m.id in buffered and m.id in stored:
                    continue
                todo.extend(a for a in m.args if a.inner)
            stored |= seen & buffered
        return count

    def _choose_buffered(self) -> set:
        buffered: set = set()
        if len(self.passes) < 2:
            return buffered
        by_id = {n.id: n for n in self.ir.order}
        while True:
            count = self._reach(buffered)
            cands = [i for i, c in count.items() if c >= 2 and i not in buffered and _nontrivial(by_id[i])]
            if not cands:
                return buffered
            buffered.add(max(cands))

    # ------------------------------------------------------------------ emission
    def row_body(self, contig: bool) -> list[str]:
        b = _Body(self, contig)
        D, k = self.region.domain, self.region.k
        inner_dims = list(range(k, len(D)))
        out: list[str] = []
        for p, roots in enumerate(self.passes):
            is_final = bool(self.full or self.cols) and p == len(self.passes) - 1
            reds = [] if is_final else self.levels[p]
            b.inner_names, b.lines, b.stored_now = {}, [], set()
            pre_row = len(b.row)
            accs = []
            for r in reds:
                arg = r.args[0]
                kind = r.key[0]
                flt = r.dtype.is_floating_point
                # a float32 sum accumulates in double: a total past float32's range is +-inf once rounded, as
                # eager's; a partial sum that overflows only in eager's order ([3e38, 3e38, -3e38]: inf in
                # eager, 3e38 here) is not matched: that order is its vectorized cascade, set by the CPU's
                # vector width, and not emulated
                acc_t = "double" if (kind == "sum" and r.dtype == torch.float32) else _f(r.dtype)
                lim = f"std::numeric_limits<{_f(r.dtype)}>"  # an int32 amax starts at INT32_MIN, not a truncated INT64_MIN
                init = {"sum": "0", "max": "-INFINITY" if flt else f"{lim}::lowest()", "shift": "-INFINITY",
                        "min": "INFINITY" if flt else f"{lim}::max()"}[kind]
                if r.dtype == torch.bool:
                    init = {"sum": "false", "max": "false", "min": "true"}[kind]
                accs.append((r, acc_t, init))
                v = b.name(arg)
                if kind == "sum":
                    b.lines.append(f"acc{r.id} += ({acc_t}){v};")
                else:
                    op = "<" if kind == "min" else ">"
                    b.lines.append(f"acc{r.id} = (acc{r.id} {op} {v}) ? acc{r.id} : {v};")
            if is_final:
                for i, n in self.full:
                    v = b.name(n)
                    b.lines.append(f"out{i}[o * n_inner + rr] = {_store(v, self.outputs[i][0].meta.dtype)};")
                for i, n in self.cols:  # this thread's column sums, or its one sum
                    if (i, n) in self.totals:
                        b.lines.append(f"tacc{i} += (double){b.name(n)};")
                    else:
                        b.lines.append(f"col{i}[rr] += (double){b.name(n)};")
            row_stmts = b.row[pre_row:]
            del b.row[pre_row:]
            out += row_stmts
            for r, acc_t, init in accs:
                out.append(f"{acc_t} acc{r.id} = {init};")
            clauses = []
            for r, acc_t, _ in accs:
                red = {"sum": "+", "shift": "max"}.get(r.key[0], r.key[0])
                clauses.append(f"reduction({red}:acc{r.id})")
            if is_final:
                for i, _ in self.totals:
                    out.append(f"double tacc{i} = 0;")
                    clauses.append(f"reduction(+:tacc{i})")
            out += self._loops(inner_dims, b.lines, " ".join(clauses))
            if is_final:
                out += [f"col{i}[0] += tacc{i};" for i, _ in self.totals]
            b.stored |= b.stored_now
            for r, acc_t, _ in accs:
                out.append(f"const {_f(r.dtype)} red{r.id} = (({_f(r.dtype)})acc{r.id});")
        pre_row = len(b.row)
        stores = []
        for i, n in self.rows:
            v = b.name(n)
            stores.append(f"out{i}[o] = {_store(v, self.outputs[i][0].meta.dtype)};")
        out += b.row[pre_row:] + stores
        return out

    def _loops(self, dims, body, clauses) -> list[str]:
        D = self.region.domain
        lines: list[str] = []
        ind = ""
        rr = None
        for j, d in enumerate(dims):
            last = j == len(dims) - 1
            size = cexpr(D[d])
            if last:
                lines.append(f"{ind}#pragma omp simd {clauses}".rstrip())
            lines.append(f"{ind}for (int64_t i{d} = 0; i{d} < {size}; ++i{d}) {{")
            ind += "  "
            rr = f"i{d}" if rr is None else f"({rr}) * {size} + i{d}"
        lines.append(f"{ind}const int64_t rr = {rr};")
        lines += [ind + s for s in body]
        for _ in dims:
            ind = ind[:-2]
            lines.append(f"{ind}}}")
        return lines

    def generate(self) -> KernelSpec:
        r = self.region
        D, k = r.domain, r.k
        syms: set = set()
        for e in D:
            syms |= sympy.sympify(e).free_symbols
        for t in r.inputs:
            for s in t.meta.shape:
                syms |= sympy.sympify(s).free_symbols
        for n in self.ir.order:
            if n.kind == "sym":
                syms |= n.key[0].free_symbols
            if n.kind in ("load", "gather"):
                for e in n.key[1]:
                    syms |= e.free_symbols
            if n.kind == "gather":
                syms |= n.key[3].free_symbols
        syms -= set(self.ir.vars)
        symbols = sorted(syms, key=lambda s: s.name)
        params = [f"const void* p{i}" for i in range(len(r.inputs))]
        params += [f"void* q{i}" for i in range(len(self.outputs))]
        params += [f"{'int64_t' if s.is_integer else 'double'} {s.name}" for s in symbols]  # zf0: a float
        for i, t in enumerate(r.inputs):
            params += [f"int64_t st{i}_{d}" for d in range(len(t.meta.shape))]
        params.append("int nthreads")
        L = [f'extern "C" void kernel({", ".join(params)}) {{']
        for i, t in enumerate(r.inputs):
            st = _STORE[t.meta.dtype]
            L.append(f"  const {st}* __restrict in{i} = (const {st}*)p{i};")
        for i, (g, _, kind) in enumerate(self.outputs):
            st = "double" if kind in ("col", "total") else _STORE[g.meta.dtype]  # col: [nthreads, n_inner] partial sums
            L.append(f"  {st}* __restrict out{i} = ({st}*)q{i};")
        n_outer = " * ".join(cexpr(D[d]) for d in range(k)) or "1L"
        n_inner = " * ".join(cexpr(D[d]) for d in range(k, len(D))) or "1L"
        L.append(f"  const int64_t n_outer = {n_outer};")
        L.append(f"  const int64_t n_inner = {n_inner};")
        conds = []
        for i, t in enumerate(r.inputs):
            for d, (s, cs) in enumerate(zip(t.meta.shape, _c_strides(t.meta.shape))):
                if not (isinstance(s, int) and s == 1):
                    conds.append(f"st{i}_{d} == {cexpr(cs)}")
        L.append(f"  const bool contig = {' && '.join(conds) or 'true'};")
        L.append("  (void)contig; (void)n_inner;")
        L.append("  const bool par = nthreads > 1 && n_outer > 1 && n_outer * n_inner >= 16384;")
        L.append("  #pragma omp parallel num_threads(nthreads) if(par)")
        L.append("  {")
        for bid in sorted(self.buffered):
            node = next(n for n in self.ir.order if n.id == bid)
            L.append(f"    {_f(node.dtype)}* buf{bid} = ({_f(node.dtype)}*)std::malloc(sizeof({_f(node.dtype)}) * "
                     f"(n_inner > 0 ? n_inner : 1));")
        for i, n in self.cols:
            width = "1" if (i, n) in self.totals else "n_inner"
            L.append(f"    double* __restrict col{i} = out{i} + (int64_t)omp_get_thread_num() * {width};")
        L.append("    #pragma omp for schedule(static)")
        L.append("    for (int64_t o = 0; o < n_outer; ++o) {")
        rem = "o"
        for d in reversed(range(k)):
            if d == 0:
                L.append(f"      const int64_t i0 = {rem};")
            else:
                L.append(f"      const int64_t i{d} = {rem} % {cexpr(D[d])};")
                L.append(f"      const int64_t o{d} = {rem} / {cexpr(D[d])};")
                rem = f"o{d}"
        L.append("      if (contig) {")
        L += ["        " + s for s in self.row_body(True)]
        L.append("      } else {")
        L += ["        " + s for s in self.row_body(False)]
        L.append("      }")
        L.append("    }")
        for bid in sorted(self.buffered):
            L.append(f"    std::free(buf{bid});")
        L.append("  }")
        L.append("}")
        src = with_prelude("\n".join(L) + "\n")
        return KernelSpec(src, len(r.inputs), len(self.outputs), symbols,
                          [len(t.meta.shape) for t in r.inputs], [kind for _, _, kind in self.outputs])


def _nontrivial(n) -> bool:
    if n.kind != "op":
        return False
    if n.key[0] == "cast" and n.args[0].kind == "load":
        return False
    if n.key[0] == "cast" and n.dtype == torch.float64 and n.args[0].dtype == torch.float32:
        return False  # float32 widened (var's deviations): buffer the float, half the bytes, exact to redo
    return True


def _store(v: str, dt) -> str:
    if dt == torch.float16:
        return f"ds_f2h({v})"
    if dt == torch.bfloat16:
        return f"ds_f2bf({v})"
    return f"({_STORE[dt]})({v})"
