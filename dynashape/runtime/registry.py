"""Backends by name. A backend is a callable `backend(graph) -> fn(L)`; backends register here."""
from __future__ import annotations

BACKENDS: dict = {}


def register_backend(name: str):
    def deco(cls):
        BACKENDS[name] = cls
        return cls
    return deco


def get_backend(backend):
    if callable(backend) and not isinstance(backend, str):
        return backend
    try:
        return BACKENDS[backend]()
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; available: {sorted(BACKENDS)}") from None


ENTRY_WRAPPERS: list = []  # wrap(fn, graph, guard_set, env) -> fn, installed by layers above (CUDA graphs)


class _Fleet:
    """What the fleet layer (dynashape/fleet/, above this one) does at a compile and a module
    compile; it installs its functions here when imported. The defaults do nothing."""

    @staticmethod
    def seed(cf, L) -> None:
        """Before a trace: make dynamic what the PGO profile says varied in earlier runs."""

    @staticmethod
    def sync(cf, L) -> None:
        """Before a trace, with compiler collectives: agree with the other ranks on what is dynamic."""

    @staticmethod
    def agree(cf, missed: bool) -> bool:
        """With compiler collectives, on every call: whether any rank missed its cache (then every
        rank compiles, together)."""
        return missed

    @staticmethod
    def record(cf, L) -> None:
        """After a compile: what this call's sizes add to the profile."""

    @staticmethod
    def inner(mod):
        """The module whose forward `ds.compile(mod)` compiles (the model a DDP wrapper holds)."""
        return mod

    @staticmethod
    def opaque_reason(mod):
        """Why calling `mod` inside a trace cannot be recorded as tensor ops, or None."""
        return None

    advice = ""  # what to do about an opaque module


FLEET = _Fleet()


def register_fleet(**functions) -> None:
    for name, fn in functions.items():
        if not hasattr(FLEET, name):
            raise AttributeError(f"the fleet has no hook {name!r}")
        setattr(FLEET, name, fn)
