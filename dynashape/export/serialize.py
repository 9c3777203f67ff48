"""`ds.save(ep, path)` / `ds.load(path)`: an ExportedProgram as a versioned zip file.

The zip holds `program.json` (format name and version, the signature, the
input contract, the symbols and their ranges, the input checks, the resolved
spec, and the graph: nodes with targets by qualified name, node references,
symbolic expressions as strings, tagged constants) and `state.pt` (the
tensors, through `torch.save`, read back with `torch.load(weights_only=True)`).

Loading never runs code from the file: expressions are parsed by a small
reader that knows only arithmetic, comparisons and the shape functions; call
targets are looked up by name in torch's operator namespaces (`torch.*`,
`torch.Tensor.*`, `torch.nn.functional.*`, `torch.special/linalg/fft.*`) and
a few of `operator`/`math`, and anything else is refused. Every problem with
the file raises `LoadError` (a ValueError) saying what is wrong.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile

import torch

from ..ir.graph import Graph, TensorMeta
from ..symbolic.sources import ItemSource, LocalSource, Source
from ..symbolic.userloc import Location
from .allowlist import LoadError, SaveError, make_symbols, parse_expr, resolve_target, symbol_kind, target_label
from . import outtypes
from .codec import Decoder, Encoder, as_int, as_list, as_obj, as_str, torch_attr, want
from .dims import DerivedDim, Dim, DimHint
from .program import (STATE, Check, ConstSpec, DictSpec, ExportedProgram, GlobalSpec, SeqSpec, SignatureSpec,
                      SymbolInfo, SymIntSpec, TensorSpec, flag_getter)

FORMAT = "dynashape.ExportedProgram"
FORMAT_VERSION = 2  # 2: layouts, requires_grad, grad mode, default dtype and flags checked (1 lacks them)
_PROGRAM, _STATE = "program.json", "state.pt"
MAX_PROGRAM_BYTES = 8 << 20  # program.json: ~20k graph nodes; parsed JSON may take ~20x its size in memory
MAX_PROGRAM_CONTAINERS = 1 << 20  # ~60 MB parsed; a graph node uses about ten
MAX_COMPRESSED_STATE_BYTES = 64 << 20  # state.pt as save writes it is stored, bounded by the file size itself
# the properties of a caller's tensor a program may check (tracing/tensor_attrs.py reads them as input facts)
_FACTS = frozenset({"is_leaf", "output_nr", "retains_grad", "_is_view", "is_inference", "is_conj", "is_neg",
                    "is_pinned", "is_shared", "grad_dtype", "name", "names"})


# ============================================================================ saving
def save(ep: ExportedProgram, path) -> None:
    """Write `ep` to `path` (a file name or a binary file object) in the versioned zip format."""
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"save takes an ExportedProgram, got {type(ep).__name__}")
    enc = Encoder()
    doc = {"format": FORMAT, "version": FORMAT_VERSION, "name": ep.name}
    doc["signature"] = [[n, k, d, enc.value(v, f"the default of {n}")] for n, k, d, v in ep.signature_spec.params]
    doc["inputs"] = [[k, _enc_input(enc, s, k)] for k, s in ep.inputs.items()]
    doc["ranges"] = {str(s): {"lo": i.lo, "hi": i.hi, "dim": i.dim} for s, i in ep.symbols.items()}
    for s in ep.symbols:
        enc.symbols[str(s)] = symbol_kind(s)
    doc["data_ranges"] = {k: [_enc_bound(lo), _enc_bound(hi)] for k, (lo, hi) in ep.data_ranges.items()}
    doc["checks"] = [{"expr": enc.expr(c.expr), "text": c.text, "kind": c.kind, "location": _enc_loc(c.location)}
                     for c in ep.checks]
    doc["dynamic_shapes"] = _enc_spec(ep.dynamic_shapes)
    doc["graph"] = _enc_graph(enc, ep.graph)
    doc["out_types"] = outtypes.encode(ep.out_types)
    doc["parameters"] = {k: bool(t.requires_grad) for k, t in ep.state_dict.items()
                         if isinstance(t, torch.nn.Parameter)}
    doc["requires_grad"] = sorted(k for k, t in ep.state_dict.items()  # captured tensors that require grad
                                  if t.requires_grad and not isinstance(t, torch.nn.Parameter))
    doc["globals"] = _enc_globals(enc, ep)
    doc["symbols"] = enc.symbols
    buf = io.BytesIO()
    torch.save({k: t.detach() for k, t in ep.state_dict.items()}, buf)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(_PROGRAM, json.dumps(doc, separators=(",", ":"), allow_nan=False))
        z.writestr(_STATE, buf.getvalue(), compress_type=zipfile.ZIP_STORED)


def _enc_globals(enc: Encoder, ep: ExportedProgram) -> dict:
    """The global state the program checks, and the grad mode its code starts from."""
    g = ep.global_spec
    if g is None:
        raise SaveError("the program records no global state to check (it was not made by ds.export)")
    return {"default_dtype": str(g.default_dtype).replace("torch.", ""), "grad_enabled": g.grad_enabled,
            "grad_read_at": g.grad_read_at, "flags": [[k, enc.value(v, k)] for k, v in g.flags.items()],
            "entry_grad": ep.graph.entry_grad, "exit_grad": ep.graph.exit_grad}


def _dec_globals(dec: Decoder, j, graph: Graph) -> GlobalSpec:
    j = as_obj(j, "globals")
    flags = {}
    for kv in as_list(j.get("flags", []), "flags"):
        want(isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str), "bad flag")
        want(flag_getter(kv[0]) is not None, f"the program checks an unknown setting {kv[0]!r:.80}")
        flags[kv[0]] = dec.value(kv[1], "a flag")
    for k in ("grad_enabled", "entry_grad", "exit_grad"):
        want(j.get(k) is None or isinstance(j.get(k), bool), f"bad {k}")
    at = j.get("grad_read_at")
    want(at is None or isinstance(at, str), "bad grad_read_at")
    graph.entry_grad, graph.exit_grad = j.get("entry_grad"), j.get("exit_grad")
    return GlobalSpec(torch_attr(j.get("default_dtype"), torch.dtype, "the default dtype"), j.get("grad_enabled"),
                      at and at[:300], flags)


def _enc_bound(v):
    return None if isinstance(v, float) else v  # +-inf


def _dec_data_ranges(j) -> dict:
    out = {}
    for name, b in as_obj(j or {}, "data_ranges").items():
        want(isinstance(name, str) and re.fullmatch(r"u\d{1,9}", name) is not None, "bad data range name")
        want(isinstance(b, list) and len(b) == 2 and all(x is None or type(x) is int for x in b), "bad data range")
        out[name] = (-math.inf if b[0] is None else b[0], math.inf if b[1] is None else b[1])
    return out


def _enc_loc(loc: Location | None):
    return None if loc is None else [loc.filename, loc.lineno, loc.function, loc.code]


def _enc_input(enc: Encoder, spec, where):
    if isinstance(spec, TensorSpec):
        j = {"dtype": str(spec.dtype).replace("torch.", ""),
             "dims": [d if isinstance(d, int) else enc.expr(d) for d in spec.dims]}
        if spec.strides is not None:
            j["strides"] = spec.strides if isinstance(spec.strides, str) else \
                [d if isinstance(d, int) else enc.expr(d) for d in spec.strides]
        if spec.storage_offset is not None:
            j["storage_offset"] = spec.storage_offset
        if spec.requires_grad is not None:
            j["requires_grad"] = spec.requires_grad
        if spec.facts:
            j["facts"] = [[k, enc.value(v, f"the input {where}")] for k, v in spec.facts.items()]
        return {"tensor": j}
    if isinstance(spec, SymIntSpec):
        return {"symint": enc.expr(spec.expr)}
    if isinstance(spec, ConstSpec):
        return {"const": enc.value(spec.value, f"the input {where}")}
    if isinstance(spec, SeqSpec):
        return {"seq": spec.type.__name__, "items": [_enc_input(enc, s, where) for s in spec.items]}
    if isinstance(spec, DictSpec):
        return {"dict": [[k, _enc_input(enc, s, where)] for k, s in spec.items.items()]}
    raise SaveError(f"the input {where} cannot be saved")


def _enc_spec(spec):
    if spec is None or isinstance(spec, int):
        return spec
    if isinstance(spec, DimHint):
        return {"hint": spec.kind, "min": spec.min, "max": spec.max}
    if isinstance(spec, DerivedDim):
        return {"derived": _enc_spec(spec.root), "coeff": spec.coeff, "offset": spec.offset}
    if isinstance(spec, Dim):
        return {"dim": spec.name, "min": spec._min, "max": spec._max}
    if isinstance(spec, (tuple, list)):
        return {"tuple" if isinstance(spec, tuple) else "list": [_enc_spec(s) for s in spec]}
    if isinstance(spec, dict):
        return {"dict": [[k, _enc_spec(s)] for k, s in spec.items()]}
    raise SaveError(f"cannot save the spec {spec!r}")


def _enc_graph(enc: Encoder, g: Graph) -> list:
    out = []
    for n in g.nodes:
        where = f"node %{n.name}"
        j = {"kind": n.kind, "name": n.name}
        if n.kind == "input":
            j["source"] = _source_path(n.target, where)
            j["meta"] = enc.meta(n.meta, where)
        elif n.kind == "symbol":
            of, how, index = n.args
            enc.symbols[str(n.target)] = symbol_kind(n.target)
            j.update(symbol=str(n.target), of=of.name, how=how, index=list(index) if isinstance(index, tuple)
                     else index)
        elif n.kind == "call":
            j.update(target=target_label(n), args=enc.value(tuple(n.args), where),
                     kwargs=enc.value(dict(n.kwargs), where), meta=enc.meta(n.meta, where),
                     grad_enabled=bool(n.grad_enabled), location=_enc_loc(n.location))
            if n.modes is not None:  # inference mode / autocast inside the program
                j["modes"] = enc.value(n.modes, where)
        elif n.kind == "output":
            j["value"] = enc.value(n.args[0], where)
        else:
            raise SaveError(f"{where}: a {n.kind} node (a captured object) cannot be saved")
        out.append(j)
    return out


def _source_path(src: Source, where) -> list:
    path = []
    while isinstance(src, ItemSource):
        path.append(src.index)
        src = src.base
    if not isinstance(src, LocalSource) or not all(isinstance(k, (str, int)) for k in path):
        raise SaveError(f"{where}: reads {src.name()}, which cannot be saved")
    return [src.local] + path[::-1]


# ============================================================================ loading
def load(path) -> ExportedProgram:
    """Read an ExportedProgram written by `save`. Raises LoadError for anything but a valid file."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
        raise FileNotFoundError(f"no such file: {os.fspath(path)!r}")
    try:
        return _load(path)
    except LoadError as e:
        raise LoadError(f"cannot load {_name(path)}: {e}") from None
    except Exception as e:  # zip, json, torch.load or sympy errors on a damaged file
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        raise LoadError(f"cannot load {_name(path)}: the file is damaged or not an exported program "
                        f"({type(e).__name__}{': ' + msg if msg else ''})") from None


