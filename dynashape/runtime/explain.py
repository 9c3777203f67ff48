"""`ds.explain(cf)`: a report a person can read about a compiled function."""
from __future__ import annotations

import sympy

from ..ir.tree import is_data_guard


def explain(cf, print_report: bool = True) -> str:
    """Each entry's graph, guards, which sources are dynamic and why, the specializations
    with their user lines, the bounds of data-dependent sizes, and the recompile reasons."""
    cf = getattr(cf, "_compiled", cf)  # a CompiledModule
    lines = [f"{getattr(cf, '__name__', type(cf).__name__)} ({cf._where()}): {cf.stats.compiles} compile(s), {len(cf.entries)} cache entries"]
    for i, e in enumerate(cf.entries):
        kind = "graph" if e.graph is not None else "eager (graph break)"
        lines.append(f"\nentry {i} (newest first): {kind}")
        if e.dynamic_sources:
            lines.append("  dynamic sources:")
            lines += [f"    {name}: {why}" for name, why in sorted(e.dynamic_sources.items())]
        else:
            lines.append("  dynamic sources: none (fully static)")
        specs = _specializations(e.env)
        if specs:
            lines.append("  specializations:")
            lines += [f"    {s}" for s in specs]
        unbacked = [s for s in e.env.var_to_range if s in e.env._unbacked]
        if unbacked:
            lines.append("  data-dependent sizes:")
            lines += [f"    {s} in [{e.env.var_to_range[s].lo}, {e.env.var_to_range[s].hi}]"
                      for s in sorted(unbacked, key=str)]
        lines.append("  guards:")
        lines += [f"    {g}" for g in e.guards]
        tree = getattr(e, "tree", None)
        if tree is not None:
            conds = _data_guards(tree)
            lines.append(f"  data guards ({len(tree.paths)} path(s) traced; each condition on a call's path costs one "
                         f"device-to-host read of its value, a sync on GPU):")
            lines += [f"    {c}" for c in conds]
            if tree.closed:
                lines.append(f"  no more paths: {tree.closed}")
        graphs = getattr(getattr(e.fn, "graph_fn", None), "cuda_graphs_report", None)
        if graphs is not None:  # ds.config.cudagraphs: which sizes are padded to buckets, which exact and why
            lines += [f"  {ln}" for ln in graphs()]
        if e.graph is not None:
            lines.append("  graph:")
            lines += [f"    {ln}" for ln in str(e.graph).splitlines()]
    if cf.stats.side_exits:
        lines.append(f"\nside exits (a call's data took a branch its entry had not compiled): {cf.stats.side_exits}")
    if cf.stats.recompile_reasons:
        lines.append("\nrecompile reasons:")
        lines += [f"  - {r}" for r in cf.stats.recompile_reasons]
    if cf.stats.graph_breaks:
        lines.append("\ngraph breaks:")
        lines += [f"  - {r}" for r in cf.stats.graph_breaks]
    if cf.stats.fallbacks:
        lines.append("\nops without a symbolic rule (sizes specialized):")
        lines += [f"  - {r}" for r in dict.fromkeys(cf.stats.fallbacks)]
    report = "\n".join(lines)
    if print_report:
        print(report)
    return report


def _data_guards(tree) -> list[str]:
    """The distinct conditions the tree's paths decided on data, with their user lines."""
    seen: dict = {}
    for g in tree.paths:
        for n in g.nodes:
            if is_data_guard(n):
                text = n.args[2].split(" was {actual}")[0]
                seen.setdefault((text, str(n.location)), None)
    return [f"{t} at {loc}" if " at " not in t else t for t, loc in seen]


def _specializations(env) -> list[str]:
    out = []
    for sym, rep in env.replacements.items():
        if not isinstance(rep, sympy.Basic) or not rep.is_Number:
            continue
        srcs = env.sources_of(sym)
        if not srcs:
            continue
        loc = env.replacement_locations.get(sym)
        out.append(f"{srcs[0].pretty()} = {rep}" + (f" at {loc}" if loc else ""))
    return out
