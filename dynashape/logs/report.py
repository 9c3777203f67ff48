"""Reading compile traces back: `load(dir)` parses every trace file in a directory into runs
(one per process or rank), functions and compiles, and `advice(...)` ranks what to do.

`python -m dynashape report dir -o out/` renders them as HTML (`report_html.py`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

_PREFIX = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ?[^:]*:\d+\] ")


@dataclass
class Compile:
    frame_id: int
    n: int  # the n-th compile of this function (0 = first)
    start: dict = field(default_factory=dict)  # the dynamo_start record
    metrics: dict = field(default_factory=dict)  # the compilation_metrics record
    symbols: list = field(default_factory=list)  # create_symbol / create_unbacked_symbol records
    guards_added: list = field(default_factory=list)  # guard_added_fast records
    specializations: list = field(default_factory=list)
    graph: str = ""
    code: str = ""
    guards: list = field(default_factory=list)  # the final guard list: [{"code", "user_stack", "why"}]
    guard_fn: str = ""
    artifacts: dict = field(default_factory=dict)  # name -> payload (parsed JSON or text)

    @property
    def reasons(self) -> list[str]:
        return self.start.get("reasons") or []

    @property
    def graph_break(self) -> dict | None:
        return self.artifacts.get("graph_break")

    @property
    def failed(self) -> bool:
        return bool(self.metrics.get("fail_type"))

    @property
    def seconds(self) -> float:
        return float(self.metrics.get("entire_frame_compile_time_s") or 0.0)

    @property
    def status(self) -> str:
        if self.graph_break is not None:
            return "graph break"
        if self.failed or not self.metrics:
            return "failed"
        return "recompile" if self.n else "compile"


@dataclass
class Function:
    frame_id: int
    name: str
    where: str
    compiles: list = field(default_factory=list)
    limit_hit: dict | None = None

    @property
    def key(self) -> str:
        return f"{self.name} ({self.where})"


@dataclass
class Run:
    """One trace file: one process (one rank)."""
    path: str
    meta: dict = field(default_factory=dict)  # the dynashape_run artifact
    end: dict = field(default_factory=dict)  # the dynashape_run_end artifact
    functions: dict = field(default_factory=dict)  # frame_id -> Function
    pgo: list = field(default_factory=list)  # (name, payload)
    strings: dict = field(default_factory=dict)
    bad_lines: int = 0

    @property
    def rank(self):
        return self.meta.get("rank")

    @property
    def label(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        return f"process {self.meta.get('pid', '?')}"

    @property
    def start_time(self) -> float:
        return float(self.meta.get("start") or 0.0)

    def all_compiles(self) -> list:
        return sorted((c for f in self.functions.values() for c in f.compiles),
                      key=lambda c: c.metrics.get("start_time") or 0.0)


# ---------------------------------------------------------------------------- parsing
def trace_files(directory: str) -> list[str]:
    if os.path.isfile(directory):
        return [directory]
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(".log") and os.path.isfile(os.path.join(directory, n)))


def load(directory: str) -> list[Run]:
    """Every trace file under `directory` (or one file), ranks first in rank order."""
    runs = [parse_file(p) for p in trace_files(directory)]
    runs = [r for r in runs if r.functions or r.meta]
    return sorted(runs, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.start_time))


def records(path: str):
    """(envelope, payload or None) for each record of a trace file; bad lines yield (None, None)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        m = _PREFIX.match(line)
        if m is None:
            yield None, None
            continue
        try:
            env = json.loads(line[m.end():])
        except ValueError:
            yield None, None
            continue
        payload = None
        if "has_payload" in env:
            body = []
            while i < len(lines) and lines[i].startswith("\t"):
                body.append(lines[i][1:])
                i += 1
            payload = "\n".join(body)
        yield env, payload


_KINDS = ("dynamo_start", "compilation_metrics", "create_symbol", "create_unbacked_symbol", "guard_added_fast",
          "symbolic_shape_specialization", "dynamo_output_graph", "dynamo_guards", "dynamo_cpp_guards_str",
          "artifact", "str")