def _name(path) -> str:
    return repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "the file"


def _load(path) -> ExportedProgram:
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        want(_PROGRAM in names and _STATE in names, f"it has no {_PROGRAM} and {_STATE}")
        raw = _read_member(z, _PROGRAM, MAX_PROGRAM_BYTES)
        # parsed, each JSON list or object costs ~60 bytes however short its text: bound their number
        want(raw.count(b"[") + raw.count(b"{") <= MAX_PROGRAM_CONTAINERS,
             f"program.json nests more than {MAX_PROGRAM_CONTAINERS} lists and objects")
        doc = as_obj(json.loads(raw.decode("utf-8")), "program.json")
        fmt, version = doc.get("format"), doc.get("version")
        if fmt != FORMAT:
            raise LoadError(f"it is not a dynashape exported program (format {fmt!r:.60})")
        if version == 1:
            raise LoadError("it was written in format version 1, by a dynashape whose programs did not check "
                            "the inputs' layouts, requires_grad and the grad mode; export the program again "
                            "and save it")
        if version != FORMAT_VERSION:
            raise LoadError(f"it was written in format version {version!r:.20}; this dynashape reads version "
                            f"{FORMAT_VERSION}")
        state = torch.load(io.BytesIO(_read_member(z, _STATE, MAX_COMPRESSED_STATE_BYTES)), weights_only=True)
    symbols = make_symbols(doc.get("symbols"))
    dec = Decoder(symbols, {})
    graph = _dec_graph(dec, as_list(doc.get("graph"), "graph"))
    state = _dec_state(state, doc, graph)
    params = [_dec_param(dec, p) for p in as_list(doc.get("signature"), "signature")]
    inputs = {}
    for kv in as_list(doc.get("inputs"), "inputs"):
        want(isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str), "bad input entry")
        inputs[kv[0]] = _dec_input(dec, kv[1])
    ranges = {}
    for name, r in as_obj(doc.get("ranges"), "ranges").items():
        want(name in symbols, f"range of an unknown symbol {name!r:.40}")
        r = as_obj(r, "range")
        lo, hi, dim = r.get("lo"), r.get("hi"), r.get("dim")
        want(all(x is None or isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi))
              and (dim is None or isinstance(dim, str)), "bad range")
        ranges[symbols[name]] = SymbolInfo(lo, hi, symbol_kind(symbols[name]), dim)
    checks = []
    for c in as_list(doc.get("checks"), "checks"):
        c = as_obj(c, "check")
        want(c.get("kind") in ("guard", "assert"), "bad check kind")
        checks.append(Check(dec.expr(c.get("expr")), as_str(c.get("text"), "check text"), _dec_loc(c.get("location")),
                            c["kind"]))
    try:
        graph.lint()
    except AssertionError as e:
        raise LoadError(f"the graph is inconsistent: {e}") from None
    dyn = _dec_spec(doc.get("dynamic_shapes"), {})
    name = as_str(doc.get("name", "forward"), "name")
    global_spec = _dec_globals(dec, doc.get("globals"), graph)
    return ExportedProgram(graph=graph, signature=SignatureSpec(params), inputs=inputs, symbols=ranges,
                           checks=checks, state=state, dynamic_shapes=dyn, name=name,
                           data_ranges=_dec_data_ranges(doc.get("data_ranges")),
                           out_types=outtypes.decode(doc.get("out_types")), global_spec=global_spec)


