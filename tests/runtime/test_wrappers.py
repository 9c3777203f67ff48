"""Module hooks run as nn.Module.__call__ runs them, around the compiled forward (runtime/wrappers.py).

Each case trains two copies of a small model two steps, one eager and one compiled, with the same
hook: losses, every parameter's and the input's gradient, and what the hook recorded must agree.
Multi-process DDP/FSDP is in tests/distributed/.
"""
import pytest
import torch

import dynashape as ds
from dynashape.runtime import wrappers


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


HOOKS = {  # name -> register(model, log)
    "forward pre hook on the model": lambda m, log: m.register_forward_pre_hook(lambda mod, a: (a[0] * 2,)),
    "forward hook on the model": lambda m, log: m.register_forward_hook(lambda mod, a, o: o + 1),
    "forward hook with kwargs": lambda m, log: m.register_forward_hook(lambda mod, a, k, o: o * 3, with_kwargs=True),
    "pre hook with kwargs": lambda m, log: m.register_forward_pre_hook(
        lambda mod, a, k: ((a[0] + 1,), k), with_kwargs=True),
    "forward hook that logs": lambda m, log: m.register_forward_hook(lambda mod, a, o: log.append(o.shape[0])),
    "full backward hook on the model": lambda m, log: m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,)),
    "backward pre hook on the model": lambda m, log: m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 5,)),
    "submodule forward hook that logs": lambda m, log: m[1].register_forward_hook(lambda mod, a, o: log.append(1)),
    "submodule pre hook": lambda m, log: m[1].register_forward_pre_hook(lambda mod, a: (a[0] * 2,)),
    "submodule backward hook": lambda m, log: m[2].register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,)),
    "global forward hook": lambda m, log: torch.nn.modules.module.register_module_forward_hook(
        lambda mod, a, o: o * 2 if isinstance(mod, torch.nn.Tanh) else None),
    "global forward pre hook on every module": lambda m, log: torch.nn.modules.module.register_module_forward_pre_hook(
        lambda mod, a: log.append(type(mod).__name__)),
}


def _train(model, f, x, steps=3):
    losses = []
    for i in range(steps):
        loss = f(x[: 3 + i % 2]).sum()
        loss.backward()
        losses.append(loss.detach())
    return losses, [p.grad.clone() for p in model.parameters()], x.grad.clone()


@pytest.mark.parametrize("name", list(HOOKS))
def test_hooks_run_around_the_compiled_forward_as_in_eager(name):
    results = []
    for compiled in (False, True):
        m, log = _model(), []
        handle = HOOKS[name](m, log)
        try:
            x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
            f = ds.compile(m) if compiled else m
            results.append(_train(m, f, x) + (list(log),))
        finally:
            handle.remove()
    (l0, g0, x0, log0), (l1, g1, x1, log1) = results
    torch.testing.assert_close(l1, l0)
    torch.testing.assert_close(g1, g0)
    torch.testing.assert_close(x1, x0)
    assert log1 == log0


def test_a_hook_registered_or_removed_after_the_compile_recompiles():
    m = _model()
    f = ds.compile(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(f(x), m(x))
    h = m[1].register_forward_hook(lambda mod, a, o: o * 100)
    torch.testing.assert_close(f(x), m(x))
    assert "hook" in f.stats.recompile_reasons[-1]
    h.remove()
    torch.testing.assert_close(f(x), m(x))
    assert f.stats.compiles == 2  # the hook-free entry again


def test_hooks_registered_on_the_compiled_module_itself_run():
    # as fully_shard(ds.compile(layer)) registers FSDP's hooks on the compiled module
    m = _model()
    cm = ds.compile(m)
    calls = []
    cm.register_forward_pre_hook(lambda mod, a: calls.append("pre"))
    cm.register_forward_hook(lambda mod, a, o: o * 0 + 7)
    out = cm(torch.randn(2, 4))
    assert calls == ["pre"] and bool((out == 7).all())


def test_the_fast_path_has_no_hooks_to_run():
    m = _model()
    assert not wrappers.has_hooks(m)
    h = m.register_forward_hook(lambda *a: None)
    assert wrappers.has_hooks(m)
    h.remove()
    assert not wrappers.has_hooks(m)


def test_the_forward_swap_restores_an_instance_forward():
    m = _model()
    mine = m.forward
    m.forward = mine  # an instance attribute the user set
    with wrappers.ForwardSwap(m, lambda x: x):
        assert m(torch.ones(1)).item() == 1.0
    assert m.forward is mine
    del m.forward
    with wrappers.ForwardSwap(m, lambda x: x):
        pass
    assert "forward" not in m.__dict__


def _ckpt(reentrant):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    impl = CheckpointImpl.REENTRANT if reentrant else CheckpointImpl.NO_REENTRANT
    return lambda lin: checkpoint_wrapper(lin, checkpoint_impl=impl)


WRAPPED = {  # wrappers whose forward does more than tensor ops (hooks, recomputation, buffers)
    "checkpoint_wrapper": _ckpt(False),
    "checkpoint_wrapper (reentrant: a graph break)": _ckpt(True),
    "spectral_norm (a pre hook updating buffers)": torch.nn.utils.spectral_norm,
    "parametrizations.spectral_norm": torch.nn.utils.parametrizations.spectral_norm,
    "parametrizations.weight_norm": torch.nn.utils.parametrizations.weight_norm,
}


@pytest.mark.parametrize("name", list(WRAPPED))
def test_wrapped_layers_train_as_in_eager(name):
    runs = []
    for compiled in (False, True):
        torch.manual_seed(0)
        m = torch.nn.Sequential(WRAPPED[name](torch.nn.Linear(8, 8)), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        f = ds.compile(m) if compiled else m
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for i in range(4):
            x = torch.randn(3 + i % 2, 8, generator=torch.Generator().manual_seed(i))
            loss = f(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        runs.append((losses, [t.detach().clone() for t in list(m.parameters()) + list(m.buffers())]))
    torch.testing.assert_close(runs[1], runs[0], rtol=0, atol=0)
