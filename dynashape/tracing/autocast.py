"""Ops under autocast while tracing: the dtypes eager's autocast would give.

Autocast casts an op's inputs on the CPU and CUDA, not on the `meta` device the trace computes
on, so a meta run of `x @ w` under `torch.autocast("cpu", dtype=torch.bfloat16)` says float32
where eager gives bfloat16. Which ops autocast casts, and to what, lives in torch's C++ tables;
rather than copy them, we ask autocast itself: the op runs once on stand-ins on the real device
(one element each, expanded to the real shape: no memory, no compute) under a dispatch mode that
sees autocast's casts and computes every op on meta instead. What it learns:

  * the casts applied to the op's own inputs: the trace applies the same casts to the fakes and
    runs the op without autocast, so the result's autograd history is eager's (`MmBackward0` after
    two `ToCopyBackward0`);
  * the dtypes of the results: where casts inside a decomposition change them further (einsum's
    bmm), the result is cast to them (its grad_fn name is then not known: reading it breaks).
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..symbolic.userloc import user_location
from . import no_dynamo
from .errors import GraphBreak
from .tree import leaves, map_leaves, wrap_tensors

_DEVICES = ("cpu", "cuda")


def active_for(args, kwargs) -> str | None:
    """The device type whose autocast applies to this call's tensors, or None."""
    if not torch._C._is_any_autocast_enabled():
        return None
    for a in leaves((args, kwargs)):
        if isinstance(a, torch.Tensor) and hasattr(a, "ds_device"):
            dev = a.ds_device.type
            return dev if dev in _DEVICES and torch.is_autocast_enabled(dev) else None
    return None


def meta_run(device: str, impl, meta_args, meta_kwargs, name: str):
    """The meta run of a call under autocast: its inputs cast as autocast casts them on `device`,
    its results in the dtypes autocast gives."""
    got = probe(device, impl, meta_args, meta_kwargs)
    if got is None:
        raise GraphBreak(f"{name} under autocast: the dtype autocast gives its result could not be "
                         "worked out", user_location(),
                         "What to do: call it outside the autocast block, or outside the compiled function.")
    casts, dtypes = got
    k = iter(range(1 << 30))

    def cast(x):
        if isinstance(x, torch.Tensor):
            i = next(k)
            if i in casts and x.dtype != casts[i]:
                return x.to(casts[i])  # eager's ToCopyBackward0 on the way in
        return x
    margs, mkwargs = map_leaves((meta_args, meta_kwargs), cast)
    with torch.autocast(device, enabled=False):
        out = impl(*margs, **mkwargs)
    j = iter(range(1 << 30))

    def fix(x):
        want = dtypes[next(j)] if len(dtypes) else x.dtype
        if x.dtype == want:
            return x
        y = x.to(want)  # a cast inside a decomposition: the result's own node is not known
        y.ds_grad_fn = ""
        return y
    return wrap_tensors(out, lambda x, path: fix(x), ())


class _Probe(TorchDispatchMode):
    """Each aten op on meta; the tensors handed back are stand-ins on the real device."""

    def __init__(self, device: str, standins: dict, strided: bool = False):
        super().__init__()
        self.device = device
        self.strided = strided
        self.meta_of = standins  # id(stand-in) -> meta tensor
        self.keep: list = []
        self.casts: dict = {}  # id(a stand-in of an argument) -> the dtype autocast cast it to
        self.top = set(standins)

    def standin(self, meta: torch.Tensor) -> torch.Tensor:
        s = _standin(meta.shape, meta.stride(), meta.dtype, self.device, self.strided)
        self.meta_of[id(s)] = meta
        self.keep.append(s)
        return s

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args and id(args[0]) in self.top \
                and kwargs.get("dtype") is not None:
            self.casts.setdefault(id(args[0]), kwargs["dtype"])

        def to_meta(x):
            if isinstance(x, torch.Tensor):
                m = self.meta_of.get(id(x))
                if m is None:  # a constant the op made on the device
                    m = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
                return m
            return x
        margs = [to_meta(a) if not isinstance(a, (list, tuple)) else type(a)(map(to_meta, a)) for a in args]
        mkw = {k: to_meta(v) for k, v in kwargs.items()}
        if "device" in mkw and mkw["device"] is not None:
            mkw["device"] = "meta"
        out = func(*margs, **mkw)
        return _map_tensors(out, self.standin)


no_dynamo.defer(_Probe.__dict__["__torch_dispatch__"])  # torch wrapped it; calling it would import Dynamo


def _standin(shape, stride, dtype, device, strided: bool) -> torch.Tensor:
    """One element expanded to `shape` (no memory), or, `strided`, a tensor with the real strides
    (uninitialized, never read: the memory of the real tensor, which the CPU does not map until it
    is touched)."""
    if strided:
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)
    s = torch.empty((), dtype=dtype, device=device)
    return s.expand(shape) if len(shape) else s


def _map_tensors(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_map_tensors(o, fn) for o in out)
    return out


def probe(device: str, func, args, kwargs):
    """({index of a tensor leaf of (args, kwargs): dtype autocast casts it to}, [result dtypes]),
    or None when the op cannot run on stand-ins.

    Stand-ins are first one element expanded (strides 0). A composite op that decides between
    `view` and a copy by its inputs' strides (matmul's reshape to 3-d inside sdpa's math path, on a
    transposed query) then takes `view`, which the meta tensor with the real strides refuses: such
    an op is probed again with stand-ins that have the real strides."""
    if not no_dynamo._done:  # torch's meta kernels run below: not one of them may import torch._dynamo
        no_dynamo.prepare()
    got = _probe(device, func, args, kwargs, strided=False)
    if got is None:
        got = _probe(device, func, args, kwargs, strided=True)
    return got


def _probe(device: str, func, args, kwargs, strided: bool):
    tensors = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    standins: dict = {}
    by_id = {}
    with torch._C.DisableTorchFunction():
        for t in tensors:
            s = _standin(t.shape, T_stride(t), t.dtype, device, strided)
            standins[id(s)] = torch.empty_strided(t.shape, T_stride(t), dtype=t.dtype, device="meta")
            by_id[id(t)] = s
    mode = _Probe(device, standins, strided)
    mode.keep += list(by_id.values())

    def swap(x):
        return by_id.get(id(x), x) if isinstance(x, torch.Tensor) else x
    pargs = _map_nested(args, swap)
    pkwargs = {k: _map_nested(v, swap) for k, v in kwargs.items()}
    cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)  # stand-ins are not weights worth caching
    try:
        with torch._C.DisableTorchFunction(), torch.no_grad(), mode:
            out = func(*pargs, **pkwargs)
    except Exception:
        return None
    finally:
        torch.set_autocast_cache_enabled(cache)
    casts = {i: mode.casts[id(by_id[id(t)])] for i, t in enumerate(tensors) if id(by_id[id(t)]) in mode.casts}
    dtypes = [x.dtype for x in leaves(out) if isinstance(x, torch.Tensor)]
    return casts, dtypes


def T_stride(t):
    return torch.Tensor.stride(t)


def _map_nested(obj, fn):
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        items = [_map_nested(o, fn) for o in obj]
        return type(obj)(items) if type(obj) in (list, tuple) else obj
    return fn(obj)


__all__ = ["active_for", "probe"]