def _read_member(z: zipfile.ZipFile, name: str, cap: int) -> bytes:
    """A member's bytes, never inflating more than it may hold: a compressed member at most `cap`
    bytes, a stored one at most its own size in the file; checked against the declared size
    before reading and against the bytes actually streamed (the header may lie)."""
    info = z.getinfo(name)
    limit = info.compress_size if info.compress_type == zipfile.ZIP_STORED else cap
    if info.file_size > limit:
        raise LoadError(f"{name} would inflate to {info.file_size} bytes, more than the {limit} accepted "
                        f"(a zip bomb, or not a file ds.save wrote)")
    out = bytearray()
    with z.open(info) as f:
        while True:
            chunk = f.read(min(1 << 20, limit + 1 - len(out)))
            if not chunk:
                break
            out += chunk
            if len(out) > limit:
                raise LoadError(f"{name} inflates past {limit} bytes, more than its header declares")
    return bytes(out)


def _dec_param(dec, p):
    want(isinstance(p, list) and len(p) == 4 and isinstance(p[0], str) and p[0].isidentifier()
          and isinstance(p[1], int) and 0 <= p[1] <= 4 and isinstance(p[2], bool), "bad signature entry")
    return (p[0], p[1], p[2], dec.value(p[3], "a default"))


def _dec_loc(j):
    if j is None:
        return None
    want(isinstance(j, list) and len(j) == 4 and isinstance(j[1], int), "bad location")
    clean = [("".join(ch if ch.isprintable() else "?" for ch in x)[:300] if isinstance(x, str) else "?")
             for x in (j[0], j[2], j[3])]
    return Location(clean[0], j[1], clean[1], clean[2])


