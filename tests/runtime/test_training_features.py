"""Training features of a compiled function against eager PyTorch, on the fused backend with and
without fused autograd: tensor hooks, retain_grad, requires_grad_ changes, grad-mode blocks,
gradient accumulation with zero_grad, autocast, and a whole optimizer step inside the function.

Each case builds two copies of one small model, runs the same program eagerly on one and compiled
on the other over calls of varying batch size, and compares what the caller can see: values,
dtypes, `requires_grad`, `is_leaf`, `grad_fn` presence, `.grad` (None-ness and values), the
parameters after optimizer steps, and the calls hooks received (order and arguments). A case is
either exact (no graph break) or a graph break whose reason names the feature, and then still
eager's results."""
import copy

import pytest
import torch
from torch import nn

import dynashape as ds

BATCHES = (4, 6, 9, 5, 7, 3)


@pytest.fixture(params=[False, True], ids=["torch_regions", "fused_autograd"])
def fused_autograd(request):
    with ds.config.patch(backend="fused", fused_sync=True, fused_autograd=request.param):
        yield request.param


class Net(nn.Module):
    """Linear, GELU, LayerNorm, Linear with pointwise chains around them (fused regions)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))

    def forward(self, x):
        x = x.sigmoid() * x
        y = self.body(x)
        return torch.tanh(y) * y + 0.5 * y


def twins():
    torch.manual_seed(0)
    net = Net()
    return net, copy.deepcopy(net)


def batch(k, requires_grad=False):
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(BATCHES[k], 8, generator=g).requires_grad_(requires_grad)


def pair(k, requires_grad=False):
    """The same input twice, as two independent leaves (eager's and compiled's)."""
    x = batch(k)
    return x.clone().requires_grad_(requires_grad), x.clone().requires_grad_(requires_grad)


# ------------------------------------------------------------------ comparison
def _grad(t):
    return t.grad if (t.is_leaf or t.retains_grad) else None


def same_tensor(got, want, what, **tol):
    flags = lambda t: dict(dtype=t.dtype, shape=tuple(t.shape), requires_grad=t.requires_grad,
                           is_leaf=t.is_leaf, grad_fn_none=t.grad_fn is None, retains_grad=t.retains_grad,
                           inference=t.is_inference(), grad_none=_grad(t) is None)
    assert flags(got) == flags(want), f"{what}: compiled {flags(got)}, eager {flags(want)}"
    torch.testing.assert_close(got.detach(), want.detach(), msg=lambda m: f"{what}: {m}", **tol)
    if _grad(want) is not None:
        torch.testing.assert_close(_grad(got), _grad(want), msg=lambda m: f"{what}.grad: {m}", **tol)


def same(got, want, what="output", **tol):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: compiled {got!r}, eager a tensor"
        same_tensor(got, want, what, **tol)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), f"{what}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{what}[{i}]", **tol)
    else:
        assert got == want, f"{what}: compiled {got!r}, eager {want!r}"


def same_params(got_net, want_net, **tol):
    for (name, g), (_, w) in zip(got_net.named_parameters(), want_net.named_parameters()):
        same_tensor(g, w, name, **tol)


def same_log(got, want, **tol):
    """Hook calls: the same names in the same order, with the same gradients."""
    assert [n for n, _ in got] == [n for n, _ in want], f"hook calls: compiled {got}, eager {want}"
    for (n, g), (_, w) in zip(got, want):
        same(g, w, f"hook {n} argument", **tol)


def check_breaks(cf, reason):
    """No graph break (reason None), or graph breaks that all name `reason`."""
    if reason is None:
        assert cf.stats.graph_breaks == [], cf.stats.graph_breaks
    else:
        assert cf.stats.graph_breaks, "expected a graph break"
        assert all(reason in r for r in cf.stats.graph_breaks), cf.stats.graph_breaks


def recorder(log, name):
    def hook(g):
        log.append((name, None if g is None else g.detach().clone()))
    return hook


def run_twins(build, *, calls=3, x_grad=True, backward=lambda out, log: out[0].backward(), breaks=None, **tol):
    """`build(net, log)` -> the program; run it eagerly and compiled over `calls` batches, backward
    through `backward(out, log)`, and compare outputs, input and parameter gradients and hook logs."""
    net_e, net_c = twins()
    log_e, log_c = [], []
    f_e, cf = build(net_e, log_e), ds.compile(build(net_c, log_c))
    for k in range(calls):
        x_e, x_c = pair(k, x_grad)
        want, got = f_e(x_e), cf(x_c)
        backward(want, log_e)
        backward(got, log_c)
        same(got, want, f"call {k} output", **tol)
        same_tensor(x_c, x_e, f"call {k} input", **tol)
        same_params(net_c, net_e, **tol)
        same_log(log_c, log_e, **tol)
    check_breaks(cf, breaks)
    return cf


# ------------------------------------------------------------------ 1. tensor hooks
def test_hooks_registered_inside_on_an_intermediate(fused_autograd):
    def build(net, log):
        def f(x):
            y = net(x)
            h = y.sigmoid() * y
            h.register_hook(recorder(log, "before"))
            h.register_hook(lambda g: g * 2 + 1)  # changes the gradient
            h.register_hook(recorder(log, "after"))
            return h.pow(2).mean(), h
        return f
    run_twins(build, breaks="Tensor.register_hook()")


def test_hooks_registered_outside_on_input_parameter_and_output(fused_autograd):
    net_e, net_c = twins()
    log_e, log_c = [], []
    for net, log in ((net_e, log_e), (net_c, log_c)):
        ln_w = net.body[2].weight  # read by a fused region (layer_norm)
        ln_w.register_hook(lambda g: g + 1)
        ln_w.register_hook(recorder(log, "ln.weight"))
        net.body[0].weight.register_hook(recorder(log, "linear0.weight"))
    cf = ds.compile(net_c)
    for k in range(3):
        outs = []
        for net, log, x in zip((net_e, cf), (log_e, log_c), pair(k, True)):
            x.register_hook(recorder(log, "x"))
            x.register_hook(lambda g: g * 0.5)
            x.register_hook(recorder(log, "x modified"))
            out = net(x)
            out.register_hook(recorder(log, "output"))
            out.register_hook(lambda g: g.flip(0))
            (out * out).sum().backward()
            outs.append((out, x))
        same(outs[1], outs[0], f"call {k}")
        same_params(net_c, net_e)
        same_log(log_c, log_e)
    check_breaks(cf, None)


def test_hooks_registered_outside_on_a_returned_output_another_output_uses(fused_autograd):
    # fused autograd: one backward node for `return y, y * y` sent h's gradient past y (hooks on y
    # were called with None): such a region keeps its torch calls under autograd

    def build(net, log):
        def f(x):
            y = net(x)
            return y, y.sigmoid() * y
        return f

    def backward(out, log):
        out[0].register_hook(recorder(log, "y"))
        (out[1] * out[1]).sum().backward()
    run_twins(build, backward=backward)


# ------------------------------------------------------------------ 2. retain_grad
def test_retain_grad_inside_on_a_returned_intermediate(fused_autograd):
    def build(net, log):
        def f(x):
            y = net(x)
            h = y.sigmoid() * y
            h.retain_grad()
            return h.pow(2).mean(), h, y
        return f
    run_twins(build)


@pytest.mark.parametrize("retained", ["last", "both"])
def test_retain_grad_outside_on_returned_outputs(fused_autograd, retained):
    # "both": y too, which the other output is computed from

    def build(net, log):
        def f(x):
            y = net(x)
            return y, y.sigmoid() * y
        return f

    def backward(out, log):
        for o in (out if retained == "both" else out[1:]):
            o.retain_grad()
        (out[1] * out[1]).sum().backward()
    run_twins(build, backward=backward)


# ------------------------------------------------------------------ 3. requires_grad_ changes
def test_parameters_frozen_and_unfrozen_between_calls(fused_autograd):
    net_e, net_c = twins()
    cf = ds.compile(net_c)
    frozen = [(), ("body.0.weight", "body.2.weight"), tuple(n for n, _ in net_e.named_parameters()), ()]
    for k, names in enumerate(frozen):
        for net in (net_e, net_c):
            for n, p in net.named_parameters():
                p.requires_grad_(n not in names)
                p.grad = None
        outs = [net(x) for net, x in zip((net_e, cf), pair(k))]
        same(outs[1], outs[0], f"call {k}")
        if outs[0].requires_grad:
            for o in outs:
                o.pow(2).mean().backward()
        same_params(net_c, net_e)
    check_breaks(cf, None)


def test_requires_grad_on_fresh_tensors_inside(fused_autograd):
    # fused autograd: the region read its input's meta from before requires_grad_() and returned
    # no gradient for it

    def build(net, log):
        def f(x):
            t = torch.ones(x.shape[-1]).requires_grad_()
            u = (x * 2).detach().requires_grad_()
            s = (u * t).sigmoid() * x
            return net(s).pow(2).mean(), t, u
        return f
    run_twins(build, x_grad=False)


# ------------------------------------------------------------------ 4. grad modes
def test_no_grad_and_enable_grad_blocks_inside(fused_autograd):
    def build(net, log):
        def f(x):
            with torch.no_grad():
                s = net(x)
            y = net(x)
            with torch.no_grad():
                z = y * s
                with torch.enable_grad():
                    w = y.sigmoid() * y
            return w.pow(2).mean(), s, z, w
        return f
    run_twins(build)


@pytest.mark.parametrize("outer", ["no_grad", "inference_mode"])
def test_called_under_no_grad_or_inference_mode(fused_autograd, outer):
    def build(net, log):
        def f(x):
            y = net(x)
            with torch.enable_grad():
                e = net(x).sigmoid() * x
            return y, e
        return f
    net_e, net_c = twins()
    f_e, cf = build(net_e, None), ds.compile(build(net_c, None))
    for k in range(4):
        x_e, x_c = pair(k, k == 3)
        ctx = getattr(torch, outer) if k < 3 else torch.enable_grad  # the last call in grad mode
        with ctx():
            want = f_e(x_e)
        with ctx():
            got = cf(x_c)
        for out in (want, got):
            if out[1].requires_grad:
                out[1].sum().backward()
        same(got, want, f"call {k} under {ctx.__name__}")
        same_tensor(x_c, x_e, f"call {k} input")
        same_params(net_c, net_e)
    check_breaks(cf, None)


# ------------------------------------------------------------------ 5. gradient accumulation
@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradient_accumulation_over_three_calls(fused_autograd, set_to_none):
    net_e, net_c = twins()
    cf = ds.compile(net_c)
    opts = [torch.optim.SGD(n.parameters(), lr=0.1, momentum=0.9) for n in (net_e, net_c)]
    for step in range(2):
        for micro in range(3):
            k = 3 * step + micro
            for net, x in zip((net_e, cf), pair(k)):
                (net(x).pow(2).mean() / 3).backward()
            same_params(net_c, net_e)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
        same_params(net_c, net_e)
    check_breaks(cf, None)


# ------------------------------------------------------------------ 6. autocast
def test_autocast_inside(fused_autograd):
    def build(net, log):
        def f(x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = net(x)
                h = y.sigmoid() * y
            return h.float().pow(2).mean(), h, y
        return f
    # the bf16 values are torch's calls (autocast regions are not lowered), but the float32 loss
    # after them is a fused kernel (its mean summed in double), and so are the gradients it sends
    run_twins(build)


def test_autocast_around_the_call(fused_autograd):
    net_e, net_c = twins()
    cf = ds.compile(net_c)
    for k in range(4):
        x_e, x_c = pair(k, True)
        amp = k < 3  # the last call without autocast: its own entry
        outs = []
        for net, x in ((net_e, x_e), (cf, x_c)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                out = net(x)
            out.float().pow(2).mean().backward()
            outs.append(out)
        assert outs[0].dtype == (torch.bfloat16 if amp else torch.float32)
        tol = dict(rtol=0, atol=0) if amp else {}  # autocast regions are torch's calls: bf16 exact
        same(outs[1], outs[0], f"call {k}", **tol)
        same_tensor(x_c, x_e, f"call {k} input", **tol)
        same_params(net_c, net_e, **tol)
    check_breaks(cf, None)


# ------------------------------------------------------------------ 7. a whole training step inside
@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
], ids=["SGD", "Adam", "AdamW"])
def test_whole_training_step_inside(fused_autograd, make_opt):
    def build(net):
        opt = make_opt(net.parameters())

        def step(x):
            opt.zero_grad()
            loss = net(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss
        return step, opt
    net_e, net_c = twins()
    (f_e, opt_e), (f_c, opt_c) = build(net_e), build(net_c)
    cf = ds.compile(f_c)
    for k in range(5):
        x_e, x_c = pair(k)
        same(cf(x_c), f_e(x_e), f"step {k} loss")
        same_params(net_c, net_e)
    for p_e, p_c in zip(net_e.parameters(), net_c.parameters()):
        torch.testing.assert_close(opt_c.state[p_c], opt_e.state[p_e])
    check_breaks(cf, "reading .grad inside the compiled function")
