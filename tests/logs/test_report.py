"""`python -m dynashape report`: the HTML site a person reads, checked in headless Chromium."""
import contextlib
import datetime
import glob
import io
import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

import dynashape as ds
from dynashape.__main__ import main
from dynashape.logs import report, report_html, trace

from . import programs
from .programs import run_demo_like

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A trace of the demo-like program and the report of it (written by the CLI)."""
    d = tmp_path_factory.mktemp("report")
    with ds.config.patch(trace_dir=str(d / "trace"), pgo_dir=str(d / "pgo")):
        run_demo_like()
    trace.writer().flush()
    said = io.StringIO()
    with contextlib.redirect_stdout(said):  # `python -m dynashape report DIR -o OUT`, in this process
        assert main(["report", str(d / "trace"), "-o", str(d / "out")]) == 0
    assert "open file://" in said.getvalue()
    return d


def test_a_recompile_reason_splits_into_guard_user_line_and_fix():
    r = report.parse_reason("tensor 'x' size mismatch at index 0. expected 2, actual 3; to compile this "
                            "dynamically from the start, call ds.mark_dynamic(x, 0) or set "
                            "DYNASHAPE_DYNAMIC_SOURCES=\"L['x']\"")
    assert r.guard == "tensor 'x' size mismatch at index 0. expected 2, actual 3"
    assert r.source == "L['x'].size()[0]"
    assert r.snippets == ["ds.mark_dynamic(x, 0)", "DYNASHAPE_DYNAMIC_SOURCES=\"L['x']\""]
    r = report.parse_reason("L['x'].size()[0] <= 6 failed (x.size(0) = 8); added at m.py:5 'if x.size(0) > 6:'")
    assert r.guard == "L['x'].size()[0] <= 6 failed (x.size(0) = 8)"
    assert r.added_at == "m.py:5 'if x.size(0) > 6:'" and "torch.where" in r.fix


def test_the_loaded_trace_has_every_function_compile_and_reason(traced):
    (run,) = report.load(str(traced / "trace"))
    names = {f.name: f for f in run.functions.values()}
    assert set(names) == {"forward", "branchy", "clip_if_positive"}
    assert len(names["forward"].compiles) == 3 and len(names["branchy"].compiles) == 3
    assert names["clip_if_positive"].compiles[0].status == "graph break"
    rows = {r["source"]: r for r in report.symbol_table(run, names["forward"])}
    assert rows["L['x'].size()[0]"]["values"] == [2, 3, 5] and rows["L['x'].size()[0]"]["dynamic"]
    assert rows["L['x'].size()[2]"]["why"].startswith("static: one value seen")
    todo = report.advice([run])
    assert todo[0].title.startswith("graph break in clip_if_positive")
    assert any("mark it dynamic" in a.title and "ds.mark_dynamic(x, 0)" in a.snippets for a in todo)


def test_the_pages_say_which_guard_failed_where_it_came_from_and_the_fix(traced):
    out = traced / "out"
    index = (out / "index.html").read_text()
    assert "What to do" in index and "<svg" in index and "http" not in index.replace("http://www.w3.org", "")
    page = next(p for p in out.glob("run0_fn*.html") if "branchy (" in p.read_text())
    text = page.read_text()
    assert "L[&#x27;x&#x27;].size()[0] &lt;= 6 failed (x.size(0) = 8)" in text  # the failed guard
    assert "if x.size(0) &gt; 6:  # a guard on a size, from this line" in text  # the user line, in context
    assert "ds.mark_dynamic(x, 0)" in text  # the fix to paste
    assert "f32[s0, 4]" in text and "def forward(L):" in text  # the graph and the generated code


CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)


def _chromium(*args):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--no-first-run", *args], capture_output=True, text=True, timeout=90)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (`make test-services` installs it as root)")
def test_a_browser_renders_the_failed_guard_the_fix_and_the_user_line(traced):
    out = traced / "out"
    page = next(p for p in out.glob("run0_fn*.html") if "branchy (" in p.read_text())
    shot = traced / "branchy.png"  # look at it: pytest keeps the last runs' tmp directories
    _chromium(f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 10_000  # something was drawn
    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert "failed guard: <span class=\"guard\">L['x'].size()[0] &lt;= 6 failed (x.size(0) = 8)</span>" in dom
    assert "ds.mark_dynamic(x, 0)" in dom and "DYNASHAPE_DYNAMIC_SOURCES=\"L['x']\"" in dom
    line = next(i for i, ln in enumerate(open(programs.__file__), 1) if "if x.size(0) > 6:" in ln)
    assert f"programs.py:{line}</a>" in dom and "if x.size(0) &gt; 6:" in dom  # the user line, linked
    index_dom = _chromium("--dump-dom", (out / "index.html").as_uri()).stdout
    assert "<svg" in index_dom and "mark it dynamic" in index_dom


# ------------------------------------------------------------------------------ several ranks
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_worker(rank, world, port, tracedir, pgodir):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        with ds.config.patch(trace_dir=tracedir, pgo_dir=pgodir, pgo=False):
            f = ds.compile(lambda x: x * 2)
            for n in ([4, 4, 4] if rank == 0 else [4, 5, 6]):  # rank 1 recompiles, rank 0 does not
                f(torch.randn(n, 3))
            trace.writer().close()
            trace.writer().flush()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_the_report_merges_the_traces_of_several_ranks(tmp_path):
    import torch.multiprocessing as mp
    mp.spawn(_rank_worker, args=(2, _free_port(), str(tmp_path / "trace"), str(tmp_path / "pgo")), nprocs=2,
             join=True)
    files = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / "trace" / "*.log")))
    assert [f[:len("dedicated_log_torch_trace_rank_0")] for f in files] == [
        "dedicated_log_torch_trace_rank_0", "dedicated_log_torch_trace_rank_1"]
    runs = report.load(str(tmp_path / "trace"))
    assert [r.label for r in runs] == ["rank 0", "rank 1"]
    assert [len(next(iter(r.functions.values())).compiles) for r in runs] == [1, 2]
    index = report_html.write_site(runs, str(tmp_path / "out"))
    html = open(index).read()
    assert "Across ranks" in html and "rank 0" in html and "rank 1" in html
    assert "<td>1 compile(s)</td><td>2 compile(s)<br>" in html  # the cross-rank row shows the divergence
    assert "ds.config.enable_compiler_collectives = True" in html  # and what to do about it
    assert os.path.exists(tmp_path / "out" / "run1_fn0.html")
    tlparse = shutil.which("tlparse") or os.path.join(os.path.dirname(sys.executable), "tlparse")
    if os.path.exists(tlparse):  # tlparse's own multi-rank view finds our files by their names
        p = subprocess.run([tlparse, "--all-ranks-html", str(tmp_path / "trace"), "-o", str(tmp_path / "tl"),
                            "--no-browser"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / "tl" / "rank_0" / "index.html").exists() and (tmp_path / "tl" / "rank_1").is_dir()
