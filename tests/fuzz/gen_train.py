"""Random training programs: float inputs that require grad, and statements about autograd.

The inference generator's programs and statements, plus: grad-mode blocks (`with torch.no_grad():`,
`with torch.enable_grad():`, `torch.set_grad_enabled(...)` as a block and as a call), `.detach()`,
`retain_grad()` on intermediates, in-place ops on intermediates and on their views, branches on
`requires_grad` / `is_leaf` / `grad_fn` / `.grad`, data-dependent ops, normalisations, losses,
activations, and autograd's API inside the function (hooks, `torch.autograd.grad`, `backward()`,
a custom `autograd.Function` with a backward of its own, checkpoint, inference mode). Some float inputs are leaves that require grad, some are non-leaves built before the
call (`leaf * 1`, `leaf.clone()`), some do not require grad; statements are validated on reference
inputs built the same way (an in-place op on a leaf that requires grad is rejected there).

    >>> prog = generate_train(3)
    >>> any(i.grad for i in prog.inputs)
    True
"""
from __future__ import annotations

from .gen import TEMPLATES, Call, Generator, Input, Program, Stmt, _again, _data_branch
from .phases import args_of, make_leaves

GRADS = ["leaf", "leaf", "mul", "clone", ""]  # a float input's grad: see gen.Input.grad
PRELUDE = """class Square(torch.autograd.Function):  # a custom backward: 3 * x * g, not the derivative
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * g


sq = Square.apply  # bound at module level, before any compile: the usual idiom


class Lazy(torch.nn.Module):  # a weight made at the first call, over the input's last dim
    def __init__(self):
        super().__init__()
        self.w = None

    def forward(self, v):
        if self.w is None:
            self.w = torch.nn.Parameter(torch.linspace(-1, 1, v.size(-1)))
        return v * self.w
"""  # the module-level code of a program that calls Square.apply, sq or Lazy


def input_tuple(i: Input) -> tuple:
    """(name, kind, dims, grad): the form phases.py and the reproduction scripts take."""
    return (i.name, i.kind, tuple(i.dims), i.grad)


def call_tuple(c: Call) -> tuple:
    """(sizes, n, seed, y is x, a): the form phases.py and the reproduction scripts take."""
    return (dict(c.dims), c.n, c.seed, c.alias, c.a)


# ------------------------------------------------------------------ statement templates
_BLOCK_BODIES = ["{t} * 2", "{t}.sin()", "{t} * {u}", "{t}.relu() + 1", "{t}.exp().clamp(max=10)", "{t}.mul_(2)",
                 "{t}.clone()", "{t}.detach()", "{t}.sum() * {t}", "{t}.sigmoid() * {u}"]


