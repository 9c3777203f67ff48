"""A module changed after compiling, by any route, is seen by the guards: the compiled call still
gives eager's result. The module checks run when a dict of a module was written since they last
passed (guards/native.py), and on every call without the extension: both ways are tested.
Oracle: the compiled module against the same module run eagerly, after each change."""
import collections

import pytest
import torch
from torch import nn

import dynashape as ds
from dynashape.guards import native


@pytest.fixture(params=["watched", "every call"])
def watching(request, monkeypatch):
    if request.param == "watched":
        if native.extension() is None:
            pytest.skip(f"no guard extension here: {native.why_not()}")
    else:
        monkeypatch.setattr(native, "_state", {"error": "turned off by the test"})
    ds.reset()
    yield request.param


def _same(cm, model, *args):
    with torch.no_grad():
        torch.testing.assert_close(cm(*args), model(*args))


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))


def _compiled(model, *shape):
    """(model, its compiled module, an input) after a first call that compiled it."""
    cm = ds.compile(model, dynamic=True)
    x = torch.randn(*shape)
    _same(cm, model, x)
    return model, cm, x


def test_a_parameter_whose_requires_grad_is_flipped_recompiles_and_trains_like_eager(watching):
    model = _mlp()
    cm = ds.compile(model, dynamic=True)
    x = torch.randn(3, 4)
    cm(x).sum().backward()
    model[0].weight.requires_grad_(False)
    model.zero_grad()
    cm(x).sum().backward()
    got = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(got, model.parameters()):
        assert (g is None) == (p.grad is None)
        if g is not None:
            torch.testing.assert_close(g, p.grad)
    assert cm.stats.compiles == 2 and "requires_grad" in " ".join(cm.stats.recompile_reasons)


