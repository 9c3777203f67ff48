"""Which arguments a call changes in place: one table for the tracer (aliasing guards, whether a
call may be re-run from its start, the result that is its input), the fused scheduler (a region
never spans a write) and the CUDA-graph capture.

A call writes
  * what its aten schema marks written (`Tensor(a!)`): an OpOverload's own schema; for torch's
    builtins and Tensor methods the schemas of the aten op of the same name: every overload of a
    name ending in `_` (`add_`, `_foreach_mul_`'s list), the default overload of another
    (`rrelu_with_noise`'s noise);
  * `self` of an in-place dunder (`x += y`, `x[i] = v`), and the first argument of any other
    name ending in `_` (a Python function of torch's: `nn.init.normal_`);
  * its `out=` tensors;
  * its input when `inplace` is true (F.relu, F.dropout, nn.ReLU(inplace=True)), by keyword or
    by position;
  * the writes no schema shows (`HIDDEN`): running statistics of batch_norm when training and of
    instance_norm when it uses the input's statistics, embedding's weight when `max_norm` is given
    (it renormalises the rows it reads).

    >>> import torch.nn.functional as F
    >>> x = torch.randn(3)
    >>> written(F.leaky_relu, (x, 0.1, True), {})[0] is x
    True
"""
from __future__ import annotations

from builtins import isinstance  # the builtin, not tracing/pyenv.py's patch
import inspect
from typing import NamedTuple

import torch

INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                   "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                   "__imatmul__", "__idiv__"}

_TRUE, _GIVEN = "true", "given"  # a flag turns the write on when it is true / when it is not None
# name -> (the parameters written, the flag parameter, how the flag turns the write on)
HIDDEN = {
    "batch_norm": (("running_mean", "running_var"), "training", _TRUE),
    "native_batch_norm": (("running_mean", "running_var"), "training", _TRUE),
    "instance_norm": (("running_mean", "running_var"), "use_input_stats", _TRUE),
    "embedding": (("weight",), "max_norm", _GIVEN),
    "embedding_bag": (("weight",), "max_norm", _GIVEN),
}


class _Write(NamedTuple):
    pos: int | None  # the written argument's position (None: keyword only)
    name: str | None  # its keyword (None: positional only)
    flag: tuple | None = None  # (position, keyword, default, _TRUE | _GIVEN): the write happens when it holds


def written(func, args, kwargs) -> list:
    """The values `func(*args, **kwargs)` changes in place (tensors, lists of them, or graph values
    standing for them), each once; empty when it writes nothing."""
    out = []
    for w in _plan(func):
        if w.flag is not None and not _flag_on(w.flag, args, kwargs):
            continue
        v = _arg(args, kwargs, w.pos, w.name, None)
        if v is not None and not any(v is o for o in out):
            out.append(v)
    o = kwargs.get("out")
    if o is not None and not any(o is v for v in out):
        out.append(o)
    return out


def writes(func, args, kwargs) -> bool:
    """Whether the call changes an argument in place. `args` None: not known (a caller that has only
    the keywords): an unconditional write counts, a flag is read from the keywords alone."""
    if kwargs.get("out") is not None:
        return True
    for w in _plan(func):
        if w.flag is not None and not _flag_on(w.flag, args or (), kwargs):
            continue
        if args is None or _arg(args, kwargs, w.pos, w.name, None) is not None:
            return True
    return False


def new_storage_offset(func, args, kwargs):
    """The storage offset an in-place metadata op gives its tensor when it sets one
    (`as_strided_(size, stride, offset)`); None when the offset stays (`t_()`, `resize_()`)."""
    if getattr(func, "__name__", None) != "as_strided_":
        return None
    return _arg(args, kwargs, 3, "storage_offset", None)


def _arg(args, kwargs, pos, name, default):
    if pos is not None and pos < len(args):
        return args[pos]
    if name is not None and name in kwargs:
        return kwargs[name]
    return default


