"""Random small PyTorch programs, as Python source text.

A program is `def f(x, y, m, n): ...` with 5-15 statements over tensors and ints.
The generator is shape-aware by construction: it runs every candidate statement
eagerly on a few reference inputs (sizes >= 2) and keeps it only if it works on
all of them, so the program is valid for "ordinary" shapes; sizes 0, 1 and
coincidences (equal sizes) are left to the runner, where eager may raise and the
compiled function must then raise too.

Statements read sizes at run time (`v.size(0) // 2`), so a program stays a
program over symbolic sizes, not over the reference values.
"""
from __future__ import annotations

import contextlib
import math
import random
import re
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .phases import DEVICE

SIZES = [0, 1, 2, 2, 3, 3, 4, 5, 5, 6, 7, 8, 11, 13, 16, 17]  # sizes for calls: 0, 1, 2, primes
REF_SIZES = [2, 3, 4, 5, 6, 7, 8]  # reference sizes the generator validates statements on
FLOATS = [0.0, -0.0, 0.5, 1.0, 1.5, -2.0, 3.0, math.inf, -math.inf, math.nan]  # the float argument's values
DIMS = "ABCD"  # dim variables shared between the inputs' shapes
MAX_NUMEL = 20000  # keeps eager fast: a candidate producing more is rejected


@dataclass
class Input:
    name: str
    kind: str  # "float" (float32 tensor), "mask" (bool tensor), "int" / "scalar" (a Python int / float argument)
    dims: tuple = ()  # dim variables ("A") or int constants; a tensor's shape per call
    grad: str = ""  # training mode, float inputs: "leaf" requires grad; "mul" / "clone": `leaf * 1` / `leaf.clone()`


@dataclass
class Stmt:
    lines: list  # source lines at function-body level (an `if` block spans several)
    out: str  # the name it assigns
    src: str | None = None  # the main operand: replaces `out` when the reducer drops this statement


@dataclass
class Program:
    inputs: list
    body: list
    ret: list  # expressions returned as a tuple
    name: str = "f"
    prelude: str = ""  # module-level code the body uses (training: a custom autograd.Function)

    def source(self) -> str:
        args = ", ".join(i.name for i in self.inputs)
        lines = ["import contextlib", "import math", "import torch", "import torch.nn.functional as F", "", ""]
        if self.prelude:
            lines += [self.prelude.rstrip(), "", ""]
        lines.append(f"def {self.name}({args}):")
        for s in self.body:
            lines += ["    " + ln for ln in s.lines]
        lines.append(f"    return ({', '.join(self.ret)}{',' if len(self.ret) == 1 else ''})")
        return "\n".join(lines) + "\n"

    def uses(self, name: str) -> bool:
        pat = re.compile(rf"\b{re.escape(name)}\b")
        return any(pat.search(ln) for s in self.body for ln in s.lines) or any(pat.search(r) for r in self.ret)


@dataclass
class Call:
    dims: dict  # dim variable -> size
    n: int  # the int argument
    seed: int  # data seed
    alias: bool = False  # pass x for y when their shapes agree (f(a, a))
    a: float = 1.5  # the float argument: -0.0, inf and nan included


def make_inputs(inputs, call: Call) -> list:
    """The arguments of one call: seeded data, float32 tensors, a bool mask, an int."""
    g = torch.Generator().manual_seed(call.seed)
    out = []
    for i in inputs:
        shape = [call.dims[d] if isinstance(d, str) else d for d in i.dims]
        if i.kind == "float":
            out.append(torch.randn(shape, generator=g).to(DEVICE[0]))
        elif i.kind == "mask":
            out.append((torch.rand(shape, generator=g) > 0.5).to(DEVICE[0]))
        elif i.kind == "scalar":
            out.append(call.a)
        else:
            out.append(call.n)
    if call.alias and len(out) > 1 and isinstance(out[1], torch.Tensor) and out[1].shape == out[0].shape:
        out[1] = out[0]
    return out


def random_call(rng: random.Random, inputs, seed: int) -> Call:
    while True:
        dims = {d: rng.choice(SIZES) for d in DIMS}
        c = Call(dims, rng.randint(-2, 9), seed, rng.random() < 0.15, rng.choice(FLOATS))
        if all(math.prod(c.dims[d] if isinstance(d, str) else d for d in i.dims) <= 4096 for i in inputs):
            return c


# ------------------------------------------------------------------ statement templates
# Each template takes the generator and returns (expression or lines, main operand) or None.
# `t` is a tensor variable, `d` a dim of it, `k` a small constant.

