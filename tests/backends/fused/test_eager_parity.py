"""Calls the fused kernels cannot run as eager does stay torch calls: dtypes eager's kernels refuse
(their error comes out), torch.maximum/minimum/amax/amin, whose choice between +0.0 and -0.0 eager
makes by position, and tensors with no storage (vmap's, torch.func's), which no kernel can read."""
import importlib.util

import pytest
import torch
import torch.nn.functional as F

import dynashape as ds
from .oracle import check_fused, outcome as _outcome

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _same(got, want):
    """Values, dtypes, NaNs and the sign of each zero, or the same exception type."""
    if isinstance(want, type) or isinstance(got, type):
        assert got == want, (got, want)
        return
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-5, atol=1e-6)
        if w.is_floating_point():
            zero = w == 0
            assert torch.equal(torch.signbit(g[zero]), torch.signbit(w[zero])), (g, w)


# ---------------------------------------------------------------- 1. dtypes eager's kernels refuse
FLOAT_ONLY = {
    "var": lambda x: (x * 3 + 1).var(-1),
    "std": lambda x: (x * 3 + 1).std(-1, keepdim=True),
    "mean": lambda x: (x * 1).mean(-1),
    "softmax": lambda x: (x * 3 + 1).softmax(-1),
    "log_softmax": lambda x: F.log_softmax(x * 3 + 1, -1),
    "lerp": lambda x: torch.lerp(x * 1, x * 2, 0.5),
    "layer_norm": lambda x: F.layer_norm(x * 1, x.shape[-1:]),
    "rms_norm": lambda x: F.rms_norm(x * 1, x.shape[-1:]),
    "gelu": lambda x: F.gelu(x * 1),
    "silu": lambda x: F.silu(x * 1),
}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("name", sorted(FLOAT_ONLY))
def test_a_float_only_op_of_an_integer_tensor_raises_as_eager(name, dtype):
    fn = FLOAT_ONLY[name]
    for shape in [(5, 4), (1, 4), (3, 1)]:
        x = torch.randint(-3, 4, shape, dtype=dtype)
        ds.reset()
        with ds.config.patch(fused_sync=True):
            _same(_outcome(ds.compile(fn, backend="fused"), x), _outcome(fn, x))


def test_layer_norm_with_parameters_of_another_type_raises_as_eager():
    x = torch.randn(3, 4)
    for w in (torch.randn(4, dtype=torch.float64), torch.ones(4, dtype=torch.int64)):
        fn = lambda x, w: F.layer_norm(x * 2, (4,), w)  # noqa: E731
        ds.reset()
        _same(_outcome(ds.compile(fn, backend="fused"), x, w), _outcome(fn, x, w))
    # a half input with float32 parameters is eager's mixed type: it runs, and is fused
    check_fused(lambda x, w: F.layer_norm(x * 2, (4,), w), [(torch.randn(3, 4).half(), torch.randn(4))])


def test_integer_inputs_eager_promotes_stay_fused():
    # exp/sigmoid/logsumexp of integers, and softmax/mean into a float dtype, run in eager: they fuse
    check_fused(lambda x: ((x * 2).exp() + torch.sigmoid(x * 1), (x * 1).logsumexp(-1),
                           F.softmax(x * 2, -1, dtype=torch.float32)),
                [(torch.randint(-3, 4, s, dtype=torch.int32),) for s in [(5, 4), (1, 4), (2, 1)]])


# ---------------------------------------------------------------- 2. signed zeros
def _zeros(shape):
    x = torch.randn(shape)
    return torch.where(torch.rand(shape) < 0.5, x.abs() * 0, -(x.abs() * 0))


