"""`python -m dynashape report dir -o out/`: a static HTML site from compile traces.

No server, no CDN, no script: plain pages with inline CSS and inline SVG that work
from file://. `index.html` has the run summary, the cross-rank view, the ranked
"what to do" list and the compiles-over-time plot; one page per compiled function
has its timeline, each recompile's failed guard with the user line that made it
and the fix, the symbol table, the shapes seen per dimension, and each compile's
graph, generated code and guards linked to the user's lines.
"""
from __future__ import annotations

import html
import os
import re

from . import report as R

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f4f4f4}
pre,code{font:12px/1.4 ui-monospace,monospace}pre{background:#f7f7f7;padding:8px;overflow-x:auto;margin:4px 0}
.card{border:1px solid #ddd;border-left:4px solid #c60;border-radius:4px;padding:8px 12px;margin:10px 0}
.fix{border-left-color:#080}.guard{color:#a00;font-weight:600}.muted{color:#777}
.snippet{background:#eef6ee;border:1px solid #9c9;display:block;padding:4px 8px;margin:3px 0;white-space:pre}
.ctx .hl{background:#fff3b0}.dyn{color:#060;font-weight:600}.static{color:#555}
a{color:#0550ae}.bad{background:#fde8e8}.warn{background:#fff7e0}
li{margin:4px 0}
"""


def write_site(runs: list, out: str) -> str:
    """Write the site; returns the path of index.html."""
    os.makedirs(out, exist_ok=True)
    for ri, run in enumerate(runs):
        for fn in run.functions.values():
            with open(os.path.join(out, _fn_page(ri, fn)), "w", encoding="utf-8") as f:
                f.write(function_page(run, ri, fn, runs))
    index = os.path.join(out, "index.html")
    with open(index, "w", encoding="utf-8") as f:
        f.write(index_page(runs))
    return index


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


def _fn_page(ri: int, fn) -> str:
    return f"run{ri}_fn{fn.frame_id}.html"


def _secs(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


# ---------------------------------------------------------------------------- index
def index_page(runs: list) -> str:
    b = ["<h1>dynashape compile report</h1>"]
    if not runs:
        b.append("<p>No trace records found. Run your program with <code>DYNASHAPE_TRACE=dir</code>.</p>")
        return _page("dynashape compile report", "\n".join(b))
    b.append("<h2 id='summary'>Run summary</h2><table><tr><th>run</th><th>command</th><th>functions</th>"
             "<th>compiles</th><th>recompiles</th><th>time compiling</th><th>running (the rest of the run)</th>"
             "<th>graph breaks</th><th>recompile-limit hits</th></tr>")
    for run in runs:
        cs = run.all_compiles()
        comp = sum(c.seconds for c in cs)
        wall = float(run.end.get("wall_s") or 0.0)
        rest = _secs(max(wall - comp, 0.0)) if wall else "<span class='muted'>(run did not finish)</span>"
        b.append(f"<tr><td>{_e(run.label)}</td><td><code>{_e(' '.join(run.meta.get('argv') or []))}</code></td>"
                 f"<td>{len(run.functions)}</td><td>{len(cs)}</td><td>{sum(1 for c in cs if c.n)}</td>"
                 f"<td>{_secs(comp)}</td><td>{rest}</td>"
                 f"<td>{sum(1 for c in cs if c.graph_break)}</td>"
                 f"<td>{sum(1 for f in run.functions.values() if f.limit_hit)}</td></tr>")
    b.append("</table>")
    if len(runs) > 1:
        b.append(cross_rank(runs))
    b.append("<h2 id='todo'>What to do</h2>")
    todo = R.advice(runs)
    if not todo:
        b.append("<p>Nothing: every function compiled once, with no graph break.</p>")
    else:
        b.append("<ol>")
        for a in todo[:30]:
            cost = f" <span class='muted'>({_secs(a.cost)} of compiling)</span>" if a.cost < 1e5 else ""
            snip = "".join(f"<code class='snippet'>{_e(s)}</code>" for s in a.snippets)
            b.append(f"<li><b>{_e(a.title)}</b>{cost} <span class='muted'>— {_e(a.where)}</span><br>"
                     f"{_e(a.detail)}{snip}</li>")
        b.append("</ol>")
    b.append("<h2 id='timeline'>Compiles over time</h2>")
    b.append(timeline_svg(runs))
    for ri, run in enumerate(runs):
        b.append(f"<h2 id='run{ri}'>{_e(run.label)}: compiled functions</h2><table><tr><th>function</th>"
                 "<th>compiles</th><th>status</th><th>dynamic sources (last compile)</th></tr>")
        for fn in run.functions.values():
            last = next((c for c in reversed(fn.compiles) if c.metrics), None)
            dyn = ", ".join(sorted((last.metrics.get("dynamic_sources") or {}))) if last else ""
            status = ", ".join(sorted({c.status for c in fn.compiles}))
            if fn.limit_hit:
                status += ", recompile limit hit"
            b.append(f"<tr><td><a href='{_fn_page(ri, fn)}'>{_e(fn.key)}</a></td><td>{len(fn.compiles)}</td>"
                     f"<td>{_e(status)}</td><td><code>{_e(dyn) or '—'}</code></td></tr>")
        b.append("</table>")
        if run.pgo:
            b.append("<h3>PGO profile</h3><ul>")
            for name, v in run.pgo:
                v = v if isinstance(v, dict) else {}
                what = "read" if name == "pgo_read" else "wrote"
                dyn = ", ".join(v.get("dynamic_sources") or []) or "nothing dynamic"
                b.append(f"<li>{what} <code>{_e(v.get('key', ''))}</code>: {_e(dyn)}</li>")
            b.append("</ul>")
    return _page("dynashape compile report", "\n".join(b))


def cross_rank(runs: list) -> str:
    """Which ranks compiled what: one row per function, one column per rank."""
    keys = []
    for run in runs:
        for fn in run.functions.values():
            if fn.key not in keys:
                keys.append(fn.key)
    b = ["<h2 id='ranks'>Across ranks</h2><p>Compiles of each function on each rank; a row that differs "
         "between ranks means the ranks compiled different graphs (compiler collectives make them agree).</p>"
         "<table><tr><th>function</th>" + "".join(f"<th>{_e(r.label)}</th>" for r in runs) + "</tr>"]
    for key in keys:
        cells = []
        for run in runs:
            fn = next((f for f in run.functions.values() if f.key == key), None)
            if fn is None:
                cells.append("—")
                continue
            last = next((c for c in reversed(fn.compiles) if c.metrics), None)
            dyn = ", ".join(sorted((last.metrics.get("dynamic_sources") or {}))) if last else ""
            cells.append(f"{len(fn.compiles)} compile(s)" + (f"<br><code>{_e(dyn)}</code>" if dyn else ""))
        differ = len(set(cells)) > 1
        b.append(f"<tr class='{'warn' if differ else ''}'><td>{_e(key)}</td>"
                 + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    b.append("</table>")
    return "\n".join(b)


# ---------------------------------------------------------------------------- plots
_COLORS = {"compile": "#2a7", "recompile": "#d80", "graph break": "#c22", "failed": "#808"}


def timeline_svg(runs: list, only=None) -> str:
    """Compiles over time: one row per function (per run), a mark per compile, width = its duration."""
    rows = []
    for run in runs:
        for fn in run.functions.values():
            if only is None or fn is only:
                rows.append((run, fn))
    if not rows:
        return ""
    firsts = [c.metrics.get("start_time") for _, fn in rows for c in fn.compiles if c.metrics.get("start_time")]
    if only is not None and firsts:  # one function: from its first compile
        t0 = min(firsts)
    else:
        t0 = min([r.start_time for r, _ in rows if r.start_time] + firsts + [0.0] * (not firsts))
    ends = [(c.metrics.get("start_time") or t0) + c.seconds - t0 for _, fn in rows for c in fn.compiles]
    span = max(ends + [1e-3])
    label_w, w, row_h = 260, 900, 26
    height = 40 + row_h * len(rows)
    x = lambda t: label_w + (w - label_w - 20) * t / span  # noqa: E731
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{height}' role='img' "
           f"aria-label='compiles over time'>",
           f"<line x1='{label_w}' y1='{height - 24}' x2='{w - 20}' y2='{height - 24}' stroke='#999'/>"]
    for k in range(6):
        t = span * k / 5
        out.append(f"<text x='{x(t):.1f}' y='{height - 8}' font-size='10' text-anchor='middle'>{_secs(t)}</text>")
    for i, (run, fn) in enumerate(rows):
        y = 12 + i * row_h
        label = fn.name + (f" · {run.label}" if len(runs) > 1 else "")
        out.append(f"<text x='4' y='{y + 12}' font-size='12'>{_e(label[:38])}</text>")
        for c in fn.compiles:
            t = (c.metrics.get("start_time") or t0) - t0
            wd = max(3.0, x(t + c.seconds) - x(t))
            tip = f"{fn.name} #{c.n}: {c.status}, {_secs(c.seconds)}"
            out.append(f"<rect x='{x(t):.1f}' y='{y}' width='{wd:.1f}' height='16' fill='{_COLORS[c.status]}'>"
                       f"<title>{_e(tip)}</title></rect>")
    out.append("</svg>")
    legend = " ".join(f"<span style='color:{col}'>■</span> {k}" for k, col in _COLORS.items())
    since = "its first compile" if only is not None else "the process started"
    return "\n".join(out) + f"<div class='muted'>{legend}; x: time since {since}</div>"


def shapes_svg(name: str, values: list) -> str:
    """The values one dimension had at each compile."""
    nums = [v for v in values if isinstance(v, (int, float))]
    if not nums:
        return ""
    w, h, pad = 360, 120, 30
    lo, hi = min(nums), max(nums)
    hi = hi if hi > lo else lo + 1
    px = lambda i: pad + (w - 2 * pad) * (i / max(len(values) - 1, 1))  # noqa: E731
    py = lambda v: h - pad + 10 - (h - pad - 10) * (v - lo) / (hi - lo)  # noqa: E731
    pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(values) if isinstance(v, (int, float)))
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' role='img' "
           f"aria-label='values of {_e(name)}'>",
           f"<text x='4' y='12' font-size='11'>{_e(name)}</text>",
           f"<polyline points='{pts}' fill='none' stroke='#58a'/>"]
    for i, v in enumerate(values):
        if isinstance(v, (int, float)):
            out.append(f"<circle cx='{px(i):.1f}' cy='{py(v):.1f}' r='3' fill='#258'><title>compile #{i}: {v}"
                       f"</title></circle><text x='{px(i):.1f}' y='{py(v) - 6:.1f}' font-size='9' "
                       f"text-anchor='middle'>{v}</text>")
    out.append(f"<text x='{pad}' y='{h - 4}' font-size='9'>compile #0</text>")
    out.append(f"<text x='{w - pad}' y='{h - 4}' font-size='9' text-anchor='end'>#{len(values) - 1}</text></svg>")
    return "".join(out)


# ---------------------------------------------------------------------------- function page
class _Lines:
    """User lines referenced on a page: anchors, and their source in context."""

    def __init__(self, run):
        self.run = run
        self.by_base = {}
        for s in run.strings.values():
            self.by_base.setdefault(os.path.basename(s), s)
        self.used: dict = {}  # (filename, line) -> code text from the trace

    def anchor(self, filename, line, code="") -> str:
        self.used.setdefault((filename, line), code)
        return f"L-{re.sub(r'[^A-Za-z0-9_]', '_', os.path.basename(filename))}-{line}"

    def link(self, filename, line, code="") -> str:
        a = self.anchor(filename, line, code)
        text = f"{os.path.basename(filename)}:{line}"
        return f"<a href='#{a}'>{_e(text)}</a>" + (f" <code>{_e(code)}</code>" if code else "")

    def frame(self, frame) -> str:
        fn, line, _, code = R.frame_text(self.run, frame)
        return self.link(fn, line, code) if fn else "<span class='muted'>(unknown)</span>"

    def linkify(self, text: str) -> str:
        """Escape `text` and turn each `file.py:N` into a link to that line's context."""
        out, pos = [], 0
        for m in re.finditer(r"([\w.\-]+\.py):(\d+)", text):
            full = self.by_base.get(m.group(1))
            out.append(_e(text[pos:m.start()]))
            if full:
                out.append(f"<a href='#{self.anchor(full, int(m.group(2)))}'>{_e(m.group(0))}</a>")
            else:
                out.append(_e(m.group(0)))
            pos = m.end()
        out.append(_e(text[pos:]))
        return "".join(out)

    def context(self, filename, line, code="") -> str:
        ctx = R.user_line_context(filename, line)
        if not ctx:
            return f"<pre class='ctx'><span class='hl'>{line:5d}  {_e(code)}</span></pre>"
        return "<pre class='ctx'>" + "\n".join(
            (f"<span class='hl'>{n:5d}  {_e(t)}</span>" if n == line else f"{n:5d}  {_e(t)}") for n, t in ctx) + "</pre>"

    def section(self) -> str:
        b = ["<h2 id='lines'>Your source lines</h2>"]
        for (fn, line), code in sorted(self.used.items()):
            b.append(f"<h3 id='{self.anchor(fn, line)}'>{_e(fn)}:{line}</h3>{self.context(fn, line, code)}")
        return "\n".join(b)


def _resolve(lines: _Lines, added_at: str):
    """`demo.py:20 'if ...'` -> (full filename, line, code) when the file is known."""
    m = re.match(r"([\w.\-]+\.py):(\d+)(?: '(.*)')?", added_at)
    if not m:
        return None
    full = lines.by_base.get(m.group(1)) or m.group(1)
    return full, int(m.group(2)), m.group(3) or ""


def function_page(run, ri: int, fn, runs) -> str:
    lines = _Lines(run)
    b = [f"<p><a href='index.html'>← report</a></p><h1>{_e(fn.key)}"
         + (f" <span class='muted'>· {_e(run.label)}</span>" if len(runs) > 1 else "") + "</h1>"]
    cs = fn.compiles
    b.append(f"<p>{len(cs)} compile(s), {sum(1 for c in cs if c.n)} recompile(s), "
             f"{_secs(sum(c.seconds for c in cs))} compiling; "
             f"{sum(1 for c in cs if c.graph_break)} graph break(s).</p>")
    if fn.limit_hit:
        b.append(f"<div class='card'><b>Recompile limit hit.</b> {_e(fn.limit_hit.get('message', ''))}</div>")

    b.append("<h2 id='timeline'>Timeline</h2>" + timeline_svg([run], only=fn))
    b.append("<table><tr><th>#</th><th>started</th><th>trigger</th><th>status</th><th>time</th><th>phases</th>"
             "<th>called from</th></tr>")
    for c in cs:
        t = (c.metrics.get("start_time") or run.start_time) - run.start_time if run.start_time else 0.0
        phases = ", ".join(f"{k} {_secs(v)}" for k, v in (c.metrics.get("phases_s") or {}).items())
        stack = c.start.get("stack") or []
        caller = stack[-2] if len(stack) > 1 else None
        cls = "bad" if c.status in ("graph break", "failed") else ""
        b.append(f"<tr class='{cls}'><td><a href='#c{c.n}'>{c.n}</a></td><td>+{_secs(t)}</td>"
                 f"<td>{_e(c.start.get('trigger', ''))}</td><td>{_e(c.status)}</td><td>{_secs(c.seconds)}</td>"
                 f"<td>{_e(phases)}</td><td>{lines.frame(caller) if caller else ''}</td></tr>")
    b.append("</table>")

    recompiles = [c for c in cs if c.reasons]
    if recompiles:
        b.append("<h2 id='recompiles'>Why it recompiled</h2>")
    for c in recompiles:
        for i, text in enumerate(c.reasons):
            r = R.parse_reason(text)
            which = f" — cache entry {i} of {len(c.reasons)} (newest first) rejected the call" if len(c.reasons) > 1 else ""
            b.append(f"<div class='card'><h3>compile #{c.n}{which}</h3>"
                     f"<div>failed guard: <span class='guard'>{_e(r.guard)}</span></div>")
            where = _resolve(lines, r.added_at) if r.added_at else None
            if where:
                b.append(f"<div>guard created by your line {lines.link(*where)}</div>{lines.context(*where)}")
            else:
                inputs = c.start.get("inputs") or {}
                stack = c.start.get("stack") or []
                b.append("<div>guard created by the previous compile's input shapes: the graph was specialized "
                         f"to them (inputs now: <code>{_e(inputs)}</code>); called from "
                         f"{lines.frame(stack[-2]) if len(stack) > 1 else '?'}, compiled function "
                         f"{lines.frame(stack[-1]) if stack else '?'}</div>")
            if r.fix:
                b.append(f"<div class='card fix'>fix: {_e(r.fix)}"
                         + "".join(f"<code class='snippet'>{_e(s)}</code>" for s in r.snippets) + "</div>")
            b.append("</div>")
    for c in cs:
        gb = c.graph_break
        if gb:
            st = gb.get("user_stack") or []
            b.append(f"<div class='card'><h3>graph break in compile #{c.n}</h3><div class='guard'>"
                     f"{_e(gb.get('reason', ''))}</div>")
            if st:
                fnm, line, _, code = R.frame_text(run, st[-1])
                b.append(f"<div>at your line {lines.link(fnm, line, code)}</div>{lines.context(fnm, line, code)}")
            b.append(f"<pre>{_e(gb.get('detail', ''))}</pre></div>")
        elif c.failed:
            b.append(f"<div class='card'><h3>compile #{c.n} failed</h3>{_e(c.metrics.get('fail_type'))}: "
                     f"{_e(c.metrics.get('fail_reason'))}</div>")

    b.append("<h2 id='symbols'>Symbols and sources</h2><table><tr><th>source</th><th>values seen</th>"
             "<th>dynamic?</th><th>why</th><th>symbol</th><th>range</th><th>created at</th>"
             "<th>specialized at</th></tr>")
    for row in R.symbol_table(run, fn):
        dyn = "<span class='dyn'>dynamic</span>" if row["dynamic"] else "<span class='static'>static</span>"
        spec = "<br>".join(f"#{n}: = {_e(v)} at {lines.frame(fr)}" for n, v, fr in row["specialized"])
        created = lines.frame(row["created"]) if row["created"] else ""
        vals = ", ".join(map(str, row["values"]))
        b.append(f"<tr><td><code>{_e(row['source'])}</code></td><td>{_e(vals)}</td><td>{dyn}</td>"
                 f"<td>{_e(row['why'])}</td><td>{_e(row['symbol'])}</td><td>{_e(row['range'])}</td>"
                 f"<td>{created}</td><td>{spec}</td></tr>")
    b.append("</table>")
    varying = [(k, v) for k, v in R.dims_seen(fn).items() if len(set(map(str, v))) > 1]
    if varying:
        b.append("<h3>Shapes seen per dimension (at each compile)</h3>"
                 + " ".join(shapes_svg(k, v) for k, v in varying))

    b.append("<h2 id='compiles'>Graphs, code and guards</h2>")
    for c in cs:
        dyn = c.metrics.get("dynamic_sources") or {}
        b.append(f"<h3 id='c{c.n}'>compile #{c.n} ({_e(c.status)})</h3>")
        if dyn:
            b.append("<ul>" + "".join(f"<li><code>{_e(k)}</code> dynamic: {_e(v)}</li>" for k, v in dyn.items())
                     + "</ul>")
        if c.graph:
            b.append(f"<details open><summary>graph with symbolic shapes</summary><pre>{lines.linkify(c.graph)}"
                     "</pre></details>")
        if c.artifacts.get("generated_code"):
            b.append(f"<details><summary>generated code</summary><pre>{lines.linkify(c.artifacts['generated_code'])}"
                     "</pre></details>")
        if c.guards:
            items = []
            for g in c.guards:
                st = g.get("user_stack") or []
                at = f" — added at {lines.frame(st[-1])}" if st else (f" — {_e(g['why'])}" if g.get("why") else "")
                items.append(f"<li><code>{_e(g.get('code', ''))}</code>{at}</li>")
            b.append(f"<details><summary>{len(c.guards)} guards</summary><ul>{''.join(items)}</ul></details>")
    b.append(lines.section())
    return _page(f"{fn.name} — dynashape report", "\n".join(b))