def _dec_source(path, what) -> Source:
    want(isinstance(path, list) and path and isinstance(path[0], str), f"{what}: bad source")
    src: Source = LocalSource(path[0])
    for k in path[1:]:
        want(isinstance(k, (str, int)) and not isinstance(k, bool), f"{what}: bad source")
        src = ItemSource(src, k)
    return src


def _dec_graph(dec: Decoder, nodes: list) -> Graph:
    g = Graph()
    for j in nodes:
        j = as_obj(j, "a node")
        kind, name = j.get("kind"), j.get("name")
        want(isinstance(name, str) and name.isidentifier() and name not in dec.nodes, f"bad node name {name!r:.40}")
        what = f"node %{name}"
        if kind == "input":
            n = g.input(_dec_source(j.get("source"), what), dec.meta(j.get("meta"), what), name)
        elif kind == "symbol":
            sym = dec.symbols.get(j.get("symbol"))
            of = dec.nodes.get(j.get("of"))
            how, index = j.get("how"), j.get("index")
            want(sym is not None and of is not None, f"{what}: bad symbol binding")
            want(how in ("size", "stride", "affine", "item", "value", "index"),
                  f"{what} binds its symbol by {how!r:.20}")
            if isinstance(index, list):  # (dim, a, b) of an affine binding, the path of an `index` one
                want(all(isinstance(x, int) and not isinstance(x, bool) for x in index), f"{what}: bad index")
                index = tuple(index)
            else:
                want(index is None or isinstance(index, int) and not isinstance(index, bool), f"{what}: bad index")
            want(how not in ("size", "stride") or isinstance(index, int), f"{what}: bad size binding")
            want(how != "affine" or isinstance(index, tuple) and len(index) == 3 and index[1] != 0,
                  f"{what}: bad affine binding")
            n = g.symbol(sym, of, how, index)
            want(n.name == str(sym), f"{what}: the symbol's name is taken")
        elif kind == "call":
            target = resolve_target(j.get("target"))
            args = dec.value(j.get("args"), what)
            kwargs = dec.value(j.get("kwargs"), what)
            want(isinstance(args, tuple) and isinstance(kwargs, dict), f"{what}: bad arguments")
            want(all(isinstance(k, str) and k.isidentifier() and not k.startswith("__") for k in kwargs),
                  f"{what}: bad keyword argument names")
            grad = j.get("grad_enabled")
            want(isinstance(grad, bool), f"{what}: bad grad mode")
            modes = dec.value(j["modes"], what) if "modes" in j else None
            want(modes is None or (isinstance(modes, tuple) and len(modes) == 2 and isinstance(modes[0], bool)),
                 f"{what}: bad modes")
            n = g.call(target, args, kwargs, dec.meta(j.get("meta"), what), _dec_loc(j.get("location")), grad,
                       name_hint=name, modes=modes)
        elif kind == "output":
            n = g.output(dec.value(j.get("value"), what))
        else:
            raise LoadError(f"malformed file: {what} has the unknown kind {kind!r:.20}")
        dec.nodes[name] = n
    return g


