"""dynashape in one page: one compiled graph for every batch size, and why.

Run with `make demo`. It traces its own compiles (`ds.config.trace_dir`, like
`DYNASHAPE_TRACE=dir`) and ends by writing the HTML report of them
(`python -m dynashape report dir`); open the file:// path it prints.
"""
import os
import shutil
import tempfile

import torch

import dynashape as ds
from dynashape.logs import report, report_html, trace
from dynashape.symbolic import DataDependentError, LocalSource, ShapeEnv, SizeSource

OUT = os.path.join(tempfile.gettempdir(), "dynashape-demo")


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):  # x: (batch, seq, 16)
        h = self.norm(torch.relu(self.proj(x)))
        if h.size(1) > 1:  # a shape branch: becomes a guard, not a recompile per size
            h = h.mean(dim=1)
        return self.head(h).softmax(-1)


def relu_or_negate(x):
    if x.sum() > 0:  # depends on the data: decided per call, guarded inside the graph (speculation)
        return x.relu()
    return -x


def clip_if_positive(x):
    x.mul_(2)  # an in-place change first: a call could not be re-run from its start...
    if x.sum() > 0:  # ...so this data branch is a graph break, and this function runs eagerly
        return x.clamp(max=1.0)
    return x


def main():
    torch.manual_seed(0)
    shutil.rmtree(OUT, ignore_errors=True)  # the report shows this run only
    ds.config.trace_dir = os.path.join(OUT, "trace")  # same as DYNASHAPE_TRACE=...: a file per process
    model = TinyModel().eval()
    compiled = ds.compile(model)  # default: static first, dynamic once a size changes
    for batch, seq in [(2, 8), (3, 8), (5, 12), (7, 20), (16, 9)]:
        x = torch.randn(batch, seq, 16)
        torch.testing.assert_close(compiled(x), model(x))
    print(f"5 calls with different shapes -> {compiled.stats.compiles} compile(s)")
    if compiled.stats.recompile_reasons:
        print("why it recompiled:", *compiled.stats.recompile_reasons, sep="\n  ")
    entry = compiled.entries[0]
    print("dynamic sizes and why:", *(f"{k}: {v}" for k, v in entry.dynamic_sources.items()), sep="\n  ")
    print("(run the demo again: the PGO profile this run wrote makes them dynamic from the first compile)")
    print("\nthe graph, with symbolic shapes:\n" + str(entry.graph))
    print("\nits guards:", *entry.guards, sep="\n  ")
    print("\nthe generated code:\n" + entry.code)

    branch = ds.compile(relu_or_negate)
    for v in (1.0, -1.0, 2.0):
        branch(torch.full((4,), v))
    print(f"\na branch on data, 3 calls -> {branch.stats.paths} paths in one entry, "
          f"{branch.stats.side_exits} side exit:", *branch.stats.recompile_reasons, sep="\n  ")
    print(branch.entries[0].code)

    clip = ds.compile(clip_if_positive)
    clip(torch.randn(6))
    print("a graph break:", *clip.stats.graph_breaks, sep="\n  ")

    print("\nthe engine at work:")
    env = ShapeEnv()
    n = env.symint(10, SizeSource(LocalSource("x"), 0))
    print(f"  symbol for x.size(0): {n}, range {env.var_to_range[n.node.expr]}")
    print(f"  n > 4 -> {bool(n > 4)}; range now {env.var_to_range[n.node.expr]}; n != 3 is known: {bool(n != 3)}")
    u = env.unbacked_symint(size_like=True)
    try:
        bool(u == 0)
    except DataDependentError as e:
        print("  branching on a data-dependent size says:\n    " + str(e).replace("\n", "\n    "))

    trace.finish()  # the run summary, and every record written now rather than at exit
    site = report_html.write_site(report.load(trace.trace_file()), os.path.join(OUT, "report"))
    print(f"\nthis run's compile trace: {trace.trace_file()}  (tlparse reads it too)")
    print(f"its report (python -m dynashape report {os.path.dirname(trace.trace_file())}): open file://{site}")


if __name__ == "__main__":
    main()