def _grad_mode(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    body = g.rng.choice(_BLOCK_BODIES).format(t=t, u=u)
    head = g.rng.choice(["with torch.no_grad():", "with torch.enable_grad():", "with torch.set_grad_enabled(False):",
                         "with torch.set_grad_enabled(True):", "nested", "call", "call-restore"])
    if head == "nested":
        return ["with torch.no_grad():", "    with torch.enable_grad():", "        {out} = " + body], t
    if head == "call":  # the global switch, not a block: eager leaves grad mode on after the function
        return ["torch.set_grad_enabled(False)", "{out} = " + body, "torch.set_grad_enabled(True)"], t
    if head == "call-restore":
        return ["prev = torch.is_grad_enabled()", "torch.set_grad_enabled(False)", "{out} = " + body,
                "torch.set_grad_enabled(prev)"], t
    return [head, "    {out} = " + body], t


def _detach(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    e = g.rng.choice(["{t}.detach()", "{t}.detach() * {u}", "{t} - {t}.detach()", "{t}.detach().requires_grad_()",
                      "{t}.detach().clone()", "{t} * {t}.detach().sum()", "({t}.detach() > 0) * {t}",
                      "{t}.detach().requires_grad_() * {u}", "{t}.data * 2 + {t}"])
    return e.format(t=t, u=u), t


def _retain(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    e = g.rng.choice(["{t} * 2", "{t}.sin()", "{t} + {u}", "{t}.relu()", "{t}.view_as({t})", "{t} * {u}",
                      "{t}.reshape(-1)", "{t}.exp().clamp(max=5)"])
    return ["{out} = " + e.format(t=t, u=u), "{out}.retain_grad()"], t


def _inplace_view(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    r = g.rank(t)
    views = ["{t}[:1]", "{t}[::2]", "{t}.view(-1)", "{t}.unsqueeze(0)", "{t}[...]", "{t}.squeeze()"]
    if r >= 1:
        views += ["{t}[..., :2]", "{t}.narrow(-1, 0, 1)", "{t}.select(-1, 0)", "{t}[0]", "{t}.transpose(0, -1)"]
    if r >= 2:
        views += ["{t}[:, :2]", "{t}.t()" if r == 2 else "{t}.mT", "{t}.diagonal()", "{t}[1:, 1:]"]
    ops = ["mul_(2)", "add_(1)", "clamp_(min=0)", "sigmoid_()", "zero_()", "exp_()", "fill_(0.5)", "neg_()",
           "mul_({u}.sum())", "copy_({v}.detach().sin())", "add_({v})"]  # {v}: the tensor changed
    op = g.rng.choice(ops)
    form = g.rng.random()
    if form < 0.5:  # v = h[:, :2]; v.mul_(2): the base h changes too
        return ["{out} = " + g.rng.choice(views).format(t=t), "{out}." + op.format(u=u, v="{out}")], t
    if form < 0.8:  # h.add_(1) on an intermediate (or an input); the statement's name is h itself
        return f"{t}." + op.format(u=u, v=t), t
    idx = g.rng.choice(["{out}[{out} > 0] = 0.0", "{out}[..., 0] = 1.0", "{out}[:1] = {u}.sum()"])
    return ["{out} = " + ("{t} * 1" if g.rng.random() < 0.5 else "{t}").format(t=t),
            idx.format(u=u, out="{out}")], t


def _autograd_api(g):
    """Hooks, autograd.grad and backward inside the function, a custom Function, checkpoint, inference mode,
    reading and setting an input's .grad / requires_grad."""
    t = g.tensor()
    x = g.rng.choice([i.name for i in g.inputs if i.kind == "float"])
    form = g.rng.choice(["hook", "hook on an input", "grad", "grad", "backward", "function", "checkpoint",
                         "inference", "read grad", "requires_grad_"])
    if form == "hook":
        return ["{out} = %s * 2" % t, "{out}.register_hook(lambda g: g * 3)"], t
    if form == "hook on an input":  # stays on the caller's tensor: every call adds one
        return ["{out} = %s * 1" % t, "%s.register_hook(lambda g: g * 0.5)" % x], t
    if form == "grad":
        e = g.rng.choice(["torch.autograd.grad(({t} * {t}).sum(), {x}, create_graph=True)[0]",
                          "torch.autograd.grad({t}.sin().sum(), {x}, retain_graph=True)[0]",
                          "{x} * torch.autograd.grad({t}.exp().sum(), {x}, create_graph=True)[0]"])
        return e.format(t=t, x=x), t
    if form == "backward":  # the leaves' .grad fill up inside the call
        return ["{out} = (%s * %s).sum()" % (t, t), "{out}.backward(retain_graph=True)"], t
    if form == "function":
        return g.rng.choice(["Square.apply({t})", "Square.apply({t}) + {t}", "Square.apply({t}.sin())"]).format(t=t), t
    if form == "checkpoint":
        return "torch.utils.checkpoint.checkpoint(lambda v: v.sin() * 2, %s, use_reentrant=False)" % t, t
    if form == "inference":
        return ["with torch.inference_mode():", "    {out} = %s * 2" % t], t
    if form == "read grad":
        return "{t} * ({x}.grad.sum() if {x}.grad is not None else 1.0)".format(t=t, x=x), t
    return "%s.requires_grad_()" % x, x


def _grad_branch(g):
    t = g.tensor()
    inputs = [i.name for i in g.inputs if i.kind == "float"]
    cond = g.rng.choice(["{t}.requires_grad", "{t}.is_leaf", "{t}.grad_fn is None", "{t}.grad_fn is not None",
                         "not {t}.requires_grad", "torch.is_grad_enabled()", "{t}.requires_grad and not {t}.is_leaf",
                         "{x}.grad is None", "{x}.is_leaf", "{x}.requires_grad"])
    cond = cond.format(t=t, x=g.rng.choice(inputs))
    bodies = ["{t} * 2", "{t} + 1", "{t}.sin()", "{t}.relu()", "-{t}", "{t}.detach()", "{t} * {t}", "{t}.clone()"]
    a, b = g.rng.sample(bodies, 2)
    return [f"if {cond}:", "    {out} = " + a.format(t=t), "else:", "    {out} = " + b.format(t=t)], t


def _datadep(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    e = g.rng.choice(["{t}[{t} > 0]", "torch.masked_select({t}, {t} > 0)", "{t}.masked_select({u} > 0)",
                      "{t}.nonzero().float()", "torch.unique({t})", "torch.unique({t}.detach()) * {t}.sum()",
                      "{t}[{t} > 0].sum() * {u}", "{t}[{t}.nonzero(as_tuple=True)]",
                      "{t}.flatten()[{t}.flatten() > 0] * 2", "{t}[{t} > 0].exp().sum() + {t}"]
                     + (["{t}[m]", "{t}[m].sum() * {t}"] if g.has_mask else []))
    return e.format(t=t, u=u), t


def _norm(g):
    t, u = g.tensor(min_rank=1), g.tensor(prefer_input=True)
    d = g.dim(t)
    e = g.rng.choice([
        "F.layer_norm({t}, {t}.shape[-1:])", "F.layer_norm({t}, {t}.shape[-2:])", "F.rms_norm({t}, {t}.shape[-1:])",
        "F.rms_norm({t}, {t}.shape[-2:])", "F.layer_norm({t}, {t}.shape[-1:]).relu()",
        "F.layer_norm({t}, ({t}.size(-1),), eps=1e-3) * {u}", "F.rms_norm({t}, ({t}.size(-2), {t}.size(-1)))",
        "F.layer_norm({t}, {t}.shape[-1:], torch.ones({t}.size(-1)) * 2)", "F.softmax({t}, {d})",
        "F.log_softmax({t}, {d})", "{t}.softmax(-1) * {u}", "F.normalize({t}, dim=-1)",
        "F.rms_norm({t}, {t}.shape[-1:]) * {u}", "F.layer_norm({t}, {t}.shape[-2:]).sigmoid()",
    ])
    return e.format(t=t, u=u, d=d), t


def _loss(g):
    t, u = g.tensor(min_rank=1), g.tensor(prefer_input=True)
    e = g.rng.choice([
        "F.cross_entropy({t}, {t}.argmax(1))", "F.cross_entropy({t}, {t}.argmin(1), reduction='none')",
        "F.cross_entropy({t}, torch.zeros({t}.size(0), dtype=torch.long))",
        "F.cross_entropy({t}, torch.arange({t}.size(0)) % {t}.size(1))", "F.cross_entropy({t}, {u}.softmax(1))",
        "F.cross_entropy({t}, {t}.argmax(1), label_smoothing=0.1)", "F.cross_entropy({t}, {t}.argmax(1), ignore_index=0)",
        "F.cross_entropy({t}.flatten(0, -2), {t}.flatten(0, -2).argmax(-1))", "F.cross_entropy({t}, {t}.argmax(0))",
        "F.nll_loss(F.log_softmax({t}, 1), {t}.argmax(1))", "F.mse_loss({t}, {u})", "F.mse_loss({t}, {u}, reduction='sum')",
        "F.binary_cross_entropy_with_logits({t}, ({u} > 0).float())", "F.smooth_l1_loss({t}, {u})",
        "F.kl_div(F.log_softmax({t}, -1), {u}.softmax(-1), reduction='batchmean')", "F.huber_loss({t}, {u} * 2)",
    ])
    return e.format(t=t, u=u), t


def _activation(g):
    t, u = g.tensor(), g.tensor(prefer_input=True)
    e = g.rng.choice([
        "F.gelu({t})", "F.gelu({t}, approximate='tanh')", "F.silu({t})", "{t}.sigmoid()", "{t}.tanh()",
        "torch.where({t} > 0, {t}, {u})", "torch.where({u} > 0, {t} * 2, {t}.sin())", "{t}.clamp(-1, 1)",
        "{t}.clamp(min=0)", "F.relu({t})", "F.leaky_relu({t}, 0.1)", "F.softplus({t})", "F.elu({t})", "{t}.pow(2)",
        "{t}.abs()", "torch.maximum({t}, {u})", "{t}.exp().clamp(max=50)", "{t} * {t}", "{t}.sqrt()",
        "{t}.clamp(max={u})", "F.gelu({t}) * F.silu({u})", "torch.where({t} > 0, {t}, 0.0)",
    ])
    return e.format(t=t, u=u), t


def _reduction(g):
    t, u = g.tensor(min_rank=1), g.tensor(prefer_input=True)
    d, kd = g.dim(t), g.rng.choice(["", ", keepdim=True"])
    e = g.rng.choice([
        "{t}.sum({d}{kd})", "{t}.mean({d}{kd})", "{t}.amax({d}{kd})", "{t}.max({d}{kd}).values", "{t}.var({d}{kd})",
        "{t}.std()", "{t}.norm()", "{t}.logsumexp({d}{kd})", "{t}.prod({d}{kd})", "{t}.cumsum({d})",
        "{t}.cumprod({d})", "{t}.sum() * {u}", "{t}.pow(2).mean()", "{t}.abs().sum({d}, keepdim=True)",
        "{t}.amin({d}{kd})", "{t}.max()", "{t}.median()", "{t}.sum(({d}, -1){kd})",
    ])
    return e.format(t=t, u=u, d=d, kd=kd), t


def _half(g):
    """A differentiable value through bfloat16 / float16 and back: eager rounds each op's result and
    each op's gradient to the half type, and the leaves' gradients come back through the casts. The
    float32 run casts to the half type; the oracle's float64 arbiter keeps float64 (the cast is to
    the half type only from float32), so its answer stays the exact one the rounding is judged by."""
    t, u = g.tensor(min_rank=1), g.tensor(prefer_input=True)
    h = g.rng.choice(["bfloat16", "float16"])
    e = g.rng.choice([
        "{h} * 3 + 1", "({h} * {uh}).relu()", "{h}.sigmoid() * 2", "{h}.sum(-1, keepdim=True) * {h}", "3 / ({h}.abs() + 1)",
        "{h}.exp().clamp(max=10)", "{h}.tanh() / 3", "{h}.softmax(-1)", "F.silu({h}) * {uh}", "({h} > 0.1) * {h}",
        "{h}.pow(2).mean(-1, keepdim=True)", "F.rms_norm({h}, {h}.shape[-1:])", "{h} - 0.3 * {uh}",
        "torch.where({h} > 0, {h}, {h} * 0.1)", "{h} / ({uh}.abs() + 1)", "({h} - {h}.amax(-1, keepdim=True)).exp()",
    ])  # (not gelu, layer_norm, log_softmax, var/std: tests/fuzz/findings.md, an ulp apart from eager's by design)
    first = "{out} = %s.to(torch.%s if %s.dtype == torch.float32 else %s.dtype)" % (t, h, t, t)
    body = e.format(h="{out}", uh=f"{u}.to({{out}}.dtype)")
    return [first, "{out} = (%s).to(%s.dtype)" % (body, t)], t


def _autograd_state(g):
    """Autograd's objects read in the function: `isinstance(t.grad_fn, torch.autograd.graph.Node)`,
    `t.grad_fn is t.grad_fn`, `type(t.grad_fn).__name__` branched on or returned (named `p<i>`); the custom
    Function through `sq = Square.apply`, bound at module level; a module whose nn.Parameter is made
    lazily at its first call (`if self.w is None: self.w = nn.Parameter(...)`), the parameter returned,
    so that its `.grad` after backward is compared (phases.py: the returned tensors' grads)."""
    t = g.tensor()
    form = g.rng.choice(["node", "same", "name", "name", "apply", "apply", "lazy", "lazy"])
    if form == "apply":
        return g.rng.choice(["sq({t})", "sq({t}) + {t}", "sq({t}.sin())", "sq({t} * 2).sum() * {t}"]).format(t=t), t
    if form == "lazy":
        g.params.append("{out}_m.w")  # (its name: _candidate fills {out} in; see TrainGenerator._returns)
        return ["{out}_m = Lazy()", "{out} = {out}_m(%s)" % t], t
    if form == "name" and g.rng.random() < 0.5:
        return g.rng.choice(["type({t}.grad_fn).__name__", "type({t}.sin().grad_fn).__name__",
                             "str(isinstance({t}.grad_fn, torch.autograd.graph.Node))",
                             "{t}.grad_fn is {t}.grad_fn"]).format(t=t), None, "value"
    cond = {"node": ["isinstance({t}.grad_fn, torch.autograd.graph.Node)",
                     "not isinstance({t}.grad_fn, torch.autograd.graph.Node)"],
            "same": ["{t}.grad_fn is {t}.grad_fn", "{t}.grad_fn is not None and {t}.grad_fn is {t}.grad_fn"],
            "name": ["type({t}.grad_fn).__name__ == 'NoneType'", "'Backward' in type({t}.grad_fn).__name__",
                     "type({t}.grad_fn).__name__.startswith(('Mul', 'Add', 'Sin'))"]}[form]
    bodies = ["{t} * 2", "{t} + 1", "{t}.sin()", "{t}.relu()", "-{t}", "{t}.detach()", "{t} * {t}", "{t}.clone()"]
    a, b = g.rng.sample(bodies, 2)
    return [f"if {g.rng.choice(cond)}:".format(t=t), "    {out} = " + a.format(t=t), "else:",
            "    {out} = " + b.format(t=t)], t


# (not `_again`: under autograd a repeated call runs in full, tracing/op_memo.py)
TRAIN_TEMPLATES = [(fn, w * 0.6) for fn, w in TEMPLATES if fn is not _again] + [
    (_data_branch, 0.5), (_grad_mode, 2.0), (_detach, 1.0), (_retain, 1.0), (_inplace_view, 1.5), (_grad_branch, 1.5),
    (_datadep, 1.0), (_norm, 1.5), (_loss, 1.0), (_activation, 2.0), (_reduction, 1.5), (_autograd_api, 1.5),
    (_half, 1.5), (_autograd_state, 1.5)]


class TrainGenerator(Generator):
    def __init__(self, seed: int, exclude: str | None = None):
        super().__init__(seed, exclude=exclude, templates=TRAIN_TEMPLATES)
        self.retained: list = []
        self.params: list = []  # lazily made parameters to return (`_autograd_state`)
        exec(PRELUDE, self.globals)

    def _inputs(self) -> list:
        inputs = super()._inputs()
        if self.rng.random() < 0.4:  # a parameter-like vector over x's last dim
            inputs.insert(2, Input("w", "float", (inputs[0].dims[-1],), "leaf"))
        floats = [i for i in inputs if i.kind == "float"]
        for i in floats:
            i.grad = i.grad or self.rng.choice(GRADS)
        if not any(i.grad for i in floats):
            floats[0].grad = "leaf"
        return inputs

    def _make_inputs(self, call: Call) -> list:
        inputs = [input_tuple(i) for i in self.inputs]
        return args_of(inputs, make_leaves(inputs, call_tuple(call)))

    def _candidate(self, i: int) -> Stmt | None:
        params = len(self.params)
        stmt = super()._candidate(i)
        if stmt is not None and any(".retain_grad()" in ln for ln in stmt.lines):
            self.retained.append(stmt.out)
        if stmt is None:
            del self.params[params:]
        else:
            self.params[params:] = [p.replace("{out}", stmt.out) for p in self.params[params:]]
        return stmt

    def _returns(self, body: list) -> list:
        ret = super()._returns(body)
        kept = [v for v in self.retained if v not in ret]
        if kept and self.rng.random() < 0.7:  # compare the intermediate's .grad too
            ret.append(self.rng.choice(kept))
        return ret + [p for p in self.params if p not in ret]  # a lazily made parameter: its .grad


def generate_train(seed: int, exclude: str | None = None) -> Program:
    prog = TrainGenerator(seed, exclude=exclude).program()
    if prog.uses("Square") or prog.uses("sq") or prog.uses("Lazy"):
        prog.prelude = PRELUDE
    return prog

