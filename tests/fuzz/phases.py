"""Calling a training program under a call phase, as a record of everything the caller can observe.

A record is a list of (label, value): the outputs, their autograd flags (requires_grad, is_leaf,
grad_fn None or not), the grad mode after the call, the inputs and their flags after it, every
leaf's `.grad` and the returned tensors' `.grad` after each backward; an exception ends it with
("raised", stage, exception). `oracle.compare` compares eager's record with the compiled one's.
The loss is `sum((out_i * w_i).sum())` over the float outputs (plus the non-leaf float inputs,
whose autograd history an in-place op in the program changes), with fixed random weights.
Torch only: `reduce.script` pastes this file into every training reproduction script.

    >>> rec = run_phase(lambda x: (x * 2,), [("x", "float", ("A",), "leaf")], [({"A": 3}, 0, 1, False, 1.5)], "plain")
    >>> [label for label, *_ in rec][-2:]
    ['leaf grads', 'output grads']
"""
import contextlib
import warnings

import torch
from torch.overrides import TorchFunctionMode

from .oracle import find_leak  # (pasted scripts have it above)

DEVICE = ["cpu"]  # where inputs live (`--device cuda`); data is drawn on the CPU, so every device sees the same

PHASES = {  # name: (weight in the fuzzer's mix, what the call site does)
    "plain": (3.0, "grad on: out = f(*args); loss(out).backward()"),
    "no_grad": (1.5, "out = f(*args) under torch.no_grad(); backward only where the loss requires grad"),
    "enable_grad": (1.0, "out = f(*args) under torch.enable_grad() inside an outer torch.no_grad(); then backward"),
    "two_forwards": (1.5, "out1 = f(*a); out2 = f(*b); loss1.backward(); loss2.backward() (calls in pairs)"),
    "accumulate": (1.5, "3 steps of forward + backward on the same leaves, grads not zeroed in between"),
    "grad_penalty": (1.5, "g = torch.autograd.grad(loss, leaves, create_graph=True); sum(g.pow(2).sum()).backward()"),
    "saved_hooks": (1.0, "as plain, the forward under the caller's torch.autograd.graph.saved_tensors_hooks(pack, unpack), "
                         "whose pack must get real tensors only (a FakeTensor or a meta tensor is a leak)"),
    "function_mode": (1.0, "as plain, calls whose data seed is no multiple of 3 under a TorchFunctionMode of the caller's "
                           "that swaps sin for cos and tanh for sigmoid and must see real tensors only (a FakeTensor is "
                           "a leak): traces and warm entries under it, and calls without it"),
}
STEPS = 3  # forwards + backwards of "accumulate"


class _Stop(Exception):
    pass


def make_leaves(inputs, call, dtype=torch.float32):
    """One value per input: seeded data (the inference fuzzer's), float inputs cast to `dtype` and
    requiring grad when their `grad` is set. inputs: (name, kind, dims, grad); call: (sizes, n, seed, y is x, a)."""
    dims, n, seed, alias, a = call
    g = torch.Generator().manual_seed(seed)
    out = []
    for _, kind, shape, grad in inputs:
        shape = [dims[d] if isinstance(d, str) else d for d in shape]
        if kind == "float":
            t = torch.randn(shape, generator=g, dtype=torch.float32).to(DEVICE[0], dtype)
            out.append(t.requires_grad_() if grad else t)
        elif kind == "mask":
            out.append((torch.rand(shape, generator=g, dtype=torch.float32) > 0.5).to(DEVICE[0]))
        elif kind == "scalar":
            out.append(float(a))
        else:
            out.append(n)
    if alias and len(out) > 1 and isinstance(out[1], torch.Tensor) and out[1].shape == out[0].shape:
        out[1] = out[0]  # the same tensor for two arguments
    return out


def args_of(inputs, leaves):
    """The arguments: grad "leaf" passes the leaf, "mul" / "clone" a non-leaf `leaf * 1` / `leaf.clone()`."""
    return [v * 1 if grad == "mul" else v.clone() if grad == "clone" else v for (_, _, _, grad), v in zip(inputs, leaves)]


def grad_leaves(leaves):
    """The distinct leaf tensors that require grad, in input order."""
    seen, out = set(), []
    for v in leaves:
        if isinstance(v, torch.Tensor) and v.requires_grad and v.is_leaf and id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def loss_of(inputs, out, args, seed):
    """sum((t * w).sum()) over the float outputs and the non-leaf float inputs, w seeded random."""
    g = torch.Generator().manual_seed(seed)
    terms = [t for t in tensors(out) if t.is_floating_point()]
    terms += [a for a, (_, kind, _, grad) in zip(args, inputs) if kind == "float" and grad in ("mul", "clone")]
    loss = torch.zeros(())
    for t in terms:
        loss = loss + (t * torch.randn(t.shape, generator=g, dtype=torch.float32).to(t.dtype)).sum()
    return loss


