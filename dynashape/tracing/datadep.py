"""Ops whose output size or value depends on data: they produce unbacked symbols.

`nonzero`, `masked_select`, `x[mask]`, `unique`, `repeat_interleave` with a
tensor of repeats, `bincount`, `item()` and `tolist()` are recorded in the
graph like any op; their data-dependent sizes become unbacked symbols with
the tightest bounds known (`nonzero` of a 5x5 input: `u0` in [0, 25]), bound
at run time by the generated code (`u0 = nonzero.size(0)`).
"""
from __future__ import annotations

import torch

from ..symbolic.ranges import int_oo
from ..symbolic.symtypes import SymBase
from ..symbolic.userloc import user_location
from .errors import GraphBreak
from .fake import FakeTensor
from .meta.common import broadcast, norm_dim, prod
from .symint import meta_value
from .tree import leaves

T = torch.Tensor
NOT_MINE = object()  # a handler's answer when the call is not data-dependent after all


def _bind(names, args, kwargs) -> dict:
    """Arguments by name: positional ones in `names` order, then the keywords."""
    return {**dict(zip(names, args)), **kwargs}


def _upper(tr, n) -> int | None:
    """The largest value `n` (an int or SymInt) can take, when finite."""
    if n is None:
        return None
    if not isinstance(n, SymBase):
        return int(n)
    hi = tr.env.bound(n.node.expr).hi
    return None if hi == int_oo else int(hi)


def _lower(tr, n) -> int:
    """The smallest value `n` (an int or SymInt) can take, or 0 when unbounded below."""
    if not isinstance(n, SymBase):
        return int(n)
    lo = tr.env.bound(n.node.expr).lo
    return 0 if lo == -int_oo else int(lo)


def _name(t) -> str:
    node = getattr(t, "ds_node", None)
    if node is not None and node.kind == "input":
        return node.target.pretty()
    return node.name if node is not None else "tensor"


def _meta(shape_syms, dtype):
    return torch.empty([meta_value(s) for s in shape_syms], dtype=dtype, device="meta")


def _size_op(tr, func, args, kwargs, *, numel, desc, build):
    """Common path: one unbacked size `u` in [0, numel]; `build(u)` -> (meta outs, shapes)."""
    if not tr.capture_dynamic_output_shape_ops:
        raise GraphBreak(f"{desc} has a data-dependent size (config.capture_dynamic_output_shape_ops "
                         f"is False)", user_location())
    u = tr.new_unbacked(size_like=True, lo=0, hi=_upper(tr, numel), description=desc)
    out, shapes = build(u)
    out = with_history(func, args, kwargs, out)
    device = next((a.ds_device for a in args if isinstance(a, FakeTensor)), torch.device("cpu"))
    res = tr._record(func, args, kwargs, out, shapes, device)
    first = res[0] if isinstance(res, (tuple, list)) else res
    for dim, s in enumerate(shapes[0]):
        if s is u:
            tr.bind_unbacked(u, first.ds_node, "size", dim)
            break
    return res


def with_history(func, args, kwargs, out):
    """Data-dependent results as eager makes them: requiring grad where eager's do, with a grad_fn
    (its name from running the op on empty tensors), a view where eager's is one. The meta outputs
    were made from sizes alone (no meta kernel runs these ops)."""
    grads = [a for a in leaves((args, kwargs)) if isinstance(a, FakeTensor) and a.requires_grad]
    metas = [out] if isinstance(out, torch.Tensor) else list(out)
    states = _eager_states(func, args, kwargs, len(metas))
    fixed = []
    for m, (rg, name, view) in zip(metas, states):
        if view:  # torch.where(cond)'s tensors are views of one result
            m = torch.empty_like(m).view(m.shape)
        if rg and grads and torch.is_grad_enabled() and (m.dtype.is_floating_point or m.dtype.is_complex):
            with torch.enable_grad():
                m.copy_(grads[0].sum())  # a history of its own (not a leaf, not a view)
            m.ds_grad_fn = name or ""
        fixed.append(m)
    return fixed[0] if isinstance(out, torch.Tensor) else type(out)(fixed)


