"""The structured compile trace: `DYNASHAPE_TRACE=dir` (or `ds.config.trace_dir = "dir"`).

One file per process (and rank) of records in the line format `tlparse` reads:

    V1123 10:56:30.123456 4242 dynashape/logs/trace.py:0] {"dynamo_start": {...}, "frame_id": 0, ...}
    <TAB>payload line 1
    <TAB>payload line 2

a glog-style prefix, one JSON object whose single record key names the kind,
the compile id (`frame_id` = which compiled function, `frame_compile_id` = its
n-th compile), `has_payload` = the md5 of the payload, which follows on
tab-indented lines. Records (tlparse renders the first eight; the others go to
its raw.jsonl and to `python -m dynashape report`):

| kind | when |
|---|---|
| `str` | a file name is interned (stacks refer to it by number) |
| `dynamo_start` | a compile starts: user stack, function, trigger, recompile reasons, input shapes |
| `guard_added_fast` | a shape guard is recorded: expression, user line and stack |
| `symbolic_shape_specialization` | a symbol became a constant (`Eq(s0, 4)`), with the line |
| `dynamo_output_graph` | the graph, printed with symbolic shapes (payload) |
| `dynamo_guards` | the entry's final guard list (JSON payload) |
| `dynamo_cpp_guards_str` | the generated guard function (payload) |
| `artifact` | `recompile_reasons`, `generated_code`, `graph_break`, `data_dependent_error`, `recompile_limit_hit`, `pgo_read`, `pgo_write`, `fused_kernel_cache_hit/miss`, `dynashape_run`, `dynashape_run_end`, `trace_error` |
| `compilation_metrics` | a compile ends: counts, per-phase times, failure, dynamic sources and why |
| `create_symbol`, `create_unbacked_symbol` | a symbol is created: source, hint, range, user line |

Off (no directory), every hook is one flag check. On, a compile only queues its
records as data; a daemon thread formats them (JSON, md5, the printed graph) and
writes them after the compile returns, and the queue is flushed at exit
(`writer().flush()` writes it now). bench/trace_overhead.py measures both costs.
"""
from __future__ import annotations

import atexit
import collections
import functools
import hashlib
import json
import linecache
import os
import sys
import threading
import time
import weakref

import torch

from ..symbolic import tracehook
from ..symbolic.ranges import int_oo
from ..symbolic.userloc import is_internal

FILE_PREFIX = "dedicated_log_torch_trace_"  # the name tlparse --all-ranks-html looks for
_SITE = "dynashape/logs/trace.py:0]"


class _Compile:
    """A compile in progress."""

    def __init__(self, cf, frame_id, n, stack):
        self.cf = cf
        self.cid = (frame_id, n)
        self.start = time.time()
        self.t0 = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}
        self.stack = stack  # the user's frames down to the compiled function's def (dicts)
        self.symbols = 0
        self.guards = 0
        self.reasons: list[str] = []
        self.fail: tuple | None = None  # (type, reason, filename, lineno)

    def lap(self, name):
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + (now - self.last)
        self.last = now


