"""The container types of an exported program's outputs: namedtuples and dict subclasses
(OrderedDict, transformers' ModelOutput) come back as the types the module returned, as eager's
and torch.export's do (`out.logits`), not as the plain tuples and dicts the graph holds.

At export, `skeleton(out)` records the types where they are not plain (None where nothing needs
rebuilding: the usual all-tensor output costs nothing per call); each call, `rebuild(out, spec)`
makes fresh objects of those types around the graph's values. A dict subclass's attributes are
kept when each is one of its items (ModelOutput's fields) or a plain constant (a field that is
None); any other attribute, or a sequence subclass that is not a namedtuple, stays plain.

A saved program stores each type by module and qualified name; loading looks it up among the
modules already imported (never importing one: loading runs no code of the file), and a type not
found there gives plain containers.
"""
from __future__ import annotations

import sys

import torch

from ..tracing.outputs import _dict_setitem, _fill, vars_of

_CONSTS = (bool, int, float, str, type(None))
_NO = object()
_INF = float("inf")


def skeleton(v):
    """The types to rebuild around the graph's output for value `v` (what the traced module returned)."""
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        kids = [skeleton(x) for x in v]
        cls = type(v) if hasattr(type(v), "_fields") and isinstance(v, tuple) else None
        if cls is None and all(k is None for k in kids):
            return None
        return ("seq", cls, kids)
    if isinstance(v, dict):
        kids = {k: skeleton(x) for k, x in v.items()}
        cls, attrs = (type(v), _attrs(v)) if type(v) is not dict else (None, None)
        if attrs is None:
            cls = None
        if cls is None and all(k is None for k in kids.values()):
            return None
        return ("dict", cls, kids, attrs or [])
    return None


def _attrs(d: dict):
    """(name, ("item", key) | ("const", value)) for each attribute of dict subclass `d`, or None."""
    out = []
    for name, a in vars_of(d).items():
        key = next((k for k, x in d.items() if x is a), _NO)
        if key is not _NO:
            out.append((name, ("item", key)))
        elif isinstance(a, _CONSTS):
            out.append((name, ("const", a)))
        else:
            return None
    return out


def rebuild(out, spec):
    if spec is None:
        return out
    if spec[0] == "seq":
        items = [rebuild(x, s) for x, s in zip(out, spec[2])]
        return spec[1](*items) if spec[1] is not None else type(out)(items)
    _, cls, kids, attrs = spec
    items = {k: rebuild(out[k], s) for k, s in kids.items()}
    if cls is None:
        return items
    obj = cls.__new__(cls)
    setitem = _dict_setitem(cls)
    for k, x in items.items():
        setitem(obj, k, x)
    _fill(obj, [(name, items[v] if how == "item" else v) for name, (how, v) in attrs])
    return obj


# ------------------------------------------------------------------ saving
def encode(spec):
    if spec is None:
        return None
    if spec[0] == "seq":
        return {"seq": [encode(s) for s in spec[2]], "type": _name(spec[1])}
    _, cls, kids, attrs = spec
    if not all(isinstance(k, str) for k in kids) or any(isinstance(v, float) and v != v or v in (_INF, -_INF)
                                                       for _, (how, v) in attrs if how == "const"):
        return None  # what JSON cannot hold as it is (int keys, nan): plain after loading
    return {"dict": [[k, encode(s)] for k, s in kids.items()], "type": _name(cls),
            "attrs": [[n, how, v] for n, (how, v) in attrs]}


def decode(doc):
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("seq"), list):
        kids = [decode(x) for x in doc["seq"]]
        cls = _lookup(doc.get("type"))
        cls = cls if cls is not None and hasattr(cls, "_fields") and issubclass(cls, tuple) else None
        return ("seq", cls, kids) if cls is not None or any(k is not None for k in kids) else None
    if isinstance(doc.get("dict"), list):
        kids = {kv[0]: decode(kv[1]) for kv in doc["dict"] if isinstance(kv, list) and len(kv) == 2
                and isinstance(kv[0], str)}
        cls = _lookup(doc.get("type"))
        cls = cls if cls is not None and issubclass(cls, dict) else None
        attrs = [(a[0], (a[1], a[2])) for a in doc.get("attrs") or [] if isinstance(a, list) and len(a) == 3
                 and isinstance(a[0], str) and a[1] in ("item", "const") and (a[1] == "const" or a[2] in kids)
                 and (a[1] == "item" or isinstance(a[2], _CONSTS))]
        return ("dict", cls, kids, attrs) if cls is not None or any(k is not None for k in kids.values()) else None
    return None


def _name(cls):
    return None if cls is None else [cls.__module__, cls.__qualname__]


def _lookup(name):
    """A class by module and qualified name, among the modules already imported; else None."""
    if not (isinstance(name, list) and len(name) == 2 and all(isinstance(x, str) for x in name)):
        return None
    obj = sys.modules.get(name[0])
    for part in name[1].split("."):
        obj = getattr(obj, part, None) if obj is not None and part != "<locals>" else None
    return obj if isinstance(obj, type) else None