def _pointwise(g):
    t = g.tensor()
    e = g.rng.choice([
        "{t}.relu()", "torch.sin({t})", "{t} * 2", "{t} + 1.5", "{t}.abs()", "-{t}", "{t}.sigmoid()",
        "torch.exp({t}.clamp(max=4))", "torch.where({t} > 0, {t}, 0.5 * {t})", "{t} / ({t}.size(0) + 1)",
        "{t} * {t}.size(-1)", "{t}.float() * 0.5", "({t} > 0).float()", "{t}.cumsum(0)", "{t}.flip(0)",
        "{t}.roll(1, 0)", "{t}.clamp(-1, 1)", "{t} * {t}.numel()", "{t}.tanh() ** 2",
        "{t}.masked_fill({t} > 1, float('-inf')).softmax(-1)", "{t}.clamp(max=float('inf'))",
        "torch.nan_to_num({t}.log())", "{t}.tril()", "{t}.triu(1)", "{t}.sort(-1).values", "{t}.cummax(0).values",
        "{t}.topk(min({t}.size(-1), 2)).values", "{t}.repeat_interleave(2, 0)", "torch.broadcast_tensors({t}, {t}[:1])[1]",
        "{t}.movedim(0, -1)", "{t}.tile((2,))", "{t}.new_tensor({t}.shape).float()",
    ])
    return e.format(t=t), t


