"""A cache of meta-kernel results, keyed by the op and its arguments' metadata.

Most of a compile's time is torch running its own Python meta kernels (linear
decomposes to addmm, relu to where...) on our meta tensors. The result depends
only on the arguments' metadata (sizes, strides, dtype, requires_grad) and
their plain values, so the eight identical Linear layers of an MLP need one
run, and a recompile of the same model none. In-place ops, `out=` calls and
anything with an argument we cannot describe exactly are never cached.
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch: our own answers are plain, faster
from collections import OrderedDict

import torch

from torch.utils._python_dispatch import TorchDispatchMode

from . import no_dynamo
from .tree import leaves

_MAX = 4096
_cache: OrderedDict = OrderedDict()
_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format, torch.layout)
_UNCACHEABLE = object()


def _sig(x):
    """Exact description of one argument, or _UNCACHEABLE."""
    if isinstance(x, torch.Tensor):
        if not x.is_meta:
            return _UNCACHEABLE
        return ("T", tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.requires_grad)
    if isinstance(x, _PLAIN):
        return (type(x), x)
    if isinstance(x, (list, tuple)):
        items = tuple([_sig(v) for v in x])
        return _UNCACHEABLE if any(i is _UNCACHEABLE for i in items) else (type(x), items)
    if isinstance(x, slice):
        items = (_sig(x.start), _sig(x.stop), _sig(x.step))
        return _UNCACHEABLE if _UNCACHEABLE in items else ("slice", items)
    if x is Ellipsis:
        return "..."
    return _UNCACHEABLE


_AUTOCAST_OFF = ((False, None), (False, None))


def autocast_state() -> tuple:
    """Autocast changes ops' output dtypes: (enabled, dtype) for the CPU and CUDA autocast."""
    if not torch._C._is_any_autocast_enabled():
        return _AUTOCAST_OFF  # the dtypes say nothing while it is off (the usual case: one call)
    return tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))




def modes_now():
    """(inference mode, autocast state) ops run under now; None when both are off (the usual case).
    Grad mode is recorded apart (each node's `grad_enabled`)."""
    # torch._C's getter: torch.is_inference_mode_enabled is patched while tracing, to guard on what the
    # user's code reads (tracing/global_state.py); our own reads are no such read
    inference = torch._C.is_inference_mode_enabled()
    if not inference and not torch._C._is_any_autocast_enabled():
        return None
    return (inference, autocast_state())


def _cacheable_op(func) -> bool:
    try:
        return _CACHEABLE[func]
    except (KeyError, TypeError):
        pass
    name = getattr(func, "__name__", "")
    out = not (name.endswith("_") and not name.endswith("__")) and not name.startswith("__i") \
        and name not in ("__setitem__", "copy_", "set_", "resize_")
    if len(_CACHEABLE) < 4096 and (getattr(func, "__module__", None) or "torch").startswith("torch"):
        try:  # torch's callables only: the user's would be kept alive
            _CACHEABLE[func] = out
        except TypeError:
            pass
    return out


_CACHEABLE: dict = {}


def _spec(out, inputs):
    """A recipe to rebuild `out`: tensors by metadata, returned inputs by position, plain values as is.
    A view is never rebuilt: its `_base` and version counter are its input's."""
    if isinstance(out, torch.Tensor):
        for i, t in enumerate(inputs):
            if out is t:
                return ("input", i)
        if out._is_view() or out.requires_grad:
            return _UNCACHEABLE
        return ("T", tuple(out.shape), tuple(out.stride()), out.dtype)
    if isinstance(out, _PLAIN):
        return ("V", out)
    if type(out) in (list, tuple):
        items = [_spec(v, inputs) for v in out]
        return _UNCACHEABLE if _UNCACHEABLE in items else (type(out), tuple(items))
    return _UNCACHEABLE  # structseqs (torch.return_types) and anything else: run it each time


def _build(spec, inputs):
    kind = spec[0]
    if kind == "input":
        return inputs[spec[1]]
    if kind == "V":
        return spec[1]
    if kind == "T":
        _, shape, stride, dtype = spec
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    return kind(_build(s, inputs) for s in spec[1])


def call(func, args, kwargs):
    """`func(*args, **kwargs)` on meta tensors, through the cache when that is exact."""
    if not no_dynamo._done:
        no_dynamo.prepare()
    if not _cacheable_op(func) or "out" in kwargs or kwargs.get("inplace") is True:
        return func(*args, **kwargs)
    tensors = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    grad = torch.is_grad_enabled()
    if grad and any(a.requires_grad for a in tensors):
        # autograd records this call: the output's history (grad_fn, is_leaf, views) must be its own,
        # so the call runs; the aten ops autograd hands down are served from the cache below it
        with _BelowAutograd():
            return func(*args, **kwargs)
    # the default dtype types factories (torch.ones) and int-tensor-times-float results: a retrace after
    # set_default_dtype(float64) was served the float32 shapes of the first trace
    key = (func, grad, torch._C.is_inference_mode_enabled(), autocast_state(), torch.get_default_dtype(),
           _sig(args), _sig(tuple(sorted(kwargs.items()))) if kwargs else ())
    return _through_cache(key, 5, func, args, kwargs, inputs=tensors)


def _through_cache(key, described: int, func, args, kwargs, fresh: bool = False, inputs=None):
    """`func(*args, **kwargs)`, or its result rebuilt from the cache entry of `key`, whose items from
    `described` on describe the arguments. `fresh`: the op's schema says its results are new tensors;
    one that returned an input anyway is not kept. `inputs`: the tensors among the arguments, in order."""
    if any(k is _UNCACHEABLE for k in key[described:]):
        return func(*args, **kwargs)
    try:
        spec = _cache.get(key)
    except TypeError:  # an unhashable value inside: run it
        return func(*args, **kwargs)
    if inputs is None:
        inputs = [a for a in leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if spec is not None:  # (no move_to_end: the oldest entry goes first when it is full)
        return _build(spec, inputs)
    out = func(*args, **kwargs)
    spec = _spec(out, inputs)
    if spec is not _UNCACHEABLE and not (fresh and _names_input(spec)):
        _cache[key] = spec
        if len(_cache) > _MAX:
            _cache.popitem(last=False)
    return out


def _fresh_op(func) -> bool:
    """An aten op whose results are new tensors: it writes no argument and returns no alias of one."""
    schema = getattr(func, "_schema", None)
    return schema is not None and not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


def _names_input(spec) -> bool:
    return spec[0] == "input" or (type(spec[0]) is type and any(_names_input(x) for x in spec[1]))


class _BelowAutograd(TorchDispatchMode):
    """Under autograd, a traced call (linear on tensors that require grad) reaches torch's meta kernels
    op by op below the autograd layer, which has already recorded the history; there the results
    depend only on the arguments' metadata, so ops that make new tensors are served by the cache as
    calls without autograd are (torch's Python meta kernels for addmm & co were half of a grad-mode
    compile). Views, in-place ops and anything the cache cannot describe run as they are."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _fresh_op(func) or "out" in kwargs:
            return func(*args, **kwargs)
        key = ("below autograd", func, torch.get_default_dtype(), _sig(args), _sig(tuple(sorted(kwargs.items()))))
        return _through_cache(key, 3, func, args, kwargs, fresh=True)


no_dynamo.defer(_BelowAutograd.__dict__["__torch_dispatch__"])  # torch wrapped it: no Dynamo import on a call
