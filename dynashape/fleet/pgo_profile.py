"""The PGO profile model: per function, per source, what was seen; `?` once it varied.

An entry is a small JSON-able dict, one per source (an argument, or an item of one):

    {"kind": "tensor", "size": [2, "?"], "stride": ["S(1)", 1]}   ("?" for a whole list: rank changed)
    {"kind": "int", "value": 3}                                     (value "?" once it varied)
    {"kind": "any"}                                                 (was a tensor and an int)

Merging is a join (a semilattice, so merging in any order, any number of times, agrees):
missing + x = x, x + x = x, x + y = "?".

>>> merge_entry({"kind": "int", "value": 3}, {"kind": "int", "value": 4})
{'kind': 'int', 'value': '?'}
>>> render_entry(merge_entry(*[{"kind": "tensor", "size": [n], "stride": [1]} for n in (3, 4)]))
'tensor size=[?] stride=[1]'
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass

import torch

from ..symbolic.sources import ItemSource, LocalSource, SizeSource, Source

DYN = "?"  # the top of the lattice: seen with different values
MAX_PROFILE_BYTES = 64 << 20  # a bigger file is not a profile we wrote (thousands of functions fit in 1 MB)
FORMAT, VERSION = "dynashape-pgo", 1  # a file with another format or version is ignored and replaced


def merge_atom(a, b):
    if a is None:
        return b
    if b is None or a == b:
        return a
    return DYN


def _merge_list(a, b):
    if a is None or b is None:
        c = b if a is None else a
        return list(c) if isinstance(c, list) else c  # a fresh list: callers may update it in place
    if a == DYN or b == DYN or len(a) != len(b):
        return DYN
    return [merge_atom(x, y) for x, y in zip(a, b)]


def merge_entry(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return copy.deepcopy(a if b is None else b)
    if a["kind"] != b["kind"] or a["kind"] == "any":
        return {"kind": "any"}
    if a["kind"] == "int":
        return {"kind": "int", "value": merge_atom(a["value"], b["value"])}
    return {"kind": "tensor", "size": _merge_list(a["size"], b["size"]),
            "stride": _merge_list(a["stride"], b["stride"])}


def _infer_strides(size: list, stride: list) -> list:
    """`S(d+1)` where stride[d] == size[d+1] * stride[d+1], so a contiguous layout stays one
    fact when the sizes vary (joining [3, 1] and [4, 1] gives [S(1), 1], not [?, 1])."""
    return [f"S({d + 1})" if d + 1 < len(size) and stride[d] == size[d + 1] * stride[d + 1] else stride[d]
            for d in range(len(size))]


def observe(L: dict, skip_params: bool = False):
    """(source, entry) for every tensor and int the arguments hold, as the policy walks them;
    `skip_params` leaves out nn.Parameters (forced static: nothing to learn, as in PyTorch)."""
    for name, v in L.items():
        yield from _observe(v, LocalSource(name), skip_params)


def _observe(v, src: Source, skip_params: bool):
    if isinstance(v, torch.Tensor):
        if skip_params and isinstance(v, torch.nn.Parameter):
            return
        try:
            size = [int(s) for s in v.shape]
            stride = _infer_strides(size, [int(s) for s in v.stride()])
        except (RuntimeError, TypeError, ValueError):  # nested or sparse layouts: nothing to learn
            return
        yield src, {"kind": "tensor", "size": size, "stride": stride}
    elif isinstance(v, bool):
        return
    elif isinstance(v, int):
        yield src, {"kind": "int", "value": int(v)}
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            yield from _observe(x, ItemSource(src, i), skip_params)
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _observe(x, ItemSource(src, k), skip_params)


def dynamic_parts(src: Source, entry: dict | None, now: dict) -> list[Source]:
    """The frame-state sources (`SizeSource`s of a tensor, or the int's source) that `entry`
    marks `?`, for an input observed now as `now`."""
    if entry is None:
        return []
    parts = [SizeSource(src, d) for d in range(len(now["size"]))] if now["kind"] == "tensor" else [src]
    if entry["kind"] != now["kind"] or entry["kind"] == "any":
        return parts
    if now["kind"] == "int":
        return parts if entry["value"] == DYN else []
    size = entry["size"]
    if size == DYN:
        return parts
    return [p for p in parts if p.dim < len(size) and size[p.dim] == DYN]


def atom_at(entry: dict | None, part: Source):
    """What `entry` says about one frame-state source: an int, `?`, or None (unknown)."""
    if entry is None:
        return None
    if entry["kind"] == "any":
        return DYN
    if isinstance(part, SizeSource):
        size = entry.get("size")
        return size[part.dim] if isinstance(size, list) and part.dim < len(size) else DYN
    return entry.get("value")


def render_entry(e: dict) -> str:
    if e["kind"] == "int":
        return "fully dynamic scalar or tensor" if e["value"] == DYN else f"scalar {e['value']}"
    if e["kind"] == "tensor" and e["size"] != DYN:
        def tup(xs):
            return DYN if xs == DYN else "[" + ", ".join(str(x) for x in xs) + "]"
        return f"tensor size={tup(e['size'])} stride={tup(e['stride'])}"
    return "fully dynamic scalar or tensor"


def is_dynamic_entry(e: dict) -> bool:
    if e["kind"] == "any":
        return True
    if e["kind"] == "int":
        return e["value"] == DYN
    return e["size"] == DYN or DYN in e["size"]


# ---------------------------------------------------------------------------- profiles
@dataclass(frozen=True)
class FunctionId:
    file: str  # where it was first seen; not part of the identity (a job may move its code)
    line: int  # co_firstlineno
    name: str  # co_name
    hash: str  # crc32 of the function's source text

    @property
    def fid(self) -> str:
        return f"{self.hash}:{self.line}:{self.name}"


class Profile:
    """The profiles of one key: `functions[fid] = {"file", "line", "name", "hash", "sources"}`."""

    def __init__(self, key: str):
        self.key = key
        self.functions: dict[str, dict] = {}
        self.replaced: set[tuple[str, str]] = set()  # (fid, source) a dynamic=False compile overwrote
        self.dirty = False  # changed since last written
        self.generation = 0  # counts changes, so a write can tell whether it saw the latest

    def function(self, ident: FunctionId) -> dict:
        f = self.functions.get(ident.fid)
        if f is None:
            f = self.functions[ident.fid] = {"file": ident.file, "line": ident.line, "name": ident.name,
                                             "hash": ident.hash, "sources": {}}
        return f

    def sources(self, name: str) -> dict:
        """The sources of the (first) function called `name`: `{source name: entry}`."""
        for f in self.functions.values():
            if f["name"] == name:
                return f["sources"]
        raise KeyError(f"no function named {name!r} in the PGO profile {self.key!r}")

    def absorb(self, other: "Profile") -> bool:
        """Merge `other` into this profile (sources we overwrote keep our value); True if changed."""
        changed = False
        for fid, g in other.functions.items():
            f = self.functions.get(fid)
            if f is None:
                f = self.functions[fid] = {**{k: g[k] for k in ("file", "line", "name", "hash")}, "sources": {}}
            for name, e in g["sources"].items():
                if (fid, name) in self.replaced:
                    continue
                old = f["sources"].get(name)
                new = merge_entry(old, e)
                if new != old:
                    f["sources"][name] = new
                    changed = True
        return changed

    def copy(self) -> "Profile":
        p = Profile(self.key)
        p.functions = copy.deepcopy(self.functions)
        p.replaced = set(self.replaced)
        return p

    def dynamic_sources(self) -> list[str]:
        out: dict[str, None] = {}
        for f in self.functions.values():
            for name, e in f["sources"].items():
                if is_dynamic_entry(e):
                    out[name] = None
        return list(out)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, "key": self.key,
                           "functions": self.functions}, indent=1)

    @staticmethod
    def from_json(text: str | bytes) -> "Profile":
        """Parse and validate; raises ValueError (with the reason) for anything unexpected."""
        if len(text) > MAX_PROFILE_BYTES:
            raise ValueError(f"larger than {MAX_PROFILE_BYTES >> 20} MB")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"not valid JSON ({e})") from None
        except RecursionError:  # deeply nested garbage: json recurses per level
            raise ValueError("nested too deeply to be a profile") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a dynashape PGO profile")
        if data.get("version") != VERSION:
            raise ValueError(f"written in format version {data.get('version')!r}, "
                             f"this dynashape reads version {VERSION}")
        if not isinstance(data.get("key", ""), str):
            raise ValueError("'key' is not a string")
        p = Profile(data.get("key", ""))
        funcs = data.get("functions")
        if not isinstance(funcs, dict):
            raise ValueError("'functions' is not a mapping")
        for fid, f in funcs.items():
            _check_function(fid, f)
        p.functions = funcs
        return p

    def __repr__(self) -> str:
        return f"<PGO profile {self.key!r}: {len(self.functions)} functions>"


def _check_function(fid, f) -> None:
    ok = (isinstance(f, dict) and isinstance(f.get("file"), str) and type(f.get("line")) is int
          and isinstance(f.get("name"), str) and isinstance(f.get("hash"), str)
          and isinstance(f.get("sources"), dict))
    if not ok:
        raise ValueError(f"malformed function entry {fid!r}")
    for name, e in f["sources"].items():
        if not _valid_entry(e):
            raise ValueError(f"malformed entry for {name!r} in {fid!r}")


def _valid_atom(x) -> bool:
    return type(x) is int or x == DYN or (isinstance(x, str) and re.fullmatch(r"S\(\d+\)", x) is not None)


def _valid_entry(e) -> bool:
    if not isinstance(e, dict):
        return False
    kind = e.get("kind")
    if kind == "any":
        return True
    if kind == "int":
        return type(e.get("value")) is int or e.get("value") == DYN
    if kind == "tensor":
        return all(e.get(k) == DYN or (isinstance(e.get(k), list) and all(_valid_atom(x) for x in e[k]))
                   for k in ("size", "stride"))
    return False