def test_a_parameter_replaced_through_setattr_is_used(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    model[2].weight = nn.Parameter(torch.randn(4, 4))
    _same(cm, model, x)


def test_a_parameter_replaced_in_its_dict_without_setattr_is_used(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    model[2]._parameters["weight"] = nn.Parameter(torch.randn(4, 4))  # as torch.func.functional_call does
    _same(cm, model, x)
    assert cm.stats.compiles == 2


def test_functional_call_on_a_compiled_module_uses_the_given_parameters(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    params = {k: torch.randn_like(v) for k, v in model.named_parameters()}
    with torch.no_grad():
        want = torch.func.functional_call(model, params, (x,))
        got = torch.func.functional_call(cm, {f"_orig_mod.{k}": v for k, v in params.items()}, (x,))
    torch.testing.assert_close(got, want)
    _same(cm, model, x)  # and the module's own parameters again after


class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.tensor(0))

    def forward(self, x):
        self.n.add_(1)
        return x * 2


def test_a_one_element_buffer_replaced_by_an_equal_one_is_the_one_updated(watching):
    # the replacement equals the old buffer: a check by == would take one for the other
    m = Counts()
    cm = ds.compile(m, dynamic=True)
    x = torch.randn(3)
    with torch.no_grad():
        cm(x)
        old = m.n
        new = torch.tensor(int(old))
        m._buffers["n"] = new
        cm(x)
    assert int(new) == 2 and int(old) == 1


def test_a_layer_appended_to_a_sequential_runs(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    model.append(nn.Linear(4, 2))  # Module.add_module writes _modules directly
    _same(cm, model, x)
    assert cm(x).shape == (3, 2)


def test_a_submodule_replaced_in_its_dict_runs(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    model._modules["1"] = nn.Tanh()
    _same(cm, model, x)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2.0
        self.kernel = (1, 2)

    def forward(self, x):
        return self.lin(x) * self.scale + self.kernel[1]


@pytest.mark.parametrize("how", ["setattr", "object.__setattr__", "__dict__", "vars().update", "a new __dict__"])
def test_a_module_attribute_changed_by_any_route_is_seen(watching, how):
    m, cm, x = _compiled(Scaled(), 3, 4)
    write = {"setattr": lambda k, v: setattr(m, k, v),
             "object.__setattr__": lambda k, v: object.__setattr__(m, k, v),
             "__dict__": lambda k, v: m.__dict__.__setitem__(k, v),
             "vars().update": lambda k, v: vars(m).update({k: v}),
             # the watched dict is no longer the module's: nothing was written to it
             "a new __dict__": lambda k, v: object.__setattr__(m, "__dict__", dict(vars(m), **{k: v}))}[how]
    write("scale", 3.0)
    _same(cm, m, x)
    write("kernel", (1, 5))
    _same(cm, m, x)
    write("scale", 3)  # an int now: equal values of another type are another program
    _same(cm, m, x)
    assert type(cm(x)) is torch.Tensor and cm.stats.compiles >= 3


def test_the_training_flag_flipped_is_seen(watching):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    cm = ds.compile(model, dynamic=True)
    x = torch.randn(8, 4)
    with torch.no_grad():
        cm(x)
        model.eval()
        _same(cm, model, x)
        model[1].__dict__["training"] = True  # without Module.train()
        torch.manual_seed(1)
        got = cm(x)
        torch.manual_seed(1)
        torch.testing.assert_close(got, model(x))


class Optional(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        bias = getattr(self, "extra", None)
        y = self.lin(x)
        return y if bias is None else y + bias


def test_a_buffer_registered_after_compiling_is_seen(watching):
    m, cm, x = _compiled(Optional(), 3, 4)
    m.register_buffer("extra", torch.ones(4))  # writes _buffers directly
    _same(cm, m, x)


class Shift(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.full((64,), 0.1))

    def forward(self, x):
        return torch.tanh(x * self.shift + 1.0).exp() * 2


def test_a_buffer_whose_dtype_changes_in_place_is_seen(watching):
    m, cm, x = _compiled(Shift(), 8, 64)
    m.shift.data = m.shift.data.double() + 1e-3  # the same object, now float64 (as module.double() does)
    _same(cm, m, x)
    assert cm(x).dtype == torch.float64


def test_a_parameter_whose_shape_changes_in_place_is_seen(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    with torch.no_grad():
        model[2].weight.data = torch.randn(2, 4)
        model[2].bias.data = torch.randn(2)
    _same(cm, model, x)


def test_hooks_registered_on_a_submodule_run_and_stop_when_removed(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    handle = model[1].register_forward_hook(lambda mod, inp, out: out * 3)
    _same(cm, model, x)
    handle.remove()
    _same(cm, model, x)


def test_a_hook_written_into_a_hook_dict_without_a_handle_runs(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    model[1]._forward_hooks[12345] = lambda mod, inp, out: out - 1
    _same(cm, model, x)


def test_hooks_reordered_in_place_run_in_their_new_order(watching):
    model = _mlp()
    model[1].register_forward_hook(lambda mod, inp, out: out * 2)
    model[1].register_forward_hook(lambda mod, inp, out: out + 1)
    cm = ds.compile(model, dynamic=True)
    x = torch.randn(3, 4)
    _same(cm, model, x)
    first = next(iter(model[1]._forward_hooks))
    model[1]._forward_hooks.move_to_end(first)  # (x * 2) + 1 becomes (x + 1) * 2: no dict write
    _same(cm, model, x)


def test_hooks_on_the_compiled_module_itself_run_once_registered(watching):
    model, cm, x = _compiled(_mlp(), 3, 4)
    seen = []
    handle = model.register_forward_hook(lambda mod, inp, out: seen.append(1))
    with torch.no_grad():
        cm(x)
    assert seen == [1]
    handle.remove()
    with torch.no_grad():
        cm(x)
    assert seen == [1]


def test_a_watch_answers_changed_until_committed_and_after_any_write():
    if native.extension() is None:
        pytest.skip(f"no guard extension here: {native.why_not()}")
    d, od = {"a": 1}, collections.OrderedDict(b=2)
    w = native.watch([d, od])
    assert not w()
    w.commit(w.snap())
    assert w()
    d["a"] = 1  # the same object again: no write
    assert w()
    od["c"] = 3
    assert not w()
    snap = w.snap()
    d["a"] = 2  # written after the snapshot the checks would have read: committing it is still stale
    w.commit(snap)
    assert not w()


@pytest.mark.parametrize("getters", ["looked up", "called directly"])
def test_same_answers_false_once_a_tensor_changes_in_place(getters):
    if native.extension() is None:
        pytest.skip(f"no guard extension here: {native.why_not()}")
    names = ("requires_grad", "shape", "dtype", "is_cpu", "device")
    g = tuple(getattr(torch._C.TensorBase, k) for k in names) if getters == "called directly" else None
    p = nn.Parameter(torch.randn(2, 3))
    s = native.same([p], [(True, (2, 3), torch.float32, True)], g)
    assert s()
    p.requires_grad_(False)
    assert not s()
    p.requires_grad_(True)
    p.data = p.data.double()
    assert not s()
    p.data = torch.randn(3, 2)
    assert not s()
    p.data = torch.randn(2, 3)
    assert s()
    meta = native.same([p], [(True, (2, 3), torch.float32, torch.device("meta"))], g)
    assert not meta()
    torch.utils.swap_tensors(p, nn.Parameter(torch.empty(2, 3, device="meta")))  # same object, on meta now
    assert meta() and not s()


def test_a_replaced_module_dict_is_named_in_the_recompile_reason(watching):
    m, cm, x = _compiled(Scaled(), 3, 4)
    object.__setattr__(m, "__dict__", dict(vars(m)))  # equal contents, another dict
    _same(cm, m, x)
    assert any("__dict__ is not the dict it was when traced" in r for r in cm.stats.recompile_reasons), \
        cm.stats.recompile_reasons