SIGNED_ZERO = {
    "maximum": lambda x, y: (torch.maximum(x, y) * 1, torch.maximum(y, x) + 0),
    "minimum": lambda x, y: (torch.minimum(x, y) * 1, torch.minimum(-x, y) * 1),
    "clamp_by_tensor": lambda x, y: ((x * 1).clamp(min=y), (x * 1).clamp_max(y) * 1, (x * 1).clamp(y, y)),
    "amax_amin": lambda x, y: ((x * 1).amax(-1), (x * 1).amin(-1, keepdim=True) * 1, (x + y).amax(-1)),
    "scalar_clamp_relu": lambda x, y: ((x * 1).clamp(min=0.0), (x * 1).clamp(-0.0, 0.0), torch.relu(x * 1),
                                       F.hardtanh(x * 1, 0.0, 1.0), F.relu6(x * 1), (x * 1).clamp_max(-0.0)),
    "nan": lambda x, y: (torch.maximum(x, y * float("nan")), (x * y).clamp(min=0.0), F.hardsigmoid(x / y),
                         (x / y).amax(-1)),
}
SHAPES = [(3, 4), (1, 1), (0, 4), (2, 70), (5, 17)]


def _check_signed_zeros(name):
    fn = SIGNED_ZERO[name]
    for shape in SHAPES:
        x, y = _zeros(shape), _zeros(shape)
        ds.reset()
        _same(_outcome(ds.compile(fn, backend="fused"), x, y), _outcome(fn, x, y))
        xt, yt = _zeros(shape[::-1]).t(), _zeros(shape[::-1]).t()  # strided: eager's scalar loop
        _same(_outcome(ds.compile(fn, backend="fused"), xt, yt), _outcome(fn, xt, yt))


@pytest.mark.parametrize("name", sorted(SIGNED_ZERO))
def test_signed_zeros_and_nans_of_max_min_ops_match_eager(name):
    _check_signed_zeros(name)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
@pytest.mark.parametrize("name", sorted(SIGNED_ZERO))
def test_signed_zeros_and_nans_of_max_min_ops_match_eager_through_triton(name):
    with ds.config.patch(triton="cpu"):
        _check_signed_zeros(name)


def test_integer_maximum_and_amax_stay_fused():
    check_fused(lambda x, y: (torch.maximum(x * 2, y), (x * 1).amax(-1), (x * 1).clamp(min=y)),
                [(torch.randint(-5, 5, s), torch.randint(-5, 5, s)) for s in [(3, 4), (1, 1), (2, 9)]])


# ---------------------------------------------------------------- 3. tensors with no storage
def _f(x):
    return (x.sin() * x).exp().softmax(-1) * x.sum(-1, keepdim=True)


def _pw(x):
    return (x.sin() * x).exp() * 2


@pytest.mark.parametrize("shape", [(4, 3), (1, 3), (2, 1)])
def test_batched_backward_through_a_fused_region_matches_eager(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, requires_grad=True)
    go = torch.randn(2, *shape)
    cf = ds.compile(_pw, backend="fused")
    assert "FusedRegion" in type(cf(x).grad_fn).__name__  # the kernel's forward, the generated backward
    want = torch.autograd.grad(_pw(x), x, go, is_grads_batched=True)[0]
    got = torch.autograd.grad(cf(x), x, go, is_grads_batched=True)[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.functional.jacobian(cf, x, vectorize=True),
                               torch.autograd.functional.jacobian(_pw, x, vectorize=True))
    g1 = torch.autograd.grad(cf(x), x, go, is_grads_batched=True, create_graph=True)[0]
    g2 = torch.autograd.grad(_pw(x), x, go, is_grads_batched=True, create_graph=True)[0]
    torch.testing.assert_close(torch.autograd.grad(g1.sum(), x)[0], torch.autograd.grad(g2.sum(), x)[0])


@pytest.mark.parametrize("shape", [(4, 3), (1, 3), (0, 3)])
def test_vmap_and_torch_func_transforms_of_a_compiled_function_match_eager(shape):
    x = torch.randn(*shape)
    ct = torch.randn(2, *shape)
    cf = ds.compile(_f, backend="fused")
    for run in (lambda g: torch.func.vmap(g)(x), lambda g: torch.func.vmap(g, in_dims=1, out_dims=1)(x),
                lambda g: torch.func.grad(lambda v: g(v).sum())(x), lambda g: torch.func.jacrev(g)(x),
                lambda g: torch.func.vmap(lambda v: torch.func.vjp(g, x)[1](v))(ct)):
        torch.testing.assert_close(run(cf), run(_f))