def values(v):
    """A frozen copy: tensors detached and cloned, containers rebuilt."""
    if isinstance(v, torch.Tensor):
        return _read(lambda: v.detach().clone())
    if type(v) in (list, tuple):
        return type(v)(values(x) for x in v)
    if isinstance(v, dict):
        return {k: values(x) for k, x in v.items()}
    return v


def flags(v):
    return [f"requires_grad={_read(lambda: t.requires_grad)} is_leaf={_read(lambda: t.is_leaf)} "
            f"grad_fn={_read(lambda: 'None' if t.grad_fn is None else 'set')}" for t in tensors(v)]


def _read(thunk):
    try:
        return thunk()
    except RuntimeError as e:  # a no_grad view whose base changed in place under grad: reading it raises
        return f"raises {type(e).__name__}"


def groups(calls, phase):
    """The calls each run of a phase takes: pairs for two_forwards, one call otherwise."""
    k = 2 if phase == "two_forwards" else 1
    return [calls[i:i + k] for i in range(0, len(calls), k)]


@contextlib.contextmanager
def _enable_grad_in_no_grad():
    with torch.no_grad(), torch.enable_grad():
        yield


class _Run:
    def __init__(self, fn, inputs, dtype, perturb=None):
        self.fn, self.inputs, self.dtype, self.rec = fn, inputs, dtype, []
        self.perturb = perturb  # a seed: float inputs scaled by 1 + 1e-6 noise (is an index rounding's choice?)

    def stage(self, label, thunk):
        try:
            return thunk()
        except Exception as e:  # noqa: BLE001  (an exception is a result to compare)
            self.rec.append(("raised", label, e))
            raise _Stop() from None

    def forward(self, tag, call, leaves=None, ctx=contextlib.nullcontext):
        leaves = leaves if leaves is not None else make_leaves(self.inputs, call, self.dtype)
        if self.perturb is not None:
            g = torch.Generator().manual_seed(self.perturb)
            with torch.no_grad():
                for t in leaves:
                    if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                        t.mul_(1 + 1e-6 * torch.randn(t.shape, generator=g, dtype=t.dtype).to(t.device))  # (a CPU generator)
        args = args_of(self.inputs, leaves)  # built before the call, grad on
        with ctx():
            out = self.stage(tag + "forward", lambda: self.fn(*args))
            enabled = torch.is_grad_enabled()
        leak = find_leak(out)
        if leak:
            self.rec.append(("leak", leak))
            raise _Stop()
        self.rec += [(tag + "out", values(out)), (tag + "out flags", flags(out)),
                     (tag + "grad mode after the call", enabled),
                     (tag + "inputs after the call", values(args)), (tag + "input flags", flags(args))]
        return leaves, args, out

    def loss(self, tag, args, out, seed):
        return self.stage(tag + "loss", lambda: loss_of(self.inputs, out, args, seed))

    def backward(self, tag, loss, leaves, out):
        if not loss.requires_grad:  # the flags said so already
            self.rec.append((tag + "backward", "skipped: the loss does not require grad"))
            return
        self.stage(tag + "backward", loss.backward)
        self.rec += [(tag + "leaf grads", [values(t.grad) for t in grad_leaves(leaves)]),
                     (tag + "output grads", [values(t.grad) for t in tensors(out)])]


def _plain(r, calls, ctx=contextlib.nullcontext):
    for i, call in enumerate(calls):
        tag = f"call {i}: " if len(calls) > 1 else ""
        leaves, args, out = r.forward(tag, call, ctx=ctx)
        r.backward(tag, r.loss(tag, args, out, call[2]), leaves, out)


def _no_grad(r, calls):
    _plain(r, calls, torch.no_grad)


def _enable_grad(r, calls):
    _plain(r, calls, _enable_grad_in_no_grad)


def _two_forwards(r, calls):
    done = [r.forward(f"call {i}: ", call) for i, call in enumerate(calls)]
    losses = [r.loss(f"call {i}: ", args, out, call[2]) for i, (call, (_, args, out)) in enumerate(zip(calls, done))]
    for i, ((leaves, _, out), loss) in enumerate(zip(done, losses)):
        r.backward(f"call {i}: ", loss, leaves, out)


