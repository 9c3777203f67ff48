"""Scalar attributes of modules that may be symbolic.

A float attribute of a module the function uses (`self.scale`) follows the same
policy as a float argument, as in torch.compile: static first, a symbol once it
has changed (or from the start with `dynamic=True`). Int attributes
(`self.n_heads`) do so only with `config.allow_unspec_int_on_nn_module`; by
default they are guarded by value, as torch.compile does. While tracing, the
attribute holds a SymInt/SymFloat; the generated code reads the real value from
the module.
"""
from __future__ import annotations

import contextlib

from ..symbolic.sources import AttrSource
from ..symbolic.symtypes import SymBase


def scalar_attributes(modules, ints: bool):
    """(source, module, name, value) for every plain float (and, if `ints`, int) attribute of the
    given modules."""
    kinds = (float, int) if ints else (float,)
    for src, m in modules:
        for k, v in vars(m).items():
            if not k.startswith("_") and type(v) in kinds:
                yield AttrSource(src, k), m, k, v


@contextlib.contextmanager
def symbolic_attributes(tracer, modules, frame_state, automatic: bool, ints: bool):
    """Trace with the dynamic ones replaced by symbols; yields the set of (id(module), name) replaced."""
    found = list(scalar_attributes(modules, ints))
    if automatic:
        frame_state.update_pairs((src, v) for src, _, _, v in found)
    replaced, saved = set(), []
    for src, m, k, v in found:
        sym = tracer.wrap_input(v, src)
        if isinstance(sym, SymBase):
            saved.append((m, k, v))
            m.__dict__[k] = sym  # not through __setattr__: no module-epoch bump, no hooks
            replaced.add((id(m), k))
        else:
            tracer.value_inputs.pop()  # a static value: the module-state guard already checks it
    try:
        yield replaced
    finally:
        for m, k, v in saved:
            m.__dict__[k] = v