def _eager_states(func, args, kwargs, n: int) -> list:
    """[(requires_grad, grad_fn name, is a view)] of the results of `func` run eagerly on empty
    inputs of the same dtypes and requires_grad; failing that, what the usual rule says (a float
    result of a call with an input that requires grad requires grad; its node's name is unknown)."""
    def empty(x):
        if isinstance(x, FakeTensor):
            t = torch.zeros([0] * x.dim(), dtype=x.dtype)
            return t.requires_grad_() if x.requires_grad else t
        return meta_value(x) if isinstance(x, SymBase) else x
    try:
        with torch._C.DisableTorchFunction():
            got = func(*[empty(a) for a in args], **{k: empty(v) for k, v in kwargs.items()})
        outs = [got] if isinstance(got, torch.Tensor) else [t for t in got if isinstance(t, torch.Tensor)]
        if len(outs) == n:
            return [(o.requires_grad, type(o.grad_fn).__name__ if o.grad_fn is not None else None, o._is_view())
                    for o in outs]
    except Exception:  # noqa: BLE001  (empty inputs the op refuses: the rule below)
        pass
    rg = torch.is_grad_enabled() and any(isinstance(a, FakeTensor) and a.requires_grad
                                         for a in leaves((args, kwargs)))
    return [(rg and i == 0, None, False) for i in range(n)]


def nonzero(tr, func, args, kwargs):
    x = args[0]
    as_tuple = kwargs.get("as_tuple", args[1] if len(args) > 1 else False)
    nd = len(x.ds_sizes)

    def build(u):
        if as_tuple:
            return tuple(_meta([u], torch.long) for _ in range(max(nd, 1))), [(u,)] * max(nd, 1)
        return _meta([u, nd], torch.long), [(u, nd)]

    return _size_op(tr, func, args, kwargs, numel=prod(x.ds_sizes), build=build,
                    desc=f"{_name(x)}.nonzero().size(0)")


def where(tr, func, args, kwargs):
    """`torch.where(cond)`, the one-argument form: `cond.nonzero(as_tuple=True)`."""
    if len(args) != 1 or kwargs:
        return NOT_MINE
    x = args[0]
    n = max(len(x.ds_sizes), 1)
    return _size_op(tr, func, args, kwargs, numel=prod(x.ds_sizes), desc=f"torch.where({_name(x)})[0].size(0)",
                    build=lambda u: (tuple(_meta([u], torch.long) for _ in range(n)), [(u,)] * n))


def masked_select(tr, func, args, kwargs):
    x, mask = args[0], kwargs.get("mask", args[1] if len(args) > 1 else None)
    shape = broadcast(x.ds_sizes, mask.ds_sizes)
    return _size_op(tr, func, args, kwargs, numel=prod(shape), desc=f"{_name(x)}.masked_select(...).size(0)",
                    build=lambda u: (_meta([u], x.dtype), [(u,)]))


def _bool_mask(index):
    if isinstance(index, FakeTensor) and index.dtype in (torch.bool, torch.uint8):
        return index
    if isinstance(index, tuple) and len(index) == 1:
        return _bool_mask(index[0])
    return None


def getitem(tr, func, args, kwargs):
    x, index = args[0], args[1]
    mask = _bool_mask(index)
    if mask is None:
        if isinstance(index, tuple) and any(_bool_mask(i) is not None for i in index):
            raise GraphBreak("indexing with a boolean mask together with other indices", user_location(),
                             "What to do: index with the mask alone (x[mask]) or use torch.where.")
        return NOT_MINE
    k = len(mask.ds_sizes)
    rest = tuple(x.ds_sizes[k:])
    return _size_op(tr, func, args, kwargs, numel=prod(mask.ds_sizes), desc=f"{_name(x)}[mask].size(0)",
                    build=lambda u: (_meta([u, *rest], x.dtype), [(u, *rest)]))


