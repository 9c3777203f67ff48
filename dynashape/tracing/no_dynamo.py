"""Running torch's Python meta kernels without importing torch._dynamo.

Many of torch's meta kernels for CPU ops (the references behind sin, mul, mean, layer_norm...)
are wrapped by `torch._compile._disable_dynamo`, whose wrapper imports torch._dynamo on its
first call (~1 s, and the import of the whole torch.compile stack) to ask Dynamo not to trace
them. Nothing can be under Dynamo while torch._dynamo has not been imported, so until it is,
`disable` would change nothing: `prepare()` gives each such kernel a stand-in for its cached
disabled version that calls the kernel directly while torch._dynamo is absent and, once it is
imported (a user also running torch.compile), asks it for the real one and stores that instead,
so torch behaves exactly as it would have. This touches a private attribute torch itself reads
(`fn.__dynamo_disable`); torch versions without it simply import torch._dynamo as before.
"""
from __future__ import annotations

import sys
import types

_done = False
_ROOTS = ("torch._refs", "torch._prims", "torch._prims_common", "torch._decomp", "torch._meta_registrations")


class _UntilDynamo:
    """What torch._dynamo.disable(fn) would give, without importing torch._dynamo for it."""

    def __init__(self, fn, recursive):
        self.fn, self.recursive = fn, recursive

    def __call__(self, *args, **kwargs):
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is not None and hasattr(dynamo, "disable"):  # imported (and done importing): torch's own
            real = dynamo.disable(self.fn, self.recursive, wrapping=False)
            setattr(self.fn, "__dynamo_disable", real)
            return real(*args, **kwargs)
        return self.fn(*args, **kwargs)


def prepare() -> None:
    """Once per process, before the first meta kernel runs (a few milliseconds)."""
    global _done
    if _done:
        return
    _done = True
    try:
        import torch._compile as tc
        code = tc._disable_dynamo(lambda: None).__code__
    except Exception:  # noqa: BLE001 - another torch: nothing to prepare
        return
    if "torch._dynamo" in sys.modules or not {"fn", "recursive"} <= set(code.co_freevars):
        return
    todo = []
    for name, mod in list(sys.modules.items()):
        if mod is not None and name.startswith(_ROOTS):
            todo += [v for v in list(vars(mod).values()) if isinstance(v, types.FunctionType)]
    seen: set = set()
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        cells = dict(zip(g.__code__.co_freevars, g.__closure__ or ()))
        if g.__code__ is code:
            _stand_in(cells)
        w = getattr(g, "__wrapped__", None)
        if isinstance(w, types.FunctionType):
            todo.append(w)
        for c in cells.values():
            try:
                v = c.cell_contents
            except ValueError:
                continue
            if isinstance(v, types.FunctionType):
                todo.append(v)


def _stand_in(cells: dict) -> None:
    """The stand-in for the function one of torch's `_disable_dynamo` wrappers holds (its closure)."""
    try:
        fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
    except (KeyError, ValueError):
        return
    if getattr(fn, "__dynamo_disable", None) is None:
        setattr(fn, "__dynamo_disable", _UntilDynamo(fn, recursive))


def defer(wrapper) -> None:
    """Our own function that torch wrapped (a TorchDispatchMode subclass's `__torch_dispatch__`, wrapped
    when the class is made): the same stand-in, so entering the mode imports no torch._dynamo."""
    try:
        import torch._compile as tc
        code = tc._disable_dynamo(lambda: None).__code__
    except Exception:  # noqa: BLE001 - another torch: nothing to do
        return
    if isinstance(wrapper, types.FunctionType) and wrapper.__code__ is code and "torch._dynamo" not in sys.modules:
        _stand_in(dict(zip(code.co_freevars, wrapper.__closure__ or ())))