def parse_file(path: str) -> Run:
    run = Run(path)
    compiles: dict = {}
    for env, payload in records(path):
        if env is None:
            run.bad_lines += 1
            continue
        kind = next((k for k in _KINDS if k in env), None)
        if kind is None:
            continue
        meta = env[kind]
        if kind == "str":
            run.strings[meta[1]] = meta[0]
            continue
        cid = (env["frame_id"], env["frame_compile_id"]) if "frame_id" in env else None
        if kind == "artifact":
            value = _decode(meta, payload)
            name = meta.get("name")
            if name == "dynashape_run":
                run.meta = value
            elif name == "dynashape_run_end":
                run.end = value
            elif name == "recompile_limit_hit":
                fn = _function(run, value.get("function", "?"), value.get("where", "?"), cid[0] if cid else -1)
                fn.limit_hit = value
            elif name in ("pgo_read", "pgo_write"):
                run.pgo.append((name, value))
            elif cid is not None:
                _compile(compiles, cid).artifacts[name] = value
            continue
        if cid is None:
            continue
        c = _compile(compiles, cid)
        if kind == "dynamo_start":
            c.start = meta
            _function(run, meta.get("function", "?"), meta.get("where", "?"), cid[0])
        elif kind == "compilation_metrics":
            c.metrics = meta
            _function(run, meta.get("function", meta.get("co_name", "?")), meta.get("where", "?"), cid[0])
        elif kind in ("create_symbol", "create_unbacked_symbol"):
            c.symbols.append(dict(meta, unbacked=kind == "create_unbacked_symbol"))
        elif kind == "guard_added_fast":
            c.guards_added.append(meta)
        elif kind == "symbolic_shape_specialization":
            c.specializations.append(meta)
        elif kind == "dynamo_output_graph":
            c.graph = payload or ""
        elif kind == "dynamo_guards":
            try:
                c.guards = json.loads(payload or "[]")
            except ValueError:
                c.guards = []
        elif kind == "dynamo_cpp_guards_str":
            c.guard_fn = payload or ""
    for (frame_id, _), c in sorted(compiles.items()):
        fn = run.functions.get(frame_id) or _function(run, "?", "?", frame_id)
        fn.compiles.append(c)
    return run


def _decode(meta, payload):
    if meta.get("encoding") == "json":
        try:
            return json.loads(payload or "null")
        except ValueError:
            return payload
    return payload or ""


def _compile(compiles, cid) -> Compile:
    c = compiles.get(cid)
    if c is None:
        c = compiles[cid] = Compile(cid[0], cid[1])
    return c


def _function(run, name, where, frame_id) -> Function:
    fn = run.functions.get(frame_id)
    if fn is None:
        fn = run.functions[frame_id] = Function(frame_id, name, where)
    elif fn.name == "?":
        fn.name, fn.where = name, where
    return fn


def frame_text(run: Run, frame: dict | None) -> tuple[str, int, str, str]:
    """(filename, line, function, code) of a stack frame record."""
    if not frame:
        return "", 0, "", ""
    fn = run.strings.get(frame.get("filename"), "?")
    return fn, int(frame.get("line") or 0), frame.get("name") or "", frame.get("loc") or ""


def innermost(stack) -> dict | None:
    return stack[-1] if stack else None


# ---------------------------------------------------------------------------- reasons
@dataclass
class Reason:
    text: str  # the whole reason, in our words
    guard: str  # the check that failed
    added_at: str = ""  # `model.py:12 'if x.size(0) > 2:'`, when a user line created the guard
    fix: str = ""  # what to do, in words
    snippets: list = field(default_factory=list)  # code to paste
    source: str = ""  # the source that changed: `L['x'].size()[0]`


_SIZE = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\S+), actual (\S+)")


def parse_reason(text: str) -> Reason:
    """Split one recompile reason (runtime/compile.py's words) into guard, user line and fix."""
    parts = text.split("; ")
    r = Reason(text, parts[0])
    fixes = []
    for p in parts[1:]:
        if p.startswith("added at ") or p.startswith("guard added at "):
            r.added_at = p.split("added at ", 1)[1]
        else:
            fixes.append(p)
    m = _SIZE.match(parts[0])
    if m:
        name, dim = m.group(1), int(m.group(2))
        base = _base_source(name)
        r.source = f"{base}.size()[{dim}]"
        r.snippets = [f"ds.mark_dynamic({name}, {dim})", f'DYNASHAPE_DYNAMIC_SOURCES="{base}"']
        if not fixes:
            fixes.append(f"to compile this dynamically from the start, call ds.mark_dynamic({name}, {dim}) "
                         f'or set DYNASHAPE_DYNAMIC_SOURCES="{base}"')
    else:
        m = re.match(r"(L\[[^\]]+\](?:\.\w+)*(?:\.size\(\)\[\d+\])?)", parts[0])
        if m:
            r.source = m.group(1)
        if r.added_at:
            fixes.append(f"the guard comes from a decision on a size at {r.added_at}: each outcome needs its own "
                         f"graph. If it flips often, compute both sides (torch.where) or move the branch out of "
                         f"the compiled function; marking the size dynamic does not remove a branch")
    r.fix = "; ".join(fixes)
    return r


def _base_source(pretty: str) -> str:
    parts = pretty.split(".")
    return f"L['{parts[0]}']" + "".join(f".{p}" for p in parts[1:])


# ---------------------------------------------------------------------------- analysis
def dims_seen(fn: Function) -> dict:
    """source name -> values seen at each compile, in order: `L['x'].size()[0]` -> [2, 3, 5]."""
    out: dict = {}
    for c in fn.compiles:
        for src, v in (c.start.get("inputs") or {}).items():
            if isinstance(v, list):
                for d, s in enumerate(v):
                    out.setdefault(f"{src}.size()[{d}]", []).append(s)
            else:
                out.setdefault(src, []).append(v)
    return out