def _dec_input(dec: Decoder, j):
    j = as_obj(j, "an input")
    if "tensor" in j:
        t = as_obj(j["tensor"], "a tensor input")
        dims = tuple(d if isinstance(d, int) and not isinstance(d, bool) else dec.expr(d)
                     for d in as_list(t.get("dims"), "dims"))
        strides = t.get("strides")
        if strides is not None and strides != "canonical":
            want(isinstance(strides, list) and len(strides) == len(dims), "a tensor input: bad strides")
            strides = tuple(d if isinstance(d, int) and not isinstance(d, bool) else dec.expr(d) for d in strides)
        offset, rg = t.get("storage_offset"), t.get("requires_grad")
        want(offset is None or isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0,
             "a tensor input: bad storage offset")
        want(rg is None or isinstance(rg, bool), "a tensor input: bad requires_grad")
        facts = {}
        for kv in as_list(t.get("facts", []), "facts"):
            want(isinstance(kv, list) and len(kv) == 2 and kv[0] in _FACTS, "a tensor input: bad fact")
            facts[kv[0]] = dec.value(kv[1], "a fact")
        return TensorSpec(torch_attr(t.get("dtype"), torch.dtype, "a tensor input"), dims, strides, offset, rg,
                          facts or None)
    if "symint" in j:
        return SymIntSpec(dec.expr(j["symint"]))
    if "const" in j:
        return ConstSpec(dec.value(j["const"], "a constant input"))
    if "seq" in j:
        want(j["seq"] in ("tuple", "list"), "bad sequence input")
        return SeqSpec(tuple if j["seq"] == "tuple" else list, [_dec_input(dec, x) for x in as_list(j.get("items"),
                                                                                                  "items")])
    if "dict" in j:
        items = {}
        for kv in as_list(j["dict"], "a dict input"):
            want(isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], (str, int)), "bad dict input")
            items[kv[0]] = _dec_input(dec, kv[1])
        return DictSpec(items)
    raise LoadError("malformed file: an input of unknown kind")


