"""A counter bumped whenever any nn.Module attribute is set or deleted, or a hook registered or removed,
and the dicts a module's state lives in.

A compiled module's call goes straight to its compiled forward while the counter has not moved
since it last found no wrapper to run and no hook dicts to re-read (runtime/compile.py). Guards do
not rely on it: state changes without `__setattr__` (`m._parameters[k] = p`, `Sequential.append`)
move no counter, so they watch the dicts themselves (`state_dicts`, guards/native.py). Importing
dynashape wraps `nn.Module.__setattr__`/`__delattr__` to bump it, and the hook handle every
`register_*_hook` returns (created on registration, `remove()`d on removal); behaviour is
unchanged.
"""
from __future__ import annotations

import torch

epoch = [0]  # mutable cell read by generated guards
_orig_setattr = torch.nn.Module.__setattr__
_orig_delattr = torch.nn.Module.__delattr__
# torch's own, not the one tracing/pyenv.py patches in while dynashape traces. torch.compile folds it
# to True: tracing a forward that sets an attribute (`self.calls += 1`), Dynamo would otherwise see
# the bump and guard on the counter's value, which every such call moves (a recompile per call up
# to its limit). The attribute write its compiled code replays still comes through here, and bumps.
_torch_compiling = torch.compiler.is_compiling


def _setattr(self, name, value):
    if not _torch_compiling():
        epoch[0] += 1
    _orig_setattr(self, name, value)


def _delattr(self, name):
    if not _torch_compiling():
        epoch[0] += 1
    _orig_delattr(self, name)


if not getattr(torch.nn.Module.__setattr__, "_dynashape_epoch", False):
    _setattr._dynashape_epoch = True
    torch.nn.Module.__setattr__ = _setattr
    torch.nn.Module.__delattr__ = _delattr


_handle_init = torch.utils.hooks.RemovableHandle.__init__
_handle_remove = torch.utils.hooks.RemovableHandle.remove


def _init_handle(self, *args, **kwargs):
    epoch[0] += 1
    _handle_init(self, *args, **kwargs)


def _remove_handle(self):
    epoch[0] += 1
    _handle_remove(self)


if not getattr(torch.utils.hooks.RemovableHandle.__init__, "_dynashape_epoch", False):
    _init_handle._dynashape_epoch = True
    torch.utils.hooks.RemovableHandle.__init__ = _init_handle
    torch.utils.hooks.RemovableHandle.remove = _remove_handle

HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                 "_global_backward_hooks")
MEMBERS = ("_parameters", "_buffers", "_modules")
_HOOK_FLAGS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")
_GLOBAL_HOOK_FLAGS = ("_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called")
_MODULE_HOOK_KEYS = HOOKS + _HOOK_FLAGS


def hook_dicts(modules) -> tuple:
    """The dicts that hold the forward and backward hooks of `modules` and the global module hooks
    (`nn.modules.module.register_module_forward_hook` & co), and how they are called (with kwargs,
    always): what `Module.__call__` runs besides forward. All empty when no hook is registered."""
    from torch.nn.modules import module as _m
    out = [d for d in (getattr(_m, k, None) for k in GLOBAL_HOOKS + _GLOBAL_HOOK_FLAGS) if isinstance(d, dict)]
    for m in modules:
        get = m.__dict__.get
        for k in _MODULE_HOOK_KEYS:
            d = get(k)
            if isinstance(d, dict):
                out.append(d)
    return tuple(out)


def state_dicts(modules, hooks: tuple | None = None) -> tuple:
    """Every dict a module call reads its state from: each module's `__dict__` (plain attributes,
    `training`), the dicts of its parameters, buffers and submodules, and the hook dicts (its own and
    the global ones). A guard that watches these (guards/native.py) sees any change of that state."""
    modules = list(modules)
    found = list(hook_dicts(modules) if hooks is None else hooks)  # `hooks`: hook_dicts(modules), known already
    for m in modules:
        md = vars(m)
        found += (md, *map(md.get, MEMBERS))
    out = {id(d): d for d in found if isinstance(d, dict)}  # each once, in order
    return tuple(out.values())