def symbol_table(run: Run, fn: Function) -> list[dict]:
    """One row per input source: dynamic or static and why, symbols, ranges, where specialized."""
    last = next((c for c in reversed(fn.compiles) if c.metrics), None)
    why = (last.metrics.get("dynamic_sources") or {}) if last else {}
    rows: dict = {}
    for src, values in dims_seen(fn).items():
        rows[src] = {"source": src, "values": values, "dynamic": src in why, "why": why.get(src, ""),
                     "symbol": "", "range": "", "created": None, "specialized": []}
    for c in fn.compiles:
        for s in c.symbols:
            src = s.get("source") or s.get("description") or s.get("symbol")
            row = rows.setdefault(src, {"source": src, "values": [], "dynamic": True, "why": why.get(src, ""),
                                        "symbol": "", "range": "", "created": None, "specialized": []})
            row["symbol"], row["range"] = s.get("symbol", ""), s.get("vr", "")
            row["kind"] = s.get("kind") or ("UNBACKED" if s.get("unbacked") else "")
            row["created"] = innermost(s.get("user_stack"))
        for sp in c.specializations:
            for src in sp.get("sources") or []:
                if src in rows:
                    rows[src]["specialized"].append((c.n, sp.get("value"), innermost(sp.get("user_stack"))))
    for row in rows.values():
        if not row["why"]:
            if row["dynamic"]:
                row["why"] = "dynamic"
            elif row["specialized"]:
                row["why"] = "specialized by the code"
            elif len(set(map(str, row["values"]))) > 1:
                row["why"] = "changed, but recompiled static (dynamic=False, or a guard on its value)"
            else:
                row["why"] = "static: one value seen (automatic dynamic makes it dynamic once it changes)"
    return list(rows.values())


@dataclass
class Advice:
    cost: float  # seconds of compile time it would save (or a rank for what has no time)
    title: str
    detail: str
    snippets: list = field(default_factory=list)
    where: str = ""  # which run/function


def advice(runs: list[Run]) -> list[Advice]:
    """What to do, most costly first."""
    out = []
    for run in runs:
        tag = run.label if len(runs) > 1 else ""
        for fn in run.functions.values():
            where = f"{fn.key}" + (f" on {tag}" if tag else "")
            by_source: dict = {}
            for c in fn.compiles:
                for text in c.reasons:
                    r = parse_reason(text)
                    key = r.source or r.guard
                    entry = by_source.setdefault(key, {"n": 0, "cost": 0.0, "reason": r})
                    entry["n"] += 1
                    entry["cost"] += c.seconds
            seen = dims_seen(fn)
            for key, e in by_source.items():
                r = e["reason"]
                values = sorted(set(map(str, seen.get(key, []))), key=_num)
                took = f"took {len(values)} values ({', '.join(values[:8])}{'…' if len(values) > 8 else ''}) and " \
                    if values else ""
                if r.snippets:
                    title = f"{key} {took}recompiled {fn.name} {e['n']} time(s): mark it dynamic"
                else:
                    title = f"{r.guard}: recompiled {fn.name} {e['n']} time(s)"
                out.append(Advice(e["cost"], title, r.fix, r.snippets, where))
            if fn.limit_hit:
                out.append(Advice(1e6, f"{fn.name} hit the recompile limit and runs eagerly from then on",
                                  fn.limit_hit.get("message", ""), [], where))
            for c in fn.compiles:
                gb = c.graph_break
                if gb:
                    out.append(Advice(1e5 + c.seconds, f"graph break in {fn.name}: it runs eagerly",
                                      gb.get("detail") or gb.get("reason", ""), [], where))
                for fb in c.metrics.get("fallbacks") or []:
                    out.append(Advice(c.seconds / 10, f"an op without a symbolic rule specialized sizes in {fn.name}",
                                      fb, [], where))
    ranked = [r for r in runs if r.rank is not None]
    if len(ranked) > 1:  # ranks that compiled a function differently wait on each other at run time
        counts: dict = {}
        for r in ranked:
            for fn in r.functions.values():
                counts.setdefault(fn.key, {})[r.label] = (len(fn.compiles), sum(c.seconds for c in fn.compiles))
        for key, per in counts.items():
            if len({n for n, _ in per.values()}) > 1 or len(per) < len(ranked):
                seen = ", ".join(f"{n} on {label}" for label, (n, _) in per.items())
                out.append(Advice(max(t for _, t in per.values()), f"ranks compiled {key} differently ({seen})",
                                  "a rank that recompiles alone makes the others wait for it; with "
                                  "compiler collectives every rank compiles the same graphs at the same time",
                                  ["ds.config.enable_compiler_collectives = True"], "across ranks"))
    out.sort(key=lambda a: -a.cost)
    return out


def _num(s):
    try:
        return (0, float(s))
    except ValueError:
        return (1, s)


def user_line_context(filename: str, line: int, around: int = 2) -> list[tuple[int, str]]:
    """The user's source around `line`, read now (empty when the file is not here)."""
    import linecache
    if not filename or not line:
        return []
    out = []
    for n in range(max(1, line - around), line + around + 1):
        text = linecache.getline(filename, n)
        if text:
            out.append((n, text.rstrip("\n")))
    return out