def setitem(tr, func, args, kwargs):
    x, index, value = args[0], args[1], args[2]
    if _bool_mask(index) is None:
        return NOT_MINE
    # in place, shape unchanged: no meta run (it would need the mask's data)
    tr.note_inplace(func, args, kwargs)
    _setitem_history(x, value)
    tr._record(func, args, kwargs, None, [], x.ds_device)
    return None


def _setitem_history(x, value) -> None:
    """What `x[mask] = value` does to `x`'s autograd state and version in eager, done on the meta
    tensor by an in-place op of the same effect: one version bump; under grad mode, when `x` or
    `value` requires grad, `x` is then a non-leaf (IndexPutBackward0) that requires grad, and a leaf
    that requires grad raises as eager raises."""
    src = value if isinstance(value, torch.Tensor) and value.requires_grad and torch.is_grad_enabled() else None
    if src is not None:
        x.add_(src.sum().to(x.dtype).mul(0))
    elif x.requires_grad and torch.is_grad_enabled():
        x.mul_(1)
    else:
        with torch.no_grad():
            x.copy_(x)
        return
    x.ds_grad_fn = "IndexPutBackward0"


def unique(tr, func, args, kwargs):
    vals = _bind(("input", "sorted", "return_inverse", "return_counts", "dim"), args, kwargs)
    x = vals["input"]
    if vals.get("dim") is not None:
        dim = norm_dim(vals["dim"], len(x.ds_sizes))
    else:
        dim = None
    inverse, counts = bool(vals.get("return_inverse", False)), bool(vals.get("return_counts", False))

    def build(u):
        if dim is None:
            shapes = [(u,)]
        else:
            shapes = [tuple(u if i == dim else s for i, s in enumerate(x.ds_sizes))]
        if inverse:
            shapes.append(tuple(x.ds_sizes) if dim is None else (x.ds_sizes[dim],))
        if counts:
            shapes.append((u,))
        metas = [_meta(shapes[0], x.dtype)] + [_meta(s, torch.long) for s in shapes[1:]]
        return (tuple(metas) if len(metas) > 1 else metas[0]), shapes

    numel = prod(x.ds_sizes) if dim is None else x.ds_sizes[dim]
    return _size_op(tr, func, args, kwargs, numel=numel, desc=f"{_name(x)}.unique().size(0)", build=build)


def repeat_interleave(tr, func, args, kwargs):
    vals = _bind(("input", "repeats", "dim"), args, kwargs)
    x, repeats = vals["input"], vals.get("repeats")
    if len(args) == 1 and not kwargs and isinstance(x, FakeTensor):  # torch.repeat_interleave(repeats)
        return _size_op(tr, func, args, kwargs, numel=None, desc=f"{_name(x)}.sum()",
                        build=lambda u: (_meta([u], torch.long), [(u,)]))
    if vals.get("output_size") is not None:
        return NOT_MINE
    dim = vals.get("dim")
    if not isinstance(repeats, FakeTensor):  # an int: repeat each element n times
        if dim is None:
            shape = (prod(x.ds_sizes) * repeats,)
        else:
            d = norm_dim(dim, len(x.ds_sizes))
            shape = tuple(s * repeats if i == d else s for i, s in enumerate(x.ds_sizes))
        return tr.call_op(func, lambda *a, **k: shape, args, kwargs)
    d = None if dim is None else norm_dim(dim, len(x.ds_sizes))

    def build(u):
        shape = (u,) if d is None else tuple(u if i == d else s for i, s in enumerate(x.ds_sizes))
        return _meta(shape, x.dtype), [shape]

    return _size_op(tr, func, args, kwargs, numel=None, desc=f"{_name(repeats)}.sum()", build=build)


