"""The public entry, `ds.compile`, and what it makes of an nn.Module: a module whose forward is compiled.

`compile` hands functions, bound methods and callable objects to `CompiledFunction`
(runtime/compile.py); a module gets a `CompiledModule`, which runs its hooks (and a DDP wrapper's own
call) eagerly around the compiled forward, and compiles whatever `m(...)` would call now: a forward
set on the instance, or its class's, which a class swap or a patch changes.
"""
from __future__ import annotations

import inspect
import functools
import types

import torch

from ..guards.module_epoch import epoch as _module_epoch, hook_dicts
from .registry import FLEET as _fleet
from . import wrappers as _wrappers
from .compile import CompiledFunction


class CompiledModule(torch.nn.Module):
    """An nn.Module whose forward is compiled; parameters are read from the original each call.

    Hooks run eagerly around the compiled forward, as `nn.Module.__call__` runs them: the
    original's (and the global module hooks), and any registered on this module itself (as
    `fully_shard(ds.compile(layer))` does). A DDP/FSDP1 wrapper's own call runs eagerly too, around
    the compiled forward of the model it holds (runtime/wrappers.py, fleet/wrappers.py)."""

    def __init__(self, mod: torch.nn.Module, **opts):
        super().__init__()
        self._orig_mod = mod
        inner = _fleet.inner(mod)
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_opts", opts)
        object.__setattr__(self, "_variants", {})  # the forward's function (or callable) -> its compiled one
        object.__setattr__(self, "_compiled", None)
        self._current_forward()
        object.__setattr__(self, "_direct_at", -1)  # the module epoch at which a call could go straight in
        object.__setattr__(self, "_hook_dicts", ())  # this module's, the original's and the global hook dicts
        self.__dict__["training"] = mod.training  # `ds.compile(model.eval()).training` was True

    def _current_forward(self) -> "CompiledFunction":
        """The compiled form of what `inner(...)` calls now, made current: `inner.forward` set on the
        instance (functools.partial, as accelerate's hooks do), else its class's forward, which a class
        swap or `Model.forward = patched` changes. Each entry's guards fail on such a change (the module's
        keys, its class, the class's functions) and its miss asks this again (`_current`)."""
        inner = self._inner
        own = inner.__dict__.get("forward")
        if self._custom_call():  # `m(x)` runs the class's own __call__ (hooks and forward inside it, traced)
            key, bound = type(inner).__call__, True
        elif own is None:  # the class's: called with the module as `self`
            key, bound = type(inner).forward, True
        elif isinstance(own, CompiledFunction) and any(own is v for v in self._variants.values()):
            return own  # our own, for the call (ForwardSwap)
        elif isinstance(own, types.MethodType) and own.__self__ is inner:
            key, bound = own.__func__, True
        else:  # any callable (a lambda, a partial): called without `self`, as eager's m.forward(x)
            key, bound = own, False
        cf = self._variants.get(key)
        if cf is None:
            if bound:
                cf = CompiledFunction(key, bound_module=inner, **self._opts)
            else:
                cf = compile(key, **self._opts)
                cf = cf._compiled if isinstance(cf, CompiledModule) else cf
            cf._current = self._current_forward
            if len(self._variants) >= 8:  # (forwards set and reset per call: the oldest goes)
                self._variants.pop(next(iter(self._variants)))
            self._variants[key] = cf
        if cf is not self._compiled:
            object.__setattr__(self, "_compiled", cf)
            object.__setattr__(self, "_call", cf.__call__)  # bound once: a call fewer than cf(...)
        return cf

    def _custom_call(self) -> bool:
        """The module's class defines its own `__call__`: that is what eager's `m(x)` runs."""
        return self._orig_mod is self._inner and type(self._inner).__call__ is not torch.nn.Module.__call__

    def __reduce__(self):
        # copy.deepcopy, pickle, torch.save: the original module and the options travel, compiled code does not
        # (a copy compiles on its first call, as torch.compile's OptimizedModule does); hooks on this wrapper too
        hooks = {k: v for k, v in self.__dict__.items() if k.endswith("hooks") and v}
        return _rebuild_module, (self._orig_mod, self._opts, hooks)

    def forward(self, *args, **kwargs):
        orig, inner = self._orig_mod, self._inner
        if orig is inner and (not _wrappers.has_hooks(orig) or self._custom_call()):  # (its hooks: in the trace)
            return self._compiled(*args, **kwargs)
        with _wrappers.ForwardSwap(inner, self._compiled):  # the original's call: hooks, DDP's bookkeeping
            return orig(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        # the hot path: no wrapper and no hooks. The hook dicts are re-read once a module attribute was set
        # (a dict replaced); their contents are looked at on every call
        if self._direct_at == _module_epoch[0] and not any(self._hook_dicts):
            return self._call(*args, **kwargs)
        return self._call_slow(args, kwargs)

    def _call_slow(self, args, kwargs):
        self._current_forward()  # a module attribute was set: `m.forward = ...`, `m.__class__ = ...`
        at, inner = _module_epoch[0], self._inner
        direct = self._orig_mod is inner
        dicts = hook_dicts((self, inner))
        object.__setattr__(self, "_hook_dicts", dicts)
        object.__setattr__(self, "_direct_at", at if direct else -1)
        if direct and not any(dicts):
            return self._compiled(*args, **kwargs)
        if _wrappers.own_hooks(self):  # registered on the compiled module (fully_shard(ds.compile(m)))
            return torch.nn.Module.__call__(self, *args, **kwargs)
        return self.forward(*args, **kwargs)

    @property
    def stats(self):
        return self._compiled.stats

    @property
    def entries(self):
        return self._compiled.entries

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)

    # what the user sets or deletes on the wrapper is the module's (`cm.scale = 5.0` was the wrapper's own,
    # which the compiled forward never read), as on torch.compile's wrapper; the wrapper's own attributes
    # and what its class defines (methods, properties) stay the wrapper's
    def __setattr__(self, name, value):
        orig = self.__dict__.get("_modules", {}).get("_orig_mod")
        if name == "training":
            self._set_training(value)
            return None
        if name in _OWN or hasattr(type(self), name) or orig is None:
            return super().__setattr__(name, value)
        setattr(orig, name, value)

    def __delattr__(self, name):
        if name in _OWN or hasattr(type(self), name):
            return super().__delattr__(name)
        delattr(self._orig_mod, name)


    @property
    def training(self) -> bool:
        """The module's mode (`net.eval()` on the original is the wrapper's too, as torch.compile's says).
        Mirrored in this wrapper's `__dict__`, which a trace through the wrapper reads as module state."""
        orig = self.__dict__.get("_modules", {}).get("_orig_mod")
        mode = True if orig is None else orig.training
        self.__dict__["training"] = mode
        return mode

    @training.setter
    def training(self, mode: bool) -> None:
        self._set_training(mode)

    def _set_training(self, mode: bool) -> None:  # cm.train() / cm.eval(): the module's
        orig = self.__dict__.get("_modules", {}).get("_orig_mod")
        if orig is not None:
            orig.training = mode
        self.__dict__["training"] = mode


