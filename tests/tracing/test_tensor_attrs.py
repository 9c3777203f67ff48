"""Every attribute of torch.Tensor that traced code can read is classified, and each class's
answers are eager's: over producers (leaf and non-leaf inputs, views, out-of-place and in-place
results, data-dependent results, detach, no_grad / enable_grad / inference_mode blocks), the
compiled function returns what eager returns, answered while tracing (no graph break) for the
classes that answer, and a graph break naming the attribute for the class that cannot."""
import pytest
import torch

import dynashape as ds
from dynashape.tracing.tensor_attrs import CLASSES, classify


def test_every_attribute_of_torch_tensor_is_classified():
    # a new PyTorch attribute fails here until it has a class (and, if it answers, a reader below)
    missing = [n for n in dir(torch.Tensor) if classify(n) is None]
    assert not missing, f"unclassified torch.Tensor attributes: {missing}"


def _prop(name):
    return lambda t: getattr(t, name)


def _call(name, *args, **kwargs):
    return lambda t: getattr(t, name)(*args, **kwargs)


def _grad_fn(t):
    return None if t.grad_fn is None else type(t.grad_fn).__name__


def _base(t):
    b = t._base
    return None if b is None else ("base", tuple(b.shape), b.requires_grad)


# how each answering attribute is read (attributes of a class that answers need one)
READERS = {
    "shape": _prop("shape"), "ndim": _prop("ndim"), "nbytes": _prop("nbytes"), "size": _call("size"),
    "dim": _call("dim"), "ndimension": _call("ndimension"), "numel": _call("numel"), "nelement": _call("nelement"),
    "__len__": len, "is_same_size": lambda t: t.is_same_size(t),
    "is_leaf": _prop("is_leaf"), "grad_fn": _grad_fn, "requires_grad": _prop("requires_grad"),
    "output_nr": _prop("output_nr"), "retains_grad": _prop("retains_grad"), "_is_view": _call("_is_view"),
    "_base": _base, "_version": _prop("_version"),
    "is_inference": _call("is_inference"), "is_conj": _call("is_conj"), "is_neg": _call("is_neg"),
    "is_pinned": _call("is_pinned"), "is_shared": _call("is_shared"), "grad_dtype": _prop("grad_dtype"),
    "name": _prop("name"),
    "stride": _call("stride"), "is_contiguous": _call("is_contiguous"),
    "storage_offset": _call("storage_offset"), "dim_order": _call("dim_order"),
    "get_device": _call("get_device"), "type": _call("type"), "element_size": _call("element_size"),
    "is_floating_point": _call("is_floating_point"), "is_complex": _call("is_complex"),
    "is_signed": _call("is_signed"), "dense_dim": _call("dense_dim"), "sparse_dim": _call("sparse_dim"),
    "_dimI": _call("_dimI"), "_dimV": _call("_dimV"), "_nnz": _call("_nnz"), "is_coalesced": _call("is_coalesced"),
    "is_distributed": _call("is_distributed"), "_is_zerotensor": _call("_is_zerotensor"),
    "q_per_channel_axis": _call("q_per_channel_axis"), "q_scale": _call("q_scale"),
    "q_zero_point": _call("q_zero_point"), "qscheme": _call("qscheme"),
}
for _n in ("dtype layout device is_cpu is_cuda is_ipu is_maia is_meta is_mps is_mtia is_xla is_xpu is_vulkan "
           "is_mkldnn is_nested is_quantized is_sparse is_sparse_csr itemsize volatile _has_symbolic_sizes_strides "
           "_python_dispatch __array_priority__").split():
    READERS[_n] = _prop(_n)

ANSWERED = ("shape", "static", "history", "input", "layout")


def test_every_answering_attribute_has_a_reader():
    need = [n for n, c in CLASSES.items() if c in ANSWERED and hasattr(torch.Tensor, n)]
    assert [n for n in need if n not in READERS] == []


def _inplace(x):
    h = x * 2
    h.add_(1)
    return h


def _no_grad(x):
    with torch.no_grad():
        return x * 2


def _enable_grad(x):  # the function is called under no_grad for this one
    with torch.enable_grad():
        return x * 2


def _inference(x):
    with torch.inference_mode():
        return x * 2


def _view_inplace(x):
    h = x * 1
    v = h[:, :2]
    v.mul_(2)
    return h


PRODUCERS = {
    "leaf input": lambda x: x, "view": lambda x: x[1:], "transpose": lambda x: x.t(),
    "out-of-place": lambda x: x * 2, "in-place": _inplace, "in-place on a view": _view_inplace,
    "data-dependent": lambda x: x[x > 0], "detach": lambda x: x.detach(), "no_grad": _no_grad,
    "enable_grad": _enable_grad, "inference_mode": _inference, "reshape": lambda x: x.reshape(-1),
    "contiguous": lambda x: x.contiguous(), "split": lambda x: x.split(1)[1],
}
ARGS = {  # what the function is called with: (make the input from a leaf, run under)
    "leaf": (lambda t: t, None),
    "non-leaf": (lambda t: t * 1, None),
    "no_grad": (lambda t: t, torch.no_grad),
}