def bincount(tr, func, args, kwargs):
    vals = _bind(("input", "weights", "minlength"), args, kwargs)
    x, w = vals["input"], vals.get("weights")
    dtype = torch.long if w is None else (w.dtype if w.dtype.is_floating_point else torch.double)
    u_desc = f"{_name(x)}.bincount().size(0)"
    if not tr.capture_dynamic_output_shape_ops:
        raise GraphBreak(f"{u_desc} is data-dependent", user_location())
    minlength = vals.get("minlength")
    minlength = 0 if minlength is None else minlength
    lo = _lower(tr, minlength)  # a symbolic minlength (`minlength=n.item()`) bounds u by its range
    u = tr.new_unbacked(size_like=True, lo=max(lo, 0), description=u_desc)
    res = tr._record(func, args, kwargs, with_history(func, args, kwargs, _meta([u], dtype)), [(u,)], x.ds_device)
    tr.bind_unbacked(u, res.ds_node, "size", 0)
    if isinstance(minlength, SymBase):  # always true (the output has at least minlength bins)
        tr.runtime_assert(u >= minlength, f"bincount: the output has at least minlength = {tr.env.describe(minlength.node.expr)} bins")
    return res


def item(tr, func, args, kwargs):
    x = args[0]
    if not tr.capture_scalar_outputs:
        raise GraphBreak("Tensor.item() reads data (config.capture_scalar_outputs is False)", user_location())
    for s in x.ds_sizes:
        int(s)  # item() needs exactly one element: the sizes are what they are
    pytype = bool if x.dtype is torch.bool else (float if x.dtype.is_floating_point or x.dtype.is_complex
                                                 else int)
    v = tr.new_unbacked(size_like=False, description=f"{_name(x)}.item()", pytype=pytype)
    node = tr.graph.call(func, (x.ds_node,), {}, tr.to_ir(v), user_location(), torch.is_grad_enabled(),
                         name_hint="item")
    tr.bind_unbacked(v, node, "value", None)
    return v


def tolist(tr, func, args, kwargs):
    x = args[0]
    if not tr.capture_scalar_outputs:
        raise GraphBreak("Tensor.tolist() reads data (config.capture_scalar_outputs is False)", user_location())
    shape = [int(s) for s in x.ds_sizes]
    pytype = bool if x.dtype is torch.bool else (float if x.dtype.is_floating_point else int)
    node = tr.graph.call(func, (x.ds_node,), {}, None, user_location(), torch.is_grad_enabled(),
                         name_hint="tolist")

    def build(prefix):
        if len(prefix) == len(shape):
            v = tr.new_unbacked(size_like=False, description=f"{_name(x)}.tolist()"
                                + "".join(f"[{i}]" for i in prefix), pytype=pytype)
            tr.bind_unbacked(v, node, "index", prefix)
            return v
        return [build(prefix + (i,)) for i in range(shape[len(prefix)])]

    return build(())


def one_hot(tr, func, args, kwargs):
    """`F.one_hot(t)` without num_classes: `t.max() + 1` classes, a data-dependent size."""
    vals = _bind(("input", "num_classes"), args, kwargs)
    n = vals.get("num_classes", -1)
    if isinstance(n, SymBase) or n != -1:
        return NOT_MINE
    x = vals["input"]
    shape = tuple(x.ds_sizes)

    def build(u):
        return _meta(shape + (u,), torch.long), [shape + (u,)]

    return _size_op(tr, func, args, kwargs, numel=None, desc=f"{_name(x)}.max() + 1 (F.one_hot's classes)",
                    build=build)


HANDLERS = {
    torch.nonzero: nonzero, T.nonzero: nonzero, torch.argwhere: nonzero, T.argwhere: nonzero,
    torch.where: where, T.where: where,
    torch.masked_select: masked_select, T.masked_select: masked_select,
    T.__getitem__: getitem, T.__setitem__: setitem,
    torch.unique: unique, T.unique: unique, torch._unique2: unique, torch._unique: unique,
    torch.repeat_interleave: repeat_interleave, T.repeat_interleave: repeat_interleave,
    torch.bincount: bincount, T.bincount: bincount,
    T.item: item, T.tolist: tolist,
    torch.nn.functional.one_hot: one_hot,
}