def _flag_on(flag, args, kwargs) -> bool:
    pos, name, default, test = flag
    v = _arg(args, kwargs, pos, name, default)
    if test == _GIVEN:
        return v is not None
    if v is None or isinstance(v, (bool, int, float)):
        return bool(v)
    return True  # a value not known while planning (a symbolic flag): assume it writes


# ------------------------------------------------------------------ the plan of one callable
_PLANS: dict = {}
_OWNERS = ("torch", "dynashape", "builtins", "_operator", "operator", "math")


def _plan(func) -> tuple:
    try:
        return _PLANS[func]
    except KeyError:
        pass
    except TypeError:  # unhashable: worked out each time
        return _make_plan(func)
    plan = _make_plan(func)
    module = getattr(func, "__module__", None) or "builtins"
    if len(_PLANS) < 8192 and (module.startswith(_OWNERS) or isinstance(func, torch._ops.OpOverload)):
        _PLANS[func] = plan  # not the user's callables: they would be kept alive
    return plan


def _make_plan(func) -> tuple:
    if isinstance(func, torch._ops.OpOverload):
        return _schema_writes([func._schema])
    if isinstance(func, torch._ops.OpOverloadPacket):
        return _schema_writes([getattr(func, o)._schema for o in func.overloads()])
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        return ()
    if name in INPLACE_DUNDERS:
        return (_Write(0, None),)
    params = _params(func, name)
    if name in HIDDEN:
        return _hidden(name, params)
    at = [i for i, p in enumerate(params or ()) if p[0] == "inplace"]
    if at:  # F.relu(x, inplace=True): its input
        flag = (None if params[at[0]][2] else at[0], "inplace", params[at[0]][1], _TRUE)
        return (_Write(0, params[0][0], flag),)
    if name.endswith("__"):
        return ()  # other dunders (`__add__`, `__getitem__`) write nothing
    if inspect.isfunction(func):  # a Python function of torch's: by convention `_` writes its first argument
        return (_Write(0, params[0][0] if params else None),) if name.endswith("_") else ()
    found = _schema_writes(_aten_schemas(name, every=name.endswith("_")))
    if not found and name.endswith("_"):
        return (_Write(0, "self"),)
    return found


def _schema_writes(schemas) -> tuple:
    out = []
    for s in schemas:
        for i, a in enumerate(s.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                w = _Write(None if a.kwarg_only else i, a.name)
                if w not in out:
                    out.append(w)
    return tuple(out)


def _aten_schemas(name: str, every: bool) -> list:
    """The schemas of aten's op `name`: every overload, or the default one alone."""
    try:
        packet = getattr(torch.ops.aten, name)
        names = packet.overloads() if every else [o for o in packet.overloads() if o == "default"]
        return [getattr(packet, o)._schema for o in names]
    except (AttributeError, RuntimeError):
        return []


def _params(func, name: str):
    """[(name, default, keyword only)] of `func`'s parameters: its Python signature, else the aten
    schema of its name (torch's builtins and Tensor methods take aten's order); None if unknown."""
    if inspect.isfunction(func):
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            return None
        return [(p.name, None if p.default is inspect.Parameter.empty else p.default,
                 p.kind is inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values()]
    schemas = _aten_schemas(name, every=False) or _aten_schemas(name, every=True)[:1]
    if not schemas:
        return None
    return [(a.name, a.default_value, a.kwarg_only) for a in schemas[0].arguments]


def _hidden(name: str, params) -> tuple:
    """The writes of `HIDDEN[name]`, at the positions of this callable's parameters (F.batch_norm
    takes running_mean second, torch.batch_norm fourth); none where it has no such parameter
    (torch.embedding has no max_norm)."""
    targets, flag_name, test = HIDDEN[name]
    if params is None:
        return ()
    pos = {p[0]: (None if p[2] else i) for i, p in enumerate(params)}
    default = {p[0]: p[1] for p in params}
    if flag_name not in pos:
        return ()
    flag = (pos[flag_name], flag_name, default[flag_name], test)
    return tuple(_Write(pos[t], t, flag) for t in targets if t in pos)


__all__ = ["HIDDEN", "INPLACE_DUNDERS", "new_storage_offset", "written", "writes"]