def _accumulate(r, calls):
    for call in calls:
        leaves = make_leaves(r.inputs, call, r.dtype)
        for step in range(STEPS):
            tag = f"step {step}: "
            _, args, out = r.forward(tag, call, leaves)  # the same leaves: .grad adds up
            r.backward(tag, r.loss(tag, args, out, call[2] * STEPS + step), leaves, out)


def _grad_penalty(r, calls):
    for call in calls:
        leaves, args, out = r.forward("", call)
        loss, wrt = r.loss("", args, out, call[2]), grad_leaves(leaves)
        if not (loss.requires_grad and wrt):
            r.rec.append(("autograd.grad", "skipped: the loss does not require grad"))
            continue
        gs = r.stage("autograd.grad(loss, leaves, create_graph=True)",
                     lambda: torch.autograd.grad(loss, wrt, create_graph=True, allow_unused=True))
        r.rec += [("gradients", values(list(gs))), ("gradient flags", flags(list(gs)))]
        penalty = sum((g.pow(2).sum() for g in gs if g is not None), torch.zeros(()))
        if not penalty.requires_grad:
            r.rec.append(("penalty backward", "skipped: the penalty does not require grad"))
            continue
        r.stage("penalty backward", penalty.backward)
        r.rec.append(("leaf grads after the penalty", [values(t.grad) for t in wrt]))


def _real(t) -> bool:
    """A tensor the caller's hooks and modes may be shown: a plain tensor (or a parameter), not meta."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta"


def _seen(what, values, bad):
    for v in values:
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and not _real(t):
                bad.append(f"{what} got a {type(t).__name__} on {t.device.type}")


class _CallerMode(TorchFunctionMode):
    """The caller's mode: it records what it is shown and changes two calls (eager under it is the reference)."""
    SWAP = {torch.sin: torch.cos, torch.Tensor.sin: torch.Tensor.cos, torch.tanh: torch.sigmoid,
            torch.Tensor.tanh: torch.Tensor.sigmoid}

    def __init__(self, bad):
        super().__init__()
        self.bad = bad

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _seen("the caller's TorchFunctionMode", list(args) + list(kwargs.values()), self.bad)
        return self.SWAP.get(func, func)(*args, **kwargs)


def _under(r, calls, context):
    """The plain phase, each call's forward under `context(call, bad)` (or none where it gives None); what the
    caller's hooks or mode were shown that is no real tensor ends the record as a leak."""
    for i, call in enumerate(calls):
        tag = f"call {i}: " if len(calls) > 1 else ""
        bad: list = []
        ctx = context(call, bad)
        leaves, args, out = r.forward(tag, call, ctx=(lambda: ctx) if ctx is not None else contextlib.nullcontext)
        if bad:
            r.rec.append(("leak", f"{tag}{bad[0]} ({len(bad)} such)"))
            raise _Stop()
        r.backward(tag, r.loss(tag, args, out, call[2]), leaves, out)


def _saved_hooks(r, calls):
    def pack(bad):
        def hook(t):
            _seen("the caller's saved_tensors_hooks pack", [t], bad)
            return t
        return hook
    _under(r, calls, lambda call, bad: torch.autograd.graph.saved_tensors_hooks(pack(bad), lambda t: t))


def _function_mode(r, calls):
    _under(r, calls, lambda call, bad: _CallerMode(bad) if call[2] % 3 else None)


_PHASE_FNS = {"plain": _plain, "no_grad": _no_grad, "enable_grad": _enable_grad, "two_forwards": _two_forwards,
              "accumulate": _accumulate, "grad_penalty": _grad_penalty, "saved_hooks": _saved_hooks,
              "function_mode": _function_mode}


def run_phase(fn, inputs, calls, phase, dtype=torch.float32, perturb=None):
    """The record of calling `fn` on `calls` (one group, see `groups`) under `phase`.
    dtype=torch.float64: the float inputs and the default dtype in float64 (the oracle's arbiter);
    perturb: a seed, the float inputs scaled by 1 + 1e-6 noise (the arbiter of indices)."""
    r = _Run(fn, inputs, dtype, perturb)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with warnings.catch_warnings(), torch.enable_grad():  # leaving it restores the grad mode a program changed
            warnings.simplefilter("ignore")  # .grad of a non-leaf, std of one element, ...
            _PHASE_FNS[phase](r, calls)
    except _Stop:
        pass
    finally:
        torch.set_default_dtype(default)
    return r.rec