_OWN = frozenset({"_orig_mod", "_inner", "_compiled", "_call", "_direct_at", "_hook_dicts", "_opts", "_variants"})


def _call_partial(partial, /, *args, **kwargs):
    return partial(*args, **kwargs)


def _rebuild_module(orig, opts, hooks):
    m = CompiledModule(orig, **opts)
    m.__dict__.update(hooks)
    return m


def compile(fn=None, *, dynamic=None, fullgraph=False, backend=None):
    """Compile a function or nn.Module; also a decorator with or without arguments.

    >>> import torch, dynashape as ds
    >>> @ds.compile(dynamic=True)
    ... def f(x):
    ...     return x * x.size(0)
    >>> f(torch.ones(3)).tolist(), f(torch.ones(5)).tolist()[0], f.stats.compiles
    ([3.0, 3.0, 3.0], 5.0, 1)
    """
    if dynamic not in (None, True, False):
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    opts = dict(dynamic=dynamic, fullgraph=fullgraph, backend=backend)
    if fn is None:
        return lambda f: compile(f, **opts)
    if isinstance(fn, torch.nn.Module):
        return CompiledModule(fn, **opts)
    if isinstance(fn, types.MethodType) and not isinstance(fn.__self__, type):
        # model.forward / obj.method: `self` is an argument of every call, so its state is guarded
        return CompiledFunction(fn.__func__, bound_module=fn.__self__, **opts)
    if not callable(fn):
        raise TypeError(f"dynashape.compile takes a function or an nn.Module, got {type(fn).__name__}")
    if type(fn) is functools.partial:
        # the partial is an argument of every call, as a method's object: its args and keywords (a dict the
        # caller may change in place) are guarded, and two partials of one function do not share entries
        return CompiledFunction(_call_partial, bound_module=fn, **opts)
    call = getattr(type(fn), "__call__", None)
    if isinstance(call, types.FunctionType) and not isinstance(fn, (types.FunctionType, type)):
        # a callable object: its __call__ with the object as `self`, whose state (and its class's) is guarded
        return CompiledFunction(call, bound_module=fn, **opts)
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin such as torch.nonzero: call it through a Python function
        target = fn

        def fn(*args, **kwargs):
            return target(*args, **kwargs)

        functools.update_wrapper(fn, target)
        del fn.__wrapped__
    return CompiledFunction(fn, **opts)


