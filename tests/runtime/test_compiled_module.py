"""A compiled module runs what `m(...)` would call now: a forward set on the instance, a class swap, a
class patched after compiling; and the wrapper's attributes are the module's (as torch.compile's)."""
import functools
import pickle
import types

import pytest
import torch

import dynashape as ds


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.l(x).relu() * self.scale


class M2(M):
    def forward(self, x):
        return self.l(x).sigmoid()


class Act(torch.nn.Module):
    def forward(self, x):
        return x.relu()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = Act()

    def forward(self, x):
        return self.act(x) * 2


BACKENDS = ["eager", "fused"]


def _same(cm, m, x):
    torch.testing.assert_close(cm(x), m(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forward_set_on_the_instance_before_or_after_compiling_is_what_runs(backend):
    x = torch.randn(2, 3)
    m = M()
    m.forward = types.MethodType(lambda self, x: self.l(x) * 10, m)
    _same(ds.compile(m, backend=backend), m, x)
    m = M()
    cm = ds.compile(m, backend=backend)
    _same(cm, m, x)
    m.forward = types.MethodType(lambda self, x: self.l(x) * 10, m)  # after the first call
    _same(cm, m, x)
    m.forward = functools.partial(lambda mod, x: mod.l(x) - 1, m)  # as accelerate's hooks wrap a forward
    _same(cm, m, x)
    m.forward = lambda x: x * 3  # a plain function: called without the module
    _same(cm, m, x)
    del m.forward
    _same(cm, m, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_class_swap_or_a_patched_class_forward_is_what_runs(backend):
    x = torch.randn(2, 3)
    m = M()
    cm = ds.compile(m, backend=backend)
    _same(cm, m, x)
    m.__class__ = M2
    _same(cm, m, x)
    m.__class__ = M
    _same(cm, m, x)

    class M3(M):
        def forward(self, x):
            return self.l(x) + 1
    m3 = M3()
    cm3 = ds.compile(m3, backend=backend)
    _same(cm3, m3, x)
    M3.forward = lambda self, x: self.l(x) - 5
    _same(cm3, m3, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_submodule_s_class_swapped_or_patched_after_compiling_is_traced_again(backend):
    x = torch.randn(2, 3)

    class A(Act):
        def forward(self, x):
            return x.relu()
    net = Net()
    net.act = A()
    cn = ds.compile(net, backend=backend)
    _same(cn, net, x)
    A.forward = lambda self, x: x.tanh()  # the submodule's class patched: a class dict write
    _same(cn, net, x)
    net.act.__class__ = Act  # swapped in place: no dict of the module is written
    _same(cn, net, x)
    f = ds.compile(lambda mod, x: mod(x) * 2, backend=backend)  # a function given the module
    torch.testing.assert_close(f(net, x), net(x) * 2)
    Act.forward = lambda self, x: x.sigmoid()
    try:
        torch.testing.assert_close(f(net, x), net(x) * 2)
        _same(cn, net, x)
    finally:
        Act.forward = lambda self, x: x.relu()


def test_the_wrapper_s_attributes_are_the_module_s():
    m = M().eval()
    cm = ds.compile(m)
    assert cm.training is False  # torch.compile's wrapper says the module's mode
    x = torch.randn(2, 3)
    cm(x)
    cm.scale = 5.0  # torch.compile's wrapper sets the module's
    assert m.scale == 5.0
    _same(cm, m, x)
    cm.l = torch.nn.Linear(3, 3)
    assert m.l is cm.l
    _same(cm, m, x)
    cm.train()
    assert m.training and cm.training
    del cm.scale
    assert not hasattr(m, "scale")


def test_a_module_whose_forward_was_compiled_in_place_pickles():
    m = M()
    m.forward = ds.compile(m.forward)
    x = torch.randn(2, 3)
    m(x)
    m2 = pickle.loads(pickle.dumps(m))
    torch.testing.assert_close(m2(x), m2.l(x).relu() * 2.0)
    assert m2.forward._module is m2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_library_module_class_s_forward_patched_after_compiling_runs(backend):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.l(x).relu()
    m = Net()
    cm = ds.compile(m, backend=backend)
    x = torch.randn(2, 3)
    _same(cm, m, x)
    orig = torch.nn.Linear.forward
    torch.nn.Linear.forward = lambda self, x: torch.nn.functional.linear(x, self.weight) * 2  # as attention
    try:  # kernels are patched in by some training libraries
        _same(cm, m, x)
    finally:
        torch.nn.Linear.forward = orig
    _same(cm, m, x)
    assert cm.stats.compiles == 2  # the first entry serves the restored class again


def test_the_wrapper_s_mode_follows_the_module_s():
    m = M()
    cm = ds.compile(m)
    m.eval()  # on the original, after compiling
    assert cm.training is False
    m.train()
    assert cm.training is True


def test_a_class_forward_patched_past_the_recompile_limit_runs_eagerly_as_patched():
    class N(torch.nn.Module):
        def forward(self, x):
            return x * 2
    n = N()
    with ds.config.patch(recompile_limit=1, automatic_dynamic_shapes=False):
        cn = ds.compile(n, dynamic=False)
        for k in (2, 3, 4):  # past the limit: eager
            torch.testing.assert_close(cn(torch.ones(k)), n(torch.ones(k)))
        N.forward = lambda self, x: x * 5
        torch.testing.assert_close(cn(torch.ones(4)), n(torch.ones(4)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_module_class_with_its_own_call_runs_it(backend):
    class C(torch.nn.Module):
        def forward(self, x):
            return x * 2

        def __call__(self, x):  # what eager's c(x) runs
            return super().__call__(x) + 100
    c = C()
    cc = ds.compile(c, backend=backend)
    x = torch.ones(3)
    _same(cc, c, x)
    c.register_forward_hook(lambda mod, args, out: out * 3)
    _same(cc, c, x)
    torch.testing.assert_close(cc(torch.ones(5)), c(torch.ones(5)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_method_or_property_whose_code_is_replaced_in_place_runs_the_new_code(backend):
    class K(torch.nn.Module):  # IPython's autoreload updates a class's functions' __code__ in place
        def forward(self, x):
            return self.act(x) * self.k

        def act(self, x):
            return x.relu()

        @property
        def k(self):
            return 2.0
    m = K()
    cm = ds.compile(m, backend=backend)
    x = torch.randn(3)
    _same(cm, m, x)
    K.act.__code__ = (lambda self, x: x.sigmoid()).__code__
    _same(cm, m, x)
    K.k.fget.__code__ = (lambda self: 5.0).__code__
    _same(cm, m, x)