def _binary(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    e = g.rng.choice(["{t} + {u}", "{t} * {u}", "{t} - {u}", "torch.maximum({t}, {u})", "{t} / ({u}.abs() + 1)",
                      "torch.where({u} > 0, {t}, {u})", "{t}.masked_fill({u} > 1, 0.0)"])
    return e.format(t=t, u=u), t


def _reduce(g):
    t = g.tensor(min_rank=1)
    d, kd = g.dim(t), g.rng.choice(["", ", keepdim=True"])
    e = g.rng.choice(["{t}.sum({d}{kd})", "{t}.mean({d}{kd})", "{t}.amax({d}{kd})", "{t}.sum()",
                      "{t}.max({d}{kd}).values", "{t}.argmax({d}{kd})", "{t}.logsumexp({d}{kd})",
                      "{t}.prod({d}{kd})", "{t}.std({d}{kd})", "{t}.norm(dim={d}{kd})", "{t}.mean()",
                      "{t}.sum(({d}, -1){kd})", "{t}.min({d}).indices", "{t}.all({d})"])
    return e.format(t=t, d=d, kd=kd), t


def _view(g):
    t = g.tensor(min_rank=1)
    r = g.rank(t)
    d = g.dim(t)
    choices = ["{t}.reshape(-1)", "{t}.view(-1)", "{t}.flatten()", "{t}.unsqueeze({d})", "{t}.unsqueeze(-1)",
               "{t}.squeeze()", "{t}.squeeze({d})", "{t}.unflatten({d}, (1, -1))", "{t}.expand(2, *{t}.shape)",
               "{t}.repeat(2, *([1] * {t}.dim()))", "{t}.contiguous()", "{t}.clone()",
               "{t}.reshape({t}.size({d}), -1)", "{t}.view({t}.numel())", "{t}.unflatten({d}, ({t}.size({d}), 1))",
               "{t}[None]", "{t}.unsqueeze(0).expand({t}.size(0), *{t}.shape)"]
    if r >= 2:
        p = list(range(r))
        g.rng.shuffle(p)
        choices += ["{t}.transpose(0, 1)", "{t}.transpose(-1, -2)", "{t}.permute(%s)" % ", ".join(map(str, p)),
                    "{t}.flatten(0, 1)", "{t}.reshape({t}.size(0), -1)", "{t}.reshape(-1, {t}.size(-1))",
                    "{t}.mT", "{t}.transpose(0, 1).contiguous().view(-1)", "{t}.transpose(0, 1).reshape(-1)",
                    "{t}.view({t}.size(0), -1)", "{t}.unflatten(-1, (2, -1))", "{t}.repeat(1, 2, *([1] * ({t}.dim() - 2)))"]
    if r == 2:
        choices += ["{t}.t()", "{t}.reshape({t}.size(1), {t}.size(0))", "{t}[:, :, None].expand(-1, -1, 3)"]
    return g.rng.choice(choices).format(t=t, d=d), t


def _slice(g):
    t = g.tensor(min_rank=1)
    d = g.dim(t)
    n = g.int_name()
    e = g.rng.choice([
        "{t}[: {t}.size(0) // 2]", "{t}[1:]", "{t}[..., -1:]", "{t}[::2]", "{t}[{t}.size(0) // 3 : {t}.size(0) - 1]",
        "{t}[: {n}]", "{t}[..., : min({t}.size(-1), {n})]", "{t}.narrow({d}, 0, {t}.size({d}) // 2)",
        "{t}.narrow({d}, 1, {t}.size({d}) - 1)", "{t}[{t}.size(0) % 3 :]", "{t}[-({t}.size(0) // 2) :]",
        "{t}[: max({t}.size(0) - {n}, 0)]", "{t}[..., 1::2]", "{t}[: ({t}.size(0) + 1) // 2 * 2 - 1]",
    ])
    return e.format(t=t, d=d, n=n), t


def _index(g):
    t = g.tensor(min_rank=1)
    d = g.dim(t)
    e = g.rng.choice([
        "{t}[0]", "{t}[-1]", "{t}[..., 1]", "{t}[{t}.size(0) // 2]", "{t}.select({d}, {t}.size({d}) - 1)",
        "{t}[torch.arange({t}.size(0)).flip(0)]", "{t}.index_select({d}, torch.arange(0, {t}.size({d}), 2))",
        "{t}[torch.arange({t}.size(0)) % 2 == 0]", "{t}[[0, -1]]", "{t}[{t}.size(0) - 1 :, None]",
        "{t}.gather(0, torch.zeros_like({t}, dtype=torch.long))",
    ])
    return e.format(t=t, d=d), t


def _join(g):
    t, u = g.tensor(min_rank=1), g.tensor(min_rank=1)
    d = g.dim(t)
    e = g.rng.choice([
        "torch.cat([{t}, {u}], {d})", "torch.cat([{t}, {t} * 2], {d})", "torch.stack([{t}, {u}])",
        "torch.stack([{t}, {t}.flip(0)], {d})", "torch.cat([{t}[:1], {t}], 0)", "torch.cat([{t}, {u}])",
        "torch.cat({t}.chunk(2, {d})[::-1], {d})", "torch.cat([{t}, {t}.new_zeros({t}.shape)], -1)",
    ])
    return e.format(t=t, u=u, d=d), t


def _split(g):
    t = g.tensor(min_rank=1)
    d = g.dim(t)
    e = g.rng.choice([
        "{t}.split(2, {d})[0]", "{t}.chunk(3, {d})[-1]", "{t}.split([1, {t}.size({d}) - 1], {d})[1]",
        "{t}.split({t}.size({d}) // 2 + 1, {d})[0]", "{t}.chunk(2)[0]", "torch.stack({t}.split(1, {d})).sum(0)",
        "{t}.unbind(0)[0]", "{t}.tensor_split(3, {d})[1]", "{t}.chunk({t}.size(0), 0)[0]",
    ])
    return e.format(t=t, d=d), t


def _matmul(g):
    t = g.tensor(min_rank=1)
    u = g.tensor(min_rank=1, prefer_input=True)
    e = g.rng.choice([
        "{t} @ {u}", "{t} @ {t}.mT", "{t}.mT @ {t}", "torch.matmul({t}, {u}.mT)",
        "F.linear({t}, torch.ones(3, {t}.size(-1)))", "{t} @ torch.arange({t}.size(-1), dtype=torch.float32)",
        "F.linear({t}, {u})", "torch.bmm({t}, {t}.mT)", "{t} @ torch.eye({t}.size(-1))",
    ])
    return e.format(t=t, u=u), t


def _norm(g):
    t = g.tensor(min_rank=1)
    d = g.dim(t)
    e = g.rng.choice([
        "{t}.softmax({d})", "F.log_softmax({t}, -1)", "F.layer_norm({t}, {t}.shape[-1:])",
        "F.layer_norm({t}, ({t}.size(-1),))", "F.normalize({t}, dim={d})", "{t}.softmax(0)",
        "F.pad({t}, (1, 2))", "F.pad({t}, (0, {t}.size(-1) % 3))", "F.pad({t}, (1, 1, 0, 2))",
        "F.pad({t}, (0, {t}.size(0) // 2), value=-1.0)", "F.pad({t}, (-1, 1))",
    ])
    return e.format(t=t, d=d), t


def _arange(g):
    t = g.tensor(min_rank=1)
    n = g.int_name()
    e = g.rng.choice([
        "{t} + torch.arange({t}.size(-1))", "torch.arange({n}) * 1.0", "torch.arange({t}.size(0) * 2).reshape(-1, 2).float()",
        "{t} * torch.arange({t}.numel()).view({t}.shape)", "torch.arange(0, {t}.size(0), 2).float()",
        "torch.full(({t}.size(0) // 2, {t}.size(-1) % 3 + 1), 1.0)", "torch.zeros({t}.size(0) * {t}.size(-1) // 2)",
        "{t}.new_full((max({t}.size(0), 2) // 2,), float({t}.size(-1) % 5))", "torch.ones({n}, {t}.size(-1))",
        "torch.linspace(0, 1, {t}.size(0))", "{t}.new_ones({t}.size(0) - {n})",
    ])
    return e.format(t=t, n=n), t


def _datadep(g):
    t = g.tensor()
    u = g.tensor(prefer_input=True)
    e = g.rng.choice([
        "{t}.nonzero().float()", "{t}[{t} > 0]", "torch.masked_select({t}, {t} > 0.5)", "{t}[{u} > 0]",
        "torch.unique({t}.round())", "{t} * {t}.sum().item()", "{t}[: int(({t} > 0).sum())]",
        "{t}.new_zeros(int(({t} > 0).sum()))", "{t}[{t} > 0][:1] * {u}", "{t}[{t} > 0] * 2",
        "(({t} > 0).nonzero() * 1.0) @ torch.ones({t}.dim(), 2)", "torch.tensor({t}.shape).float()",
        "{t} + len({t}.nonzero())", "torch.tensor({t}.flatten()[:3].tolist())",
        "{t}.flatten()[{t}.flatten().argmax().item():]", "torch.where({t} > 0)[0].float()",
        "{t}.new_zeros(({t} > 0).sum().item(), 2)", "{t}[({t} > 0).nonzero(as_tuple=True)]",
    ] + (["{t}[m]", "torch.where(m, {t}, -{t})"] if g.has_mask else []))
    return e.format(t=t, u=u), t


def _scalar(g):
    if not g.has_scalar:
        return None
    t = g.tensor()
    e = g.rng.choice([
        "{t} * a", "{t} + a", "{t}.clamp(max=a)", "torch.full_like({t}, a)", "{t}.masked_fill({t} > 0, a)",
        "{t} * math.copysign(1.0, a)", "{t} * (1.0 if a > 0 else -1.0)", "{t} / a", "torch.where({t} > a, {t}, a)",
        "{t}.new_full((2,), a)", "{t} * float(a == 0.0)", "{t} + (a if a == a else 0.0)",
    ])
    return e.format(t=t), t


def _half(g):
    """A value through bfloat16 / float16, back to float32, an integer or a bool in the same statement:
    eager rounds each op's result to the half type, and these ops round exactly (float32 arithmetic,
    then the rounding), so integer casts and comparisons of them must agree to the bit. Half values
    stay inside the statement: eager's own half composites are off by an ulp of a row's scale (a
    bfloat16 log_softmax near 0 by 30%, a layer_norm of one element by 3e-5 where the exact value is
    0), which a later comparison would turn into a false alarm."""
    t = g.tensor()
    h = g.rng.choice(["bfloat16", "half"])
    other = "half" if h == "bfloat16" else "bfloat16"
    e = g.rng.choice([
        "({t}.{h}() * 3).float()", "({t}.{h}() * 10).long()", "({t}.{h}() * 3 + 1) > 1.5", "({t}.{h}() * 7).floor().float()",
        "({t}.{h}() / 3).float()", "({t}.{h}() * {t}.{h}()).sum(-1, dtype=torch.float32)", "({t}.{h}() + 0.1).to(torch.int32) % 3",
        "({t}.{h}() * 5).{other}().float()", "({t}.{h}() * 3 - ({t}.{h}() * 3).floor()).float()", "{t}.{h}().float() - {t}",
        "torch.where({t}.{h}() > 0.5, {t}.{h}() * 2, {t}.{h}() / 3).float()", "(({t}.{h}() - 1) * 4).to(torch.int8)",
        # a number eager reads in the half type (add, sub, compare) or in float32 (mul, div); `3 / x` rounds twice
        "({t}.{h}().clamp(0.1, 0.3) > 0.1) | ({t}.{h}() <= -0.3)", "({t}.{h}().clamp(0.1, 0.3) - 0.1) > 0",
        "(({t}.{h}() + 0.1) * 10).long()", "(3 / ({t}.{h}().abs() + 1) * 8).long()",
        "({t}.{h}().pow(3) * 4).long()", "(({t}.{h}() - 0.3 * {t}.{h}()) * 0.7).float()", "(0.7 - {t}.{h}() / 0.3).floor().float()",
    ])
    return e.format(t=t, h=h, other=other), t


def _ints(g):
    t = g.tensor(min_rank=1)
    u = g.tensor(min_rank=1)
    n = g.int_name()
    e = g.rng.choice([
        "{t}.size(0) * 2 + {n}", "{t}.numel() // 3", "min({t}.size(0), {u}.size(-1))", "max({t}.size(-1), {n})",
        "{t}.size(0) % 3", "{t}.size(0) & 1", "{t}.size(-1) >> 1", "{t}.size(0) | 1", "len({t})",
        "sum(range({t}.size(0)))", "int(math.sqrt(min({t}.size(0), {t}.size(-1))))", "{t}.dim() + {n}",
        "({t}.size(0) + {u}.size(0)) // 2", "{t}.size(-1) - {n}", "int(float(min({t}.size(0), {u}.size(0))))",
        "abs({n} - {t}.size(0))", "{t}.shape[0] ** 2",
    ])
    return e.format(t=t, u=u, n=n), None


def _branch(g):
    t, u = g.tensor(min_rank=1), g.tensor(min_rank=1)
    n = g.int_name()
    cond = g.rng.choice([
        "{t}.size(0) % 3 == 0", "{t}.size(0) > {n}", "{t}.numel() > 20", "{t}.size(0) < {u}.size(0)",
        "{t}.size(-1) == {u}.size(-1)", "{t}.dim() == 2", "{t}.size(0) * 2 >= {u}.numel()", "{n} > 2",
        "min({t}.size(0), {u}.size(-1)) > 3", "{t}.size(0) // 2 == 2", "{t}.shape[-1] != 4",
    ]).format(t=t, u=u, n=n)
    bodies = ["{t} * 2", "{t} + 1", "{t}.flip(0)", "{t}.relu()", "{t}[:1]", "{t}.roll(1, 0)", "{t}.cumsum(0)",
              "{t}[1:]", "-{t}"]
    a, b = g.rng.sample(bodies, 2)
    return [f"if {cond}:", "    {out} = " + a.format(t=t), "else:", "    {out} = " + b.format(t=t)], t


def _data_branch(g):
    """A branch on tensor data (speculation): each value decides a path."""
    t = g.tensor(min_rank=1)
    cond = g.rng.choice([
        "{t}.sum() > 0", "({t} > 0.5).any()", "({t} < 1).all()", "torch.isnan({t}.sum())",
        "{t}.sum().item() > 0", "{t}.nonzero().size(0) > 2", "int(({t} > 0).sum()) % 2 == 0",
        "{t}.mean() < {t}.median()", "bool({t}.numel() and {t}.flatten()[0] > 0)",
    ]).format(t=t)
    # both sides keep the shape: the reference inputs may take different sides
    bodies = ["{t} * 2", "{t} + 1", "{t}.flip(0)", "{t}.relu()", "{t}.cumsum(0)", "-{t}", "{t}.exp()"]
    a, b = g.rng.sample(bodies, 2)
    return [f"if {cond}:", "    {out} = " + a.format(t=t), "else:", "    {out} = " + b.format(t=t)], t


def _inplace(g):
    t = g.tensor()
    e = g.rng.choice(["{t}.contiguous()", "{t}.clone()", "{t}.reshape({t}.shape)", "{t}.view_as({t})"])
    op = g.rng.choice(["add_(1)", "mul_(2)", "zero_()", "clamp_(0, 1)"])
    return ["{out} = " + e.format(t=t), "{out}." + op], t


def _again(g):
    """An earlier statement's expression again: the trace meets the same call twice (tracing/op_memo.py
    records the second from the first)."""
    done = [s for s in g.body if len(s.lines) == 1 and s.out in g.tensors and s.src in g.tensors]
    if not done:
        return None
    s = g.rng.choice(done)
    return s.lines[0].split(" = ", 1)[1], s.src


def _try(g):
    """A `try:` block around 1-3 statements, its `except` branch giving the value another one: a trace
    that raises where eager does not (a graph break, a decision on data: `len(t.nonzero())`, `.item()`)
    and goes down the `except` branch returns a wrong result. Some bodies raise in eager too for some
    sizes (a matmul whose sizes disagree, a `view` that does not divide, `math.sqrt` of a negative):
    the compiled function must take the `except` branch on exactly those calls. A narrower handler
    (`except RuntimeError:`) lets the others through, as eager does."""
    rng = g.rng
    t = g.tensor(min_rank=1)
    u = g.tensor(min_rank=1, prefer_input=True)
    n, k = g.int_name(), rng.choice([2, 3])
    groups = {
        "data": [  # decided on data, or a graph break, in the trace; eager never raises
            "{t} + len({t}.nonzero())", "{t} * int(({t} > 0).sum())", "{t} * {t}.sum().item()", "{t}[{t} > 0]",
            "{t} - float({t}.amax())", "torch.tensor({t}.flatten()[:3].tolist())", "{t} * sum({t}.flatten()[:4].tolist())",
            "{t}[: int(({t} > 0).sum())]", "{t}.flatten()[{t}.flatten().argmax().item():]",
            "{t} * (1.0 if 'torch' in globals() else 2.0)", "{t}.nonzero().float()", "{t} * bool({t}.sum() > 0)",
            "{t}.new_zeros(({t} > 0).sum().item())",
        ],
        "raise": [  # eager raises for some sizes (or data): the except branch is eager's path there
            "{t} @ {u}", "{t} @ {u}.mT", "{t} + {u}", "{t}.view({k}, -1)", "{t}.reshape(-1, {k})",
            "{t}.unflatten(0, ({k}, -1))", "torch.cat([{t}, {u}], -1)", "torch.stack([{t}, {u}])",
            "{t} * math.sqrt({t}.size(0) - 3)", "{t} * math.log({n})", "{t}.narrow(0, 1, 2)",
            "{t}.expand({k}, *{t}.shape[1:])", "{t}.split({k})[1]", "{t}.view(int(({t} > 0).sum()), -1)",
            "{t}[{n}]", "{t} / ({t}.size(-1) - {n})",
        ],
        "plain": ["{t} * 2", "{t}.relu()", "{t}.cumsum(0)", "{t}.flip(0)", "{t}.softmax(-1)", "{t} + 1",
                  "{t}.sum(0)", "{t}.transpose(0, -1)", "{t}[1:]"],
    }
    conds = ["{t}.sum() > 0", "({t} > 0.5).any()", "int(({t} > 0).sum()) % 2 == 0", "{t}.nonzero().size(0) > 2",
             "{t}.size(0) > {n}", "{t}.sum().item() < 0"]
    body, cur = [], t
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        kind = rng.choices(["data", "raise", "plain", "if"], [3, 3, 2, 1])[0]
        if kind == "if":  # a branch on data inside the try: speculation meets the handler
            a, b = rng.sample(["{t} * 2", "{t} + 1", "{t}.flip(0)", "-{t}", "{t}.exp()"], 2)
            body += [f"if {rng.choice(conds)}:", "    {out} = " + a, "else:", "    {out} = " + b]
        else:
            body.append("{out} = " + rng.choice(groups[kind]))
        body = [ln.replace("{t}", cur).replace("{u}", u).replace("{n}", n).replace("{k}", str(k)) for ln in body]
        cur = "{out}"
    ranks = g.ranks(body)  # the except branch keeps the rank the body gives on the reference sizes
    alts = ["{t} * 0.5", "-{t}", "{t} + 2", "{t}.flip(0)", "torch.zeros_like({t})", "{t}.abs()",
            "{t}.flatten() * 0.5", "{t}.sum(0)", "{t}[:1] - 1", "{t}.unsqueeze(0)", "{t}.reshape(-1, 1)"]
    rng.shuffle(alts)
    alt = next((a.format(t=t) for a in alts if not ranks or g.ranks(["{out} = " + a.format(t=t)]) == ranks), None)
    if alt is None:
        return None
    handler = rng.choice(["Exception", "Exception", "Exception", "RuntimeError", "(ValueError, RuntimeError)"])
    return ["try:"] + ["    " + ln for ln in body] + [f"except {handler}:", "    {out} = " + alt], t


def _suppress(g):
    """The `try:` template's one-statement bodies as `with contextlib.suppress(...)`, the value given
    first: the manager's exit swallows what the body raises, as an `except` would."""
    made = _try(g)
    if made is None:
        return None
    lines, t = made
    h = lines.index(next(ln for ln in lines if ln.startswith("except ")))
    if h != 2:  # a longer body would leave a value of another rank where its second statement raised
        return made
    handler = lines[h][len("except "):-1].strip("()")
    return [lines[h + 1].strip(), f"with contextlib.suppress({handler}):", lines[1]], t


def _numbers(g):
    """Python numbers made from sizes and from the number arguments, as eager computes them: text
    (`repr(n)`, `str(list(x.shape))`, an f-string of `tuple(x.shape)`) and floats (`n * a`, `-a`)
    returned as they are (named `p<i>`, compared by type, value and a zero's sign); integer division and
    modulo by a size that a call makes 0 (eager raises ZeroDivisionError there, so must the compiled
    call); branches on the float argument (`if a:`, `a == 0`, `a == 1`: calls pass 0.0, -0.0 and 1.0)
    and on an `.item()` compared with 0 or 1, the number then used where its type decides a dtype
    (`int_tensor + a`, `torch.arange(a, ..)`, `torch.full(.., a)`). A template returns (code, operand,
    kind): kind "value" (a Python value to return), "int" (as `_ints`) or "tensor"."""
    rng = g.rng
    # mostly an input's sizes: a graph break earlier (data, `.item()`) leaves a later value's sizes plain ints
    t = rng.choice([i.name for i in g.inputs if i.kind == "float"]) if rng.random() < 0.7 else g.tensor(min_rank=1)
    if g.rank(t) < 1:
        return None
    n = g.int_name()
    kinds = ["text", "divide", "item", "float", "float", "branch", "branch", "branch", "dtype", "dtype"] \
        if g.has_scalar else ["text", "text", "divide", "divide", "item"]
    kind = rng.choice(kinds)
    if kind == "text":
        e = rng.choice(["repr({t}.size(0))", "str(list({t}.shape))", "f'{{tuple({t}.shape)}}'", "'%r' % ({t}.size(-1),)",
                        "str({{'rows': {t}.size(0)}})", "f'{{{t}.size(0)!r}}'", "repr({n})", "str({t}.size())",
                        "repr({t}.numel() // 2)", "str(({t}.size(0), {n}))", "'%d-%s' % ({t}.size(0), {t}.size(-1))"]
                       + (["repr(a)", "f'{{a!r}}'", "str([a, {t}.size(0)])", "repr({t}.size(0) * a)"] if g.has_scalar else []))
        return e.format(t=t, n=n), None, "value"
    if kind == "divide":  # by a size (or an int) that some calls make 0
        e = rng.choice(["{t}.numel() // {t}.size(0)", "{t}.size(0) // {t}.size(0)", "{t}.size(0) % {t}.size(0)",
                        "{n} % {t}.size(-1)", "{n} // {t}.size(0)", "({t}.numel() + {n}) // {t}.size(-1)",
                        "divmod({t}.numel(), {t}.size(0))[1]", "{t}.size(-1) % {t}.size(0)", "{t}.numel() // {n}",
                        "{t}.size(0) % {n}", "-{t}.size(-1) // {t}.size(0)"])
        if rng.random() < 0.3:  # a true division: a float
            e = rng.choice(["{n} / {t}.size(0)", "{t}.numel() / {t}.size(-1)", "{t}.size(0) / {n}"])
            return e.format(t=t, n=n), None, "value"
        return e.format(t=t, n=n), None, "int"
    if kind == "float":  # returned: a float with its sign (0.0 and -0.0 apart), never the int 0
        e = rng.choice(["a", "{t}.size(0) * a", "a * {t}.size(-1)", "-a", "a * 1", "a + 0.0", "a * {n}",
                        "float({t}.size(0)) * a", "a / ({t}.size(0) + 1)", "{t}.size(0) * -0.0", "a if a else 1.5",
                        "1.0 / a if a else -1.0", "a * {t}.numel() - a", "max(a, 0.0)", "abs(a) * {t}.size(0)"])
        return e.format(t=t, n=n), None, "value"
    if kind == "branch":  # decided on the float argument, then used
        cond = rng.choice(["a", "not a", "a == 0", "a != 0", "a == 0 or a == 1", "a == 1.0", "a > 0", "a == -a"])
        bodies = ["{t} * a", "{t} + a", "({t} > 0).int() + a", "torch.full_like({t}, a)", "({t} * 2).long() * a",
                  "{t}.int() - a", "{t} * 2", "{t} + 1", "({t} > 0).to(torch.int32) * a"]
        x, y = rng.sample(bodies, 2)
        return [f"if {cond}:", "    {out} = " + x.format(t=t), "else:", "    {out} = " + y.format(t=t)], t
    if kind == "dtype":  # a comparison, then the number where its type decides the dtype
        e = rng.choice(["torch.arange(a, a + 3) * (1 if a == 0 else 2)",
                        "torch.full(({t}.size(0),), a) if a == 1 else torch.full(({t}.size(0),), -a)",
                        "torch.arange(4, dtype=torch.int32) + (a if a == 0 or a == 1 else 2 * a)",
                        "torch.tensor(a) + (a == 0)", "torch.full((2,), a) if not a else torch.full((2,), -a)",
                        "({t} > 0).int() + (a if a == 0 else -a)", "torch.tensor([a, float({t}.size(0))]) * (a != 0)"])
        return e.format(t=t), t
    # an .item() compared with 0 or 1, then used
    item = rng.choice(["({t} > 0).float().mean().item()", "({t} > 0).all().float().item()", "{t}.abs().sum().item() * 0",
                       "({t} > 0).any().float().item()", "float(({t} > 5).sum().item())"])
    cond = rng.choice(["{out}_w == 0", "{out}_w == 0 or {out}_w == 1", "{out}_w == 1", "not {out}_w", "{out}_w"])
    bodies = ["({t} > 0).int() + {out}_w", "torch.full_like({t}, {out}_w)", "{t} * {out}_w",
              "({t} * 3).long() - {out}_w", "{t} + torch.tensor({out}_w)"]
    x, y = rng.sample(bodies, 2)
    return ["{out}_w = " + item.format(t=t), f"if {cond}:", "    {out} = " + x.replace("{t}", t), "else:",
            "    {out} = " + y.replace("{t}", t)], t


TEMPLATES = [(_pointwise, 3), (_binary, 3), (_reduce, 2), (_view, 4), (_slice, 2), (_index, 1), (_join, 2),
             (_split, 1), (_matmul, 1), (_norm, 2), (_arange, 1), (_datadep, 1), (_ints, 2), (_branch, 1), (_scalar, 1),
             (_inplace, 0.3), (_again, 2)]
DATA_BRANCHES = TEMPLATES + [(_data_branch, 1)]  # the driver's mix: also branches on data (speculation)
HALF = [(_half, 1)]  # and half types (inference only: a half-type gradient differs from eager's by the type's
# rounding, past float32's tolerance). Kept apart so that a seed's program from before stays the same.
NUMBERS = [(_numbers, 2.5)]  # and Python numbers from sizes and the number arguments (returned, divided by a size,
# branched on), apart too
CATCH = [(_try, 1), (_suppress, 1)]  # and `try:` / `except` (or `contextlib.suppress`) around statements that
# may raise (in the trace or in eager)


class Generator:
    def __init__(self, seed: int, n_refs: int = 3, exclude: str | None = None, templates=None):
        self.templates = templates or TEMPLATES
        self.globals = {"torch": torch, "F": F, "math": math, "contextlib": contextlib}  # what candidate statements run with
        self.rng = random.Random(seed)
        self.n_refs = n_refs
        self.exclude = re.compile(exclude) if exclude else None  # statements to leave out (known bugs)

    # -- operand choice
    def tensor(self, min_rank=0, prefer_input=False):
        pool = [v for v in self.tensors if all(r[v].dim() >= min_rank for r in self.refs)] or self.tensors
        if prefer_input and self.rng.random() < 0.5:
            return self.rng.choice([i.name for i in self.inputs if i.kind == "float"])
        if self.rng.random() < 0.6:
            return pool[-1]  # chains: keep working on the newest value
        return self.rng.choice(pool)

    def rank(self, t) -> int:
        return self.refs[0][t].dim()

    def dim(self, t) -> int:
        r = max(self.rank(t), 1)
        return self.rng.randrange(-r, r)

    def int_name(self) -> str:
        return self.rng.choice(self.ints) if self.ints else str(self.rng.randint(1, 4))

    def ranks(self, lines: list) -> set:
        """The ranks of the tensor that `lines` assign to `{out}`, over the reference environments
        where they run (a template's look ahead; `_candidate` still judges the whole statement)."""
        code = "\n".join(ln.replace("{out}", "_out") for ln in lines)
        out = set()
        for env in self.refs:
            env2 = dict(env)
            try:
                with warnings.catch_warnings(), torch.enable_grad():
                    warnings.simplefilter("ignore")
                    exec(code, self.globals, env2)
            except Exception:  # noqa: BLE001  (what the statement's handler may catch)
                continue
            if isinstance(env2.get("_out"), torch.Tensor):
                out.add(env2["_out"].dim())
        return out

    # -- program
    def program(self) -> Program:
        rng = self.rng
        self.inputs = self._inputs()
        self.refs = self._refs()
        self.tensors = [i.name for i in self.inputs if i.kind in ("float",)]
        self.ints = ["n"]
        self.values = []  # statements giving a Python value to return (`_numbers`): p<i>
        body = self.body = []
        want = rng.randint(5, 15)
        tries = 0
        while len(body) < want and tries < want * 12:
            tries += 1
            stmt = self._candidate(len(body))
            if stmt is not None:
                body.append(stmt)
        return Program(self.inputs, body, self._returns(body))

    def _inputs(self) -> list:
        rng = self.rng
        rank = rng.choice([1, 2, 2, 3, 3, 4])
        xd = tuple(rng.sample(DIMS, rank))
        y_kind = rng.choice(["same", "bcast", "trailing", "matmul", "other", "vector"])
        if y_kind == "same":
            yd = xd
        elif y_kind == "bcast":
            yd = tuple(d if rng.random() < 0.5 else 1 for d in xd)
        elif y_kind == "trailing":
            yd = xd[rng.randrange(rank):]
        elif y_kind == "matmul":
            yd = (xd[-1], rng.choice(DIMS))
        elif y_kind == "other":
            yd = (rng.choice(DIMS),) + xd[1:]
        else:
            yd = (rng.choice(DIMS),)
        inputs = [Input("x", "float", xd), Input("y", "float", yd)]
        self.has_mask = rng.random() < 0.3
        if self.has_mask:
            inputs.append(Input("m", "mask", xd))
        inputs.append(Input("n", "int"))
        self.has_scalar = rng.random() < 0.3
        if self.has_scalar:
            inputs.append(Input("a", "scalar"))
        return inputs

    def _refs(self) -> list:
        """The reference environments (name -> value) candidates are validated on."""
        refs = []
        for k in range(self.n_refs):
            c = Call({d: self.rng.choice(REF_SIZES) for d in DIMS}, self.rng.randint(1, 6), 1000 + k, False, 1.5 + k)
            refs.append(dict(zip([i.name for i in self.inputs], self._make_inputs(c))))
        return refs

    def _make_inputs(self, call: Call) -> list:
        return make_inputs(self.inputs, call)

    def _returns(self, body: list) -> list:
        rng = self.rng
        tensors = [s.out for s in body if s.out in self.tensors]
        ret = [tensors[-1]] if tensors else ["x"]
        extra = [v for v in self.tensors + self.ints if v not in ret]
        for v in rng.sample(extra, min(len(extra), rng.randint(0, 2))):
            ret.append(v)
        if rng.random() < 0.3:
            t = rng.choice(self.tensors)
            extra = rng.choice([f"{t}.shape", f"{t}.size()", f"tuple({t}.shape)", f"{t}.stride()",
                                f"{t}.storage_offset()", f"{t}.is_contiguous()", f"{t}.numel()", f"{t}.dim()"])
            if self.exclude is None or not self.exclude.search(extra):
                ret.append(extra)
        ret += [v for v in self.values if v not in ret][-2:]  # the Python values made (no draw: the same
        # returns as before for a program without them)
        return ret

    def _candidate(self, i: int) -> Stmt | None:
        fn = self.rng.choices([t for t, _ in self.templates], [w for _, w in self.templates])[0]
        try:
            made = fn(self)
        except (ValueError, IndexError):
            return None
        if made is None:
            return None
        code, src, *kind = made
        kind = kind[0] if kind else "int" if fn is _ints else "tensor"
        is_int = kind == "int"
        out = {"int": f"s{i}", "value": f"p{i}"}.get(kind, f"v{i}")
        lines = [ln.replace("{out}", out) for ln in code] if isinstance(code, list) else [f"{out} = {code}"]
        text = "\n".join(lines)
        if self.exclude is not None and self.exclude.search(text):
            return None
        try:
            compiled = compile(text, "<candidate>", "exec")
        except SyntaxError:
            return None
        new = []
        for env in self.refs:
            env2 = dict(env)
            try:
                with warnings.catch_warnings(), torch.enable_grad():  # a statement may turn grad mode off
                    warnings.simplefilter("ignore")
                    exec(compiled, self.globals, env2)
            except Exception:
                return None
            v = env2[out]
            if is_int and not isinstance(v, int):
                return None
            if kind == "value" and not isinstance(v, (str, int, float)):
                return None
            if kind == "tensor" and (not isinstance(v, torch.Tensor) or v.numel() > MAX_NUMEL):
                return None
            new.append(env2)
        if kind == "tensor" and len({e[out].dim() for e in new}) != 1:
            return None  # the rank must not depend on the sizes: later statements pick dims by rank
        for env, env2 in zip(self.refs, new):
            env.update(env2)
        {"int": self.ints, "value": self.values}.get(kind, self.tensors).append(out)
        return Stmt(lines, out, src)


def generate(seed: int, exclude: str | None = None, data_branches: bool = False, half: bool = False,
             catch: bool = False, numbers: bool = False) -> Program:
    templates = (DATA_BRANCHES if data_branches else TEMPLATES) + (HALF if half else []) + (CATCH if catch else []) \
        + (NUMBERS if numbers else [])
    return Generator(seed, exclude=exclude, templates=templates).program()
