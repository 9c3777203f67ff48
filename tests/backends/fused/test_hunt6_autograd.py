"""What a fused region's backward holds, checked against eager when a tensor changes in place between
the forward and the backward: a value the graph made and the user can reach (returned or stored, or a
view of it) is copied, so its gradients are eager's; the caller's own tensors are version-checked
(InputChangedError, as documented); what eager's autograd keeps (`autodiff.eager_saves`, and the
operands brgemm's product keeps) raises where eager's raises, and nowhere else."""
import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from dynashape.backends.fused import autodiff


@pytest.fixture(autouse=True)
def _fused_autograd():
    with ds.config.patch(fused_autograd=True):
        yield


def _outcome(fn, args, leaves, change):
    """The gradients of fn's first output w.r.t. the leaves that require grad after `change(args, outputs)`,
    or the error's type."""
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    change(args, outs)
    wrt = [t for t in leaves if t.requires_grad]
    try:
        gs = torch.autograd.grad(outs[0].sum(), wrt, allow_unused=True)
        return [torch.zeros_like(t) if g is None else g.detach() for g, t in zip(gs, wrt)]
    except RuntimeError as e:
        return type(e)


def _same_as_eager(f, make, change, shapes=(3, 5), **tol):
    """Compiled f (fused regions with generated backwards) gives eager's gradients or eager's error;
    make(n) -> (f's arguments, the leaves to differentiate)."""
    cf = ds.compile(f, dynamic=True, backend="fused")
    for n in shapes:
        want = _outcome(f, *make(n), change)
        got = _outcome(cf, *make(n), change)
        if isinstance(want, type):
            assert isinstance(got, type), f"eager raised {want.__name__}, compiled returned gradients"
        else:
            assert not isinstance(got, type), f"compiled raised {got.__name__} where eager returned gradients"
            torch.testing.assert_close(got, want, **tol)
    assert any(rt.backward is not None for e in cf.entries for rt in e.fn.regions)
    return cf


