"""Readable names of torch callables: `torch.cat`, `torch.Tensor.add`, `torch.nn.functional.linear`."""
from __future__ import annotations

import importlib


_known: dict = {}  # torch's callables -> their names (a trace asks several times per op)


def target_name(target) -> str:
    """`torch.cat`, `torch.Tensor.add`, `torch.nn.functional.linear`, `torch.ops.aten.slice.Tensor` …"""
    try:
        return _known[target]
    except (KeyError, TypeError):
        pass
    name = _target_name(target)
    if name.startswith("torch."):  # not the user's callables: the cache would keep them alive
        try:
            _known[target] = name
        except TypeError:
            pass
    return name


def _target_name(target) -> str:
    kind = type(target).__name__
    if kind == "OpOverload":
        return f"torch.ops.{target.namespace}.{target.overloadpacket.__name__}.{target._overloadname}"
    if kind == "OpOverloadPacket" and "::" in getattr(target, "_qualified_op_name", ""):
        return "torch.ops." + target._qualified_op_name.replace("::", ".")
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    mod = getattr(target, "__module__", None)
    owner = getattr(target, "__self__", None)
    if qual == "getset_descriptor.__get__" or type(owner).__name__ == "getset_descriptor":
        return f"torch.Tensor.{owner.__name__}"  # a property's getter
    if qual.startswith("_VariableFunctionsClass."):
        mod = None
    if mod in (None, "torch._C", "torch._C._VariableFunctions", "torch._C._nn", "torch._C._linalg",
               "torch._C._special", "torch._C._fft"):
        short = qual.rsplit(".", 1)[-1]
        for prefix, ns in _C_NAMESPACES:
            if getattr(ns(), short, None) is target:
                return f"{prefix}.{short}"
        if qual.startswith("TensorBase.") or qual.startswith("_TensorBase."):
            return "torch.Tensor." + qual.split(".", 1)[1]
        return qual if mod is None else f"{mod}.{qual}"
    if mod == "torch._tensor" and qual.startswith("Tensor."):
        return "torch." + qual
    if mod and mod.startswith("torch.nn.functional"):
        name = getattr(target, "__name__", qual)
        if "<locals>" in qual and getattr(importlib.import_module(mod), name, None) is target:
            qual = name  # boolean_dispatch wrappers (F.max_pool2d) under their public name
        return "torch.nn.functional." + qual
    return f"{mod}.{qual}" if mod else qual


def _torch_ns(path):
    def get():
        mod, _, attr = path.rpartition(".")
        return getattr(importlib.import_module(mod), attr) if mod else importlib.import_module(path)
    return get


_C_NAMESPACES = [
    ("torch", _torch_ns("torch")),
    ("torch.nn.functional", _torch_ns("torch.nn.functional")),
    ("torch.special", _torch_ns("torch.special")),
    ("torch.linalg", _torch_ns("torch.linalg")),
    ("torch.fft", _torch_ns("torch.fft")),
]