class Writer:
    """One trace file for this process; records go through `record()`."""

    def __init__(self):
        self.f = None
        self.path = None
        self.pid = None
        self.rank = None
        self.strings: dict[str, int] = {}
        self.compiles: list[_Compile] = []
        self.frames: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # cf -> [frame_id, compiles]
        self.next_frame = 0
        self.pending: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # cf -> recompile reasons
        self.limit_hits: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # cf -> count
        self.started = time.time()  # ~ the process start: dynashape is being imported
        self.compile_s = 0.0
        self._stamp = (None, "")
        # Records are queued as data and formatted (JSON, md5, payload text such as the printed
        # graph) by a daemon thread after the compile returns, so a compile pays only for queueing.
        self.queue: collections.deque = collections.deque()  # (time, envelope, payload or thunk)
        self.lock = threading.RLock()
        self.dir = None  # the directory of the open file
        self.wake = threading.Event()
        self.thread = None
        self.ended = None  # the file whose run summary is written
        self.idents: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # cf -> _ident()
        self.internal: dict = {}  # filename -> is it dynashape's, torch's...
        self.frame_cache: dict = {}  # (code, line) -> frame record (its file interned in this file)

    # ------------------------------------------------------------------ the file
    def _file(self):
        pid = os.getpid()
        if self.f is not None and self.pid == pid and (self.dir == tracehook.directory or not tracehook.directory):
            return self.f  # (tracing just turned off: what is left, such as the run summary, goes here)
        with self.lock:
            return self._open(pid)

    def _open(self, pid):
        if self.f is not None and self.pid == pid:
            self._drain()  # what was queued belongs to the old file
            self.f.close()
        directory = self.dir = tracehook.directory
        os.makedirs(directory, exist_ok=True)
        self.rank = _rank()
        rank = "" if self.rank is None else f"rank_{self.rank}_"
        stamp = time.strftime("%Y%m%d_%H%M%S")
        self.path = os.path.join(directory, f"{FILE_PREFIX}{rank}dynashape_{stamp}_{pid}.log")
        self.f = open(self.path, "a", encoding="utf-8", buffering=1 << 16)
        if self.pid is not None:  # a new file (another directory, or a forked process) starts afresh
            self.frames.clear()
            self.next_frame = 0
            self.pending.clear()
            self.limit_hits.clear()
            self.compiles.clear()  # e.g. left open when a failing writer turned tracing off
            self.compile_s = 0.0
        self.pid, self.strings = pid, {}
        self.idents.clear()
        self.frame_cache.clear()
        self.artifact("dynashape_run", {
            "pid": pid, "rank": self.rank, "argv": sys.argv, "cwd": os.getcwd(), "start": self.started,
            "python": sys.version.split()[0], "torch": torch.__version__}, cid=None)
        return self.f

    def after_fork(self) -> None:
        """In a forked child: the parent's file, queue, lock and thread are not ours."""
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.queue = collections.deque()
        self.thread = None
        self.f = None
        self.dir = None

    def _prefix(self, now: float) -> str:
        sec = int(now)
        if self._stamp[0] != sec:
            self._stamp = (sec, time.strftime("%m%d %H:%M:%S", time.localtime(sec)))
        return f"V{self._stamp[1]}.{int((now - sec) * 1e6):06d} {self.pid} {_SITE} "

    def record(self, kind: str, meta, payload: str | None = None, cid=-1) -> None:
        """Write one record; cid: a (frame_id, n) pair, None for none, -1 for the current compile's."""
        self._file()
        if cid == -1:
            cid = self.compiles[-1].cid if self.compiles else None
        env = {kind: meta}
        if self.rank is not None:
            env["rank"] = self.rank
        if cid is not None:
            env["frame_id"], env["frame_compile_id"], env["attempt"] = cid[0], cid[1], 0
        self.queue.append((time.time(), env, payload))

    def artifact(self, name, value, cid=-1) -> None:
        """`value`: text, JSON-able data, or a function returning either (called when written)."""
        self.record("artifact", {"name": name, "encoding": "string" if isinstance(value, str) else "json"},
                    value if isinstance(value, str) else functools.partial(_json_text, value), cid)

    def _drain(self) -> None:
        """Format and write what is queued, in order (the writer thread, or a flush)."""
        with self.lock:
            f = self.f
            if f is None or self.pid != os.getpid():
                return
            out = []
            while self.queue:
                t, env, payload = self.queue.popleft()
                try:
                    out.append(self._format(t, env, payload))
                except Exception as e:  # one record that cannot be printed does not stop the trace
                    kind = next(iter(env))
                    err = {"artifact": {"name": "trace_error", "encoding": "string"}}
                    out.append(self._format(t, err, f"could not write a {kind!r} record: {e!r}"))
            if out:
                f.write("".join(out))
                f.flush()

    def _format(self, t, env, payload) -> str:
        if callable(payload):
            payload = payload()
        text = json.dumps(env, default=_late)
        if payload is None:
            return f"{self._prefix(t)}{text}\n"
        digest = hashlib.md5(payload.encode("utf-8")).hexdigest()
        text = text[:-1] + f', "has_payload": "{digest}"}}'
        return f"{self._prefix(t)}{text}" + "".join("\n\t" + ln for ln in payload.split("\n")) + "\n"

    def soon(self) -> None:
        """Ask the writer thread to write what is queued."""
        t = self.thread
        if t is None or not t.is_alive():
            t = self.thread = threading.Thread(target=self._run, name="dynashape-trace", daemon=True)
            t.start()
        self.wake.set()

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            try:
                self._drain()
            except Exception as e:  # never take the program down; say it once and stop tracing
                if not (isinstance(e, ValueError) and self.f is not None and self.f.closed):
                    tracehook._disable(e)  # (else the file was closed at exit under a late record)
                return

    def intern(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            self._file()
            i = self.strings[s] = len(self.strings)
            self.record("str", [s, i], cid=None)
        return i

    def frame(self, filename, line, name, code=None) -> dict:
        return {"line": line, "name": name, "filename": self.intern(filename), "loc": code}

    def loc_frame(self, loc) -> dict | None:
        return None if loc is None else self.frame(loc.filename, loc.lineno, loc.function, loc.code)

    def user_stack(self, loc) -> list:
        """The compile's call-site stack ending at the user's line `loc` (cheap: no frame walk)."""
        base = self.compiles[-1].stack if self.compiles else []
        last = self.loc_frame(loc)
        if last is None or any(f["line"] == last["line"] and f["filename"] == last["filename"] for f in base):
            return list(base)  # e.g. an input's symbol: created at the call itself
        return base + [last]

    def flush(self) -> None:
        """Write everything queued, now, in this thread."""
        self._drain()

    # ------------------------------------------------------------------ events
    def __call__(self, kind, *args):
        self._file()  # first: opening a new file resets the compile ids
        getattr(self, "on_" + kind)(*args)

    def _current(self, cf=None):
        if self.compiles and (cf is None or self.compiles[-1].cf is cf):
            return self.compiles[-1]
        return None

    def on_recompile(self, cf, reasons):
        self.pending[cf] = list(reasons)

    def on_compile_start(self, cf, L):
        while self.compiles:  # compiles do not nest: this one raised past our hooks (a ConstraintViolationError)
            self._finish(self.compiles[-1], fail=("Error", "the compile raised an exception", None, None))
        ids = self.frames.get(cf)
        if ids is None:
            ids = self.frames[cf] = [self.next_frame, 0]
            self.next_frame += 1  # (not len(frames): a collected function leaves it, its id stays taken)
        c = _Compile(cf, ids[0], ids[1], [])
        ids[1] += 1
        c.reasons = self.pending.pop(cf, [])
        self.compiles.append(c)
        code, where, def_frame = self._ident(cf)
        c.stack = self._call_site() + def_frame
        meta = {"stack": c.stack, "function": cf.__name__, "where": where,
                "trigger": "recompile" if c.reasons else "first call", "reasons": c.reasons,
                "inputs": _shapes(L), "dynamic": _dynamic_kind(cf)}
        self.record("dynamo_start", meta)
        if c.reasons:
            self.artifact("recompile_reasons", c.reasons)

    def _ident(self, cf):
        """(code object, `file.py:line`, [the def's frame]) of a compiled function, cached."""
        got = self.idents.get(cf)
        if got is None:
            code = _code(cf)
            frame = [self.frame(code.co_filename, code.co_firstlineno, code.co_name,
                                _line(code.co_filename, code.co_firstlineno))] if code else []
            got = self.idents[cf] = (code, cf._where(), frame)
        return got

    def _call_site(self) -> list:
        """The user's frames that led to this compile, outermost first."""
        frames = []
        f = sys._getframe(3)
        while f is not None and len(frames) < 32:
            co = f.f_code
            internal = self.internal.get(co.co_filename)
            if internal is None:
                internal = self.internal[co.co_filename] = is_internal(co.co_filename) or co.co_filename.startswith("<frozen")
            if not internal:
                key = (co, f.f_lineno)
                fr = self.frame_cache.get(key)
                if fr is None:
                    fr = self.frame_cache[key] = self.frame(co.co_filename, f.f_lineno, co.co_name,
                                                            _line(co.co_filename, f.f_lineno))
                frames.append(fr)
            f = f.f_back
        frames.reverse()
        return frames

    def on_phase(self, name, seconds=None):
        c = self._current()
        if c is None:
            return
        if seconds is None:
            c.lap(name)
        else:  # a phase timed by its owner (a backend's kernel compile)
            c.phases[name] = c.phases.get(name, 0.0) + seconds

    def on_create_symbol(self, env, sym, hint, source, vr, loc):
        c = self._current()
        if c is None:
            return
        c.symbols += 1
        info = env.var_info.get(sym)
        self.record("create_symbol", {
            "symbol": sym, "val": repr(hint), "vr": _Late(_vr, vr), "source": _Late(source.name),
            "pretty": _Late(source.pretty), "kind": info.dynamic.name if info else None,
            "user_stack": self.user_stack(loc), "stack": None})

    def on_create_unbacked_symbol(self, env, sym, vr, loc):
        c = self._current()
        if c is None:
            return
        c.symbols += 1
        info = env.var_info.get(sym)
        self.record("create_unbacked_symbol", {
            "symbol": sym, "node_id": c.symbols, "vr": _Late(_vr, vr),
            "description": info.description if info else None,
            "user_stack": self.user_stack(loc), "stack": None})

    def on_guard_added(self, env, cond, loc):
        c = self._current()
        if c is None:
            return
        c.guards += 1
        # in the user's terms (`x.size(0) <= 6`), printed once: printing is most of a record's cost
        self.record("guard_added_fast", {"expr": _Late(env.describe, cond), "user_stack": self.user_stack(loc),
                                         "stack": None})

    def on_specialization(self, env, sym, value, reason, loc):
        if self._current() is None:
            return
        self.record("symbolic_shape_specialization", {
            "symbol": sym, "sources": _Late(_names, list(env.sources_of(sym))), "value": value,
            "reason": reason, "user_stack": self.user_stack(loc), "stack": None})

    def on_graph_break(self, cf, e):
        c = self._current(cf)
        if c is None:
            return
        loc = getattr(e, "location", None)
        reason = getattr(e, "reason", None) or str(e).split("\n")[0]
        if loc and str(loc) not in reason:
            reason += f" at {loc}"
        if e.__class__.__name__ == "DataDependentError":
            self.artifact("data_dependent_error", str(e))
        self.artifact("graph_break", {"reason": reason, "detail": str(e), "user_stack": self.user_stack(loc),
                                      "fullgraph": bool(cf.fullgraph)})
        fail = (e.__class__.__name__ if cf.fullgraph else "GraphBreak (runs eagerly)", reason,
                getattr(loc, "filename", None), getattr(loc, "lineno", None))
        if cf.fullgraph:
            self._finish(c, fail=fail)
        else:
            c.fail = fail

    def on_compile_failed(self, cf, e):
        c = self._current(cf)
        if c is not None:
            loc = _user_frame(e.__traceback__)
            self._finish(c, fail=(type(e).__name__, str(e).split("\n")[0], *loc))

    def on_compile_end(self, cf, entry, tracer):
        c = self._current(cf)
        if c is None:
            return
        c.lap("codegen" if entry.graph is not None else "guards")
        if entry.graph is not None:
            self.record("dynamo_output_graph", {}, entry.graph.__str__)  # printed by the writer thread
            if entry.code:
                self.artifact("generated_code", entry.code)
        for g in entry.guard_set.shape_guards:  # the writer thread must not intern: do it now
            loc = _guard_location(g)
            if loc is not None:
                self.intern(loc.filename)
        self.record("dynamo_guards", {}, functools.partial(_guards_json, entry, c.stack, self.strings))
        self.record("dynamo_cpp_guards_str", {}, entry.guard_set.source)
        self._finish(c, entry=entry, tracer=tracer)

    def on_limit_hit(self, cf, msg):
        self.pending.pop(cf, None)  # no compile follows: it runs eagerly
        n = self.limit_hits.get(cf, 0)
        self.limit_hits[cf] = n + 1
        if n == 0:
            ids = self.frames.get(cf)
            self.artifact("recompile_limit_hit", {"function": cf.__name__, "where": cf._where(), "message": msg},
                          cid=(ids[0], ids[1]) if ids else None)
            self.soon()

    def on_pgo_read(self, key, directory, remote, found):
        self.artifact("pgo_read", {"key": key, "dir": directory, "remote": remote, "found": len(found),
                                   "dynamic_sources": sorted({s for p in found for s in p.dynamic_sources()})})

    def on_pgo_write(self, key, directory, remote, profile, ok):
        self.artifact("pgo_write", {"key": key, "dir": directory, "remote": remote, "ok": bool(ok),
                                    "dynamic_sources": profile.dynamic_sources()})
        self.soon()

    def on_kernel_cache(self, hit, key, seconds=None):
        """For backends: a compiled-kernel cache lookup (tlparse marks hits and misses)."""
        self.artifact(f"fused_kernel_cache_{'hit' if hit else 'miss'}", {"key": str(key), "seconds": seconds})

    def _finish(self, c, entry=None, tracer=None, fail=None):
        if self.compiles and self.compiles[-1] is c:
            self.compiles.pop()
        elif c in self.compiles:
            self.compiles.remove(c)
        fail = fail or c.fail
        total = time.perf_counter() - c.t0
        self.compile_s += total
        cf = c.cf
        n_entries = len(cf.entries) + (entry is not None and not any(e is entry for e in cf.entries))
        self.record("compilation_metrics", _Late(_metrics, c, cf, self._ident(cf), entry, tracer, fail, total,
                                                 n_entries), cid=c.cid)
        self.soon()

    def close(self) -> None:
        """At exit (or `finish()`): close compiles left open, then a summary of the run."""
        if self.f is None or self.pid != os.getpid() or self.ended == self.path:
            return
        self.ended = self.path
        for c in list(self.compiles):
            self._finish(c, fail=("Error", "the compile did not finish", None, None))
        funcs = []
        for cf, (frame_id, n) in list(self.frames.items()):
            funcs.append({"frame_id": frame_id, "function": cf.__name__, "where": cf._where(), "compiles": n,
                          "entries": len(cf.entries), "graph_breaks": list(cf.stats.graph_breaks),
                          "recompile_reasons": len(cf.stats.recompile_reasons),
                          "limit_hits": self.limit_hits.get(cf, 0)})
        self.artifact("dynashape_run_end", {"wall_s": round(time.time() - self.started, 6),
                                            "compile_s": round(self.compile_s, 6), "functions": funcs}, cid=None)
        self._drain()


class _Late:
    """A record field computed when the writer formats the record, not during the compile
    (printing sources and expressions is most of a record's cost; what they print does not change)."""
    __slots__ = ("fn", "args")

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _late(obj):
    """json.dumps' `default`: late fields, then anything else (sympy numbers, symbols) as text."""
    if isinstance(obj, _Late):
        return obj.fn(*obj.args)
    return str(obj)


def _names(sources) -> list:
    return [s.name() for s in sources]


def _metrics(c, cf, ident, entry, tracer, fail, total, n_entries) -> dict:
    """The compilation_metrics record (built by the writer thread: the entry is done changing)."""
    code, where, _ = ident
    graph = getattr(entry, "graph", None)
    nodes = graph.nodes if graph is not None else []
    m = {
        "co_name": code.co_name if code else cf.__name__, "co_filename": code.co_filename if code else None,
        "co_firstlineno": code.co_firstlineno if code else None,
        "cache_size": n_entries, "accumulated_cache_size": n_entries,
        "guard_count": len(entry.guards) if entry is not None else None,
        "shape_env_guard_count": len(entry.env.guards) if entry is not None else c.guards,
        "graph_op_count": sum(n.kind == "call" for n in nodes),
        "graph_node_count": len(nodes), "graph_input_count": sum(n.kind == "input" for n in nodes),
        "start_time": c.start, "entire_frame_compile_time_s": round(total, 6),
        "backend_compile_time_s": round(c.phases.get("codegen", 0.0), 6),
        "code_gen_time_s": round(c.phases.get("codegen", 0.0), 6),
        "phases_s": {k: round(v, 6) for k, v in c.phases.items()},
        "function": cf.__name__, "where": where, "recompile_reasons": c.reasons,
        "dynamic_sources": dict(getattr(entry, "dynamic_sources", {}) or {}),
        "fallbacks": list(dict.fromkeys(getattr(tracer, "fallbacks", []) or [])),
        "symbols": c.symbols,
    }
    if fail is not None:
        m.update(fail_type=fail[0], fail_reason=fail[1], fail_user_frame_filename=fail[2],
                 fail_user_frame_lineno=fail[3])
    return m


def _guard_location(g):
    if g.location is None and g.bounds is not None:  # a range: the line of either end
        return g.bounds[3] or g.bounds[2]
    return g.location


def _guards_json(entry, base, strings) -> str:
    """The dynamo_guards payload: each guard with the user's stack down to the line that added it."""
    located = {g.code: g for g in entry.guard_set.shape_guards}
    out = []
    for text in entry.guards:
        g = located.get(text)
        loc = _guard_location(g) if g is not None else None
        stack = None
        if loc is not None:
            last = {"line": loc.lineno, "name": loc.function, "filename": strings.get(loc.filename), "loc": loc.code}
            stack = list(base) + [last]
        out.append({"code": text, "stack": None, "user_stack": stack, "why": g.why if g is not None else ""})
    return json.dumps(out)


def _json_text(value) -> str:
    return json.dumps(value, default=str, indent=1)


def _rank():
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


def _code(cf):
    import inspect
    return getattr(inspect.unwrap(cf._orig), "__code__", None)


def _line(filename, lineno) -> str:
    return linecache.getline(filename, lineno).strip()


def _user_frame(tb):
    last = (None, None)
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            last = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return last


def _shapes(L: dict) -> dict:
    """What the compile saw: sizes of tensor arguments and values of int arguments, by source."""
    out = {}
    for name, v in L.items():
        src = f"L['{name}']"
        if isinstance(v, torch.Tensor):
            out[src] = list(v.shape)
        elif isinstance(v, int) and not isinstance(v, bool):
            out[src] = v
        elif isinstance(v, (list, tuple)) and len(v) <= 16:
            for i, x in enumerate(v):
                if isinstance(x, torch.Tensor):
                    out[f"{src}[{i}]"] = list(x.shape)
                elif isinstance(x, int) and not isinstance(x, bool):
                    out[f"{src}[{i}]"] = x
    return out


def _dynamic_kind(cf) -> str:
    return {None: "automatic", True: "dynamic=True", False: "dynamic=False"}[cf.dynamic]


def _vr(vr) -> str:
    return f"[{_bound(vr.lo)}, {_bound(vr.hi)}]"


_NEG_OO = -int_oo


def _bound(b) -> str:
    if b is int_oo or b is _NEG_OO:  # skip sympy's printer for the common ends
        return "int_oo" if b is int_oo else "-int_oo"
    try:
        return str(int(b))
    except (TypeError, ValueError, OverflowError):
        return str(b)


_WRITER = Writer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WRITER.after_fork)


def writer() -> Writer:
    return _WRITER


def install() -> None:
    """Connect the writer to the hook point (done when dynashape is imported)."""
    tracehook.install(_WRITER)


def finish() -> str | None:
    """Write the run summary and everything queued now (instead of at exit); the trace file's path.

    For a program that reports on its own run, as examples/demo.py does."""
    _WRITER.close()
    return trace_file()


def trace_file() -> str | None:
    """The path of this process's trace file, once something was written."""
    return _WRITER.path if _WRITER.f is not None else None


@atexit.register
def _at_exit() -> None:
    try:
        from ..fleet import pgo
        pgo.flush()  # its own exit hook would run after ours: write the profile now, while traced
        tracehook.install(None)  # first: a background kernel build still running records nothing more
        _WRITER.close()
        if _WRITER.f is not None and _WRITER.pid == os.getpid():
            _WRITER.f.close()
    except Exception:
        pass