def _xw(n):
    torch.manual_seed(n)
    args = torch.randn(n, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    return args, args


# ---------------------------------------------------------------- values the graph made, reachable by a view
def _by_view(x, w):
    h = x @ w
    return (h * 2).sin(), h.view(-1)


def _by_index(x, w):
    h = torch.mm(x, w)
    return (h * 2).sin() * (h + 1).cos(), h[0]


def _by_transpose(x, w):
    h = torch.cat([x, x]) @ w
    return (h * 3).sin(), h.t()


def _logits_by_view(x, w):  # a loss over a product's logits, the logits returned (for metrics) as a view
    logits = x @ w
    return F.cross_entropy(logits, torch.arange(logits.shape[0]) % 4), logits.view(-1)


def _directly(x, w):
    h = x @ w
    return (h * 2).sin(), h


@pytest.mark.parametrize("f", [_by_view, _by_index, _by_transpose, _logits_by_view, _directly])
def test_a_product_returned_as_a_view_and_changed_by_the_caller_gives_eager_s_gradients(f):
    # eager's sin (log_softmax) kept its own input (result): the caller's lv.mul_(5) changes nothing it
    # reads; the region recomputes from h, which was taken for unreachable (its view not followed)
    _same_as_eager(f, _xw, lambda a, outs: outs[1].mul_(5))


class _StoresAView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        self.hv = [h.unsqueeze(0)]  # only a view of h escapes, into module state
        return (h * 2).sin()


def test_a_product_a_module_stores_only_a_view_of_gives_eager_s_gradients_after_the_caller_changes_it():
    torch.manual_seed(0)
    m = _StoresAView()
    cm = ds.compile(m, dynamic=True, backend="fused")
    got, x0 = [], torch.randn(5, 4)
    for mod in (m, cm):
        x = x0.clone().requires_grad_()
        out = mod(x)
        m.hv[0].mul_(5)  # (the compiled module writes the original's attribute)
        got.append(torch.autograd.grad(out.sum(), [x, m.lin.weight]))
    torch.testing.assert_close(got[1], got[0])
    assert cm.entries[0].fn.regions


def test_a_product_no_user_can_reach_is_held_without_a_copy():
    # h neither returned nor stored, nor any view of it: the backward reads it as it is (no copy a step)
    cf = _same_as_eager(lambda x, w: ((x @ w) * 2).sin(), _xw, lambda a, outs: None)
    rt = next(rt for rt in cf.entries[0].fn.regions if rt.backward is not None)
    assert rt.internal == {0} and not rt.exposed


def test_an_einsum_view_of_an_argument_is_the_caller_s_tensor_not_a_value_of_the_graph():
    # einsum("ij->ij", x) returns a view of x: the caller's x.mul_(10) reached the region's input, which was
    # held unchecked as new memory (silently wrong gradients); now it is the documented InputChangedError
    def f(x, w):
        return (torch.einsum("ij->ij", x) * 2 + w).sin()

    def make(n):
        torch.manual_seed(n)
        args = torch.randn(n, 4), torch.randn(4, requires_grad=True)
        return args, args
    cf = ds.compile(f, dynamic=True, backend="fused")
    want = _outcome(f, *make(3), lambda a, outs: a[0].mul_(10))
    got = _outcome(cf, *make(3), lambda a, outs: a[0].mul_(10))
    assert got is autodiff.InputChangedError and not isinstance(want, type)
    rt = next(rt for rt in cf.entries[0].fn.regions if rt.backward is not None)
    assert not rt.internal and not rt.exposed


def test_an_einsum_of_two_operands_is_new_memory():
    cf = _same_as_eager(lambda x, w: (torch.einsum("ij,jk->ik", x, w) * 2).sin(), _xw, lambda a, outs: None)
    rt = next(rt for rt in cf.entries[0].fn.regions if rt.backward is not None)
    assert rt.internal == {0}


# ---------------------------------------------------------------- what eager keeps of each call
def _pair(dtype, x_grad, y_grad):
    def make(n):
        torch.manual_seed(n)
        x = (torch.rand(n, 4) + 0.5).to(dtype)
        y = (torch.rand(4) + 0.5).to(dtype)
        leaves = (x.requires_grad_(x_grad), y.requires_grad_(y_grad))
        return [t * 1 if t.requires_grad else t.clone() for t in leaves], leaves  # (non-leaves: changeable)
    return make


CALLS = {
    "rdiv": lambda x, y: (2 / x).sin() + 1,  # eager: x.reciprocal() * 2, which keeps the reciprocal only
    "rdiv of a tensor": lambda x, y: x.__rtruediv__(y).sin() + 1,  # keeps y (x's gradient), never x
    "div": lambda x, y: (x / y).sin() + 1,
    "mul": lambda x, y: (x * y).sin() + 1,
    "rms_norm": lambda x, y: F.rms_norm(x, (4,), y) * 2,  # keeps x and the weight where x needs a gradient
    "layer_norm": lambda x, y: F.layer_norm(x, (4,), y, y) * 2,  # keeps all three, always
    "exp": lambda x, y: (x * y).exp() + x.sin(),
}


@pytest.mark.parametrize("changed", ["x", "y"])
@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("call", list(CALLS))
def test_an_operand_the_function_changes_after_a_call_raises_in_the_backward_where_eager_s_raises(call, grads, changed):
    # the function changes an operand after the region read it: the region keeps a copy unless eager keeps
    # that operand (eager_saves), whose change must raise in the backward as eager's does; `2 / x` claimed x
    op = CALLS[call]

    def f(x, y):
        out = op(x, y)
        (x if changed == "x" else y).mul_(1.5)
        return out
    _same_as_eager(f, _pair(torch.float32, *grads), lambda a, outs: None)


@pytest.mark.parametrize("grads", [(True, True), (False, True)])
def test_a_half_type_rms_norm_keeps_the_weight_not_its_input(grads):
    # eager's bfloat16 rms_norm upcasts x first: its float32 copy is kept, not x
    def f(x, y):
        out = F.rms_norm(x, (4,), y) * 2
        x.mul_(1.5)
        return out
    _same_as_eager(f, _pair(torch.bfloat16, *grads), lambda a, outs: None, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("call", ["rdiv", "rms_norm", "exp"])
def test_eager_saves_names_what_eager_s_grad_fn_holds(call):
    # the table against eager itself: the operands the compiled region claims eager keeps are those eager's
    # autograd nodes hold (by storage), for each combination of operands that need a gradient
    for grads in [(True, True), (True, False), (False, True)]:
        x, y = _pair(torch.float32, *grads)(3)[0]
        cf = ds.compile(CALLS[call], dynamic=True, backend="fused")
        cf(x, y)
        rt = next(rt for rt in cf.entries[0].fn.regions if rt.backward is not None)
        claimed = {rt.region.inputs[i].name for i in rt.backward.eager_in}
        held = _held(CALLS[call](x, y))
        assert claimed == {n for n, t in (("x", x), ("y", y)) if _same_storage(t, held)}, grads
        ds.reset()


def _held(t) -> list:
    seen, out, todo = set(), [], [t.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for name in dir(fn):
            if name.startswith("_saved_"):
                v = getattr(fn, name)
                if isinstance(v, torch.Tensor):
                    out.append(v)
        todo += [f for f, _ in fn.next_functions]
    return out


def _same_storage(t, held) -> bool:
    return any(h.data_ptr() == t.data_ptr() and h.shape == t.shape and h.dtype == t.dtype for h in held)


# ---------------------------------------------------------------- the operands brgemm's product keeps
@pytest.mark.usefixtures("gemm_on")
def test_a_frozen_input_s_linear_keeps_no_weight_its_update_before_backward_gives_eager_s_gradients():
    # eager's addmm keeps the weight only for the input's gradient: an EMA-like weight update between
    # forward and backward is fine there (the fused product kept both and raised)
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

        def forward(self, x):
            return self.l2(torch.relu(self.l1(x)))
    torch.manual_seed(0)
    m, m2 = M(), M()
    m2.load_state_dict(m.state_dict())
    cm = ds.compile(m2, dynamic=True, backend="fused")
    for n in (64, 96):
        x = torch.randn(n, 64)
        got = []
        for mod, owner in ((m, m), (cm, m2)):
            out = mod(x)
            with torch.no_grad():
                owner.l1.weight.mul_(0.99)
            out.sum().backward()
            got.append([p.grad.clone() for p in owner.parameters()])
            owner.zero_grad()
        torch.testing.assert_close(got[1], got[0], rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("gemm_on")
@pytest.mark.parametrize("changed", ["x", "w"])
def test_a_product_keeps_each_operand_only_for_the_other_s_gradient(changed):
    # x needs a gradient, w does not: eager keeps w (x's change is fine), and a change of w raises
    def make(n):
        torch.manual_seed(n)
        leaf = torch.randn(n, 64, requires_grad=True)
        return (leaf * 1, torch.randn(64, 64)), [leaf]

    def change(a, outs):
        a[0 if changed == "x" else 1].add_(1)
    f = torch.mm
    cf = ds.compile(f, dynamic=True, backend="fused")
    for n in (64, 96):
        want = _outcome(f, *make(n), change)
        got = _outcome(cf, *make(n), change)
        if isinstance(want, type):
            assert got is want
        else:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert (changed == "w") == isinstance(want, type)