def _dec_state(state, doc, graph: Graph) -> dict:
    want(isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                          for k, v in state.items()), "state.pt is not a dict of tensors")
    params = as_obj(doc.get("parameters", {}), "parameters")
    grads = doc.get("requires_grad", [])
    want(isinstance(grads, list) and all(isinstance(k, str) for k in grads), "requires_grad is not a list of names")
    out = {}
    for k, t in state.items():
        rg = params.get(k)
        out[k] = torch.nn.Parameter(t, requires_grad=rg) if isinstance(rg, bool) else \
            t.requires_grad_(True) if k in grads and t.is_floating_point() else t
    for n in graph.nodes:  # every state input the graph reads is there, with its shape and dtype
        if n.kind == "input" and isinstance(n.target, ItemSource) and isinstance(n.target.base, LocalSource) \
                and n.target.base.local == STATE:
            t = out.get(n.target.index)
            want(t is not None, f"state.pt has no tensor {n.target.index!r:.60}")
            if isinstance(n.meta, TensorMeta):
                want(tuple(t.shape) == tuple(n.meta.shape) and t.dtype == n.meta.dtype,
                      f"the state tensor {n.target.index!r:.60} has shape {tuple(t.shape)} and dtype {t.dtype}, "
                      f"but the graph expects {tuple(n.meta.shape)} and {n.meta.dtype}")
    return out


def _dec_spec(j, roots: dict):
    if j is None or isinstance(j, int) and not isinstance(j, bool):
        return j
    j = as_obj(j, "dynamic_shapes")
    if "hint" in j:
        want(j["hint"] in ("AUTO", "STATIC", "DYNAMIC"), "bad dim hint")
        h = getattr(Dim, j["hint"])
        return h(min=j.get("min"), max=j.get("max")) if (j.get("min"), j.get("max")) != (None, None) else h
    if "dim" in j:
        key = (j["dim"], j.get("min"), j.get("max"))
        if key not in roots:
            roots[key] = Dim(j["dim"], min=j.get("min"), max=j.get("max"))
        return roots[key]
    if "derived" in j:
        root = _dec_spec(j["derived"], roots)
        want(type(root) is Dim, "bad derived dim")
        return root * as_int(j.get("coeff"), "coeff") + as_int(j.get("offset"), "offset")
    for tag in ("tuple", "list"):
        if tag in j:
            items = [_dec_spec(x, roots) for x in as_list(j[tag], "dynamic_shapes")]
            return tuple(items) if tag == "tuple" else items
    if "dict" in j:
        return {kv[0]: _dec_spec(kv[1], roots) for kv in as_list(j["dict"], "dynamic_shapes")
                if isinstance(kv, list) and len(kv) == 2}
    raise LoadError("malformed file: bad dynamic_shapes entry")


__all__ = ["FORMAT_VERSION", "LoadError", "SaveError", "load", "save", "parse_expr", "resolve_target"]