def _normal(v):
    if isinstance(v, torch.Tensor):
        return ("T", tuple(v.shape), v.dtype, v.requires_grad)
    if isinstance(v, (list, tuple)):
        return type(v)(_normal(x) for x in v)
    return v


def _run(fn, arg, under):
    try:
        with (under() if under is not None else torch.enable_grad()):
            return ("ok", _normal(fn(arg)))
    except Exception as e:  # noqa: BLE001  (both raise: the same type)
        return ("raise", type(e).__name__)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls", ANSWERED)
def test_answered_attributes_match_eager_over_every_producer(cls):
    names = [n for n, c in CLASSES.items() if c == cls and n in READERS]
    bad = []
    for name in names:
        read = READERS[name]
        for pname, produce in PRODUCERS.items():
            for aname, (make, under) in ARGS.items():
                if pname == "enable_grad" and aname != "no_grad":
                    continue

                def f(x, produce=produce, read=read):
                    return read(produce(x))
                cf = ds.compile(f)
                for n in (5, 7):  # a second size: the answer must hold for what the guards accept
                    x = make(torch.randn(n, 4).requires_grad_())
                    want, got = _run(f, x, under), _run(cf, x, under)
                    if want != got:
                        bad.append(f"{name} of {pname} ({aname} input, n={n}): compiled {got}, eager {want}")
                breaks = [b for b in cf.stats.graph_breaks if name not in b and "_base" not in b and
                          "_version" not in b and "item" not in b]
                if breaks and cls != "layout":
                    bad.append(f"{name} of {pname} ({aname} input): graph break {breaks}")
    assert not bad, "\n".join(bad[:40])


BREAK_READERS = {
    "grad": _prop("grad"), "_grad": _prop("_grad"), "_backward_hooks": _prop("_backward_hooks"),
    "_post_accumulate_grad_hooks": _prop("_post_accumulate_grad_hooks"), "_cdata": _prop("_cdata"),
    "data_ptr": _call("data_ptr"), "untyped_storage": _call("untyped_storage"), "storage_type": _call("storage_type"),
    "is_set_to": lambda t: t.is_set_to(t), "__dlpack_device__": _call("__dlpack_device__"),
    "register_hook": lambda t: t.register_hook(lambda g: g), "_use_count": _call("_use_count"),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name", sorted(BREAK_READERS))
def test_attributes_that_cannot_be_answered_are_a_graph_break_naming_them(name):
    assert classify(name) == "break"
    read = BREAK_READERS[name]

    def f(x):
        h = x * 2
        read(h)
        return read(x) is not None, h

    cf = ds.compile(f)
    x = torch.randn(3, requires_grad=True)
    assert _run(cf, x, None) == _run(f, x, None)
    key = name.strip("_").split("_")[0]
    assert cf.stats.graph_breaks and any(key in b for b in cf.stats.graph_breaks), cf.stats.graph_breaks


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last, torch.preserve_format])
def test_is_contiguous_with_a_memory_format_matches_eager(fmt):
    def f(x):
        h = x * 2
        return x.is_contiguous(memory_format=fmt), h.is_contiguous(memory_format=fmt), \
            x.permute(0, 2, 3, 1).is_contiguous(memory_format=fmt)

    cf = ds.compile(f)
    for x in (torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
              torch.randn(3, 3, 5, 6)):
        assert _run(cf, x, None) == _run(f, x, None)


# ---- assignments (`t.grad = g`, `t.data = d`, `t.requires_grad = b`): what the tracing mode sees as `__set__`

def test_requires_grad_assigned_is_requires_grad_():
    """`y.requires_grad = True` set the flag of the trace's stand-in only: the compiled result had no
    grad_fn where eager's has one, and the caller's input kept requires_grad=False."""
    def on_an_intermediate(x):
        y = x * 2
        y.requires_grad = True
        return (y * 3).sum()

    def on_the_input(x):
        x.requires_grad = True
        return x * 2
    for fn in (on_an_intermediate, on_the_input):
        cf = ds.compile(fn)
        for n in (3, 4):
            a, b = torch.ones(n), torch.ones(n)
            want, got = fn(a), cf(b)
            torch.testing.assert_close(got, want)
            assert got.requires_grad == want.requires_grad and (got.grad_fn is None) == (want.grad_fn is None)
            assert a.requires_grad == b.requires_grad
        assert not cf.stats.graph_breaks


def test_grad_and_data_assigned_run_eagerly_with_the_reason():
    """`x.grad = g` and `self.w.data = ...` were dropped: the caller's tensor was left unchanged."""
    def set_grad(x):
        x.grad = torch.ones_like(x)
        return x * 2

    class SetData(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            self.w.data = self.w.data * 2
            return x * self.w
    cf = ds.compile(set_grad)
    for n in (3, 5):
        a, b = torch.ones(n, requires_grad=True), torch.ones(n, requires_grad=True)
        set_grad(a)
        cf(b)
        torch.testing.assert_close(b.grad, a.grad)
    assert "Tensor.grad = ..." in cf.stats.graph_breaks[0]
    me, mc = SetData(), SetData()
    cm = ds.compile(mc)
    for _ in range(3):
        x = torch.ones(2, 3)
        torch.testing.assert_close(cm(x), me(x))
        torch.testing.assert_close(mc.w, me.w)
