"""The structured compile trace: records in tlparse's line format, and tlparse reading them."""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import dynashape as ds
from dynashape.logs import report, trace
from dynashape.symbolic import tracehook

from .programs import branchy, clip_positive, run_demo_like

GLOG = re.compile(r"^[VIWEC]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^:]+:\d+\] \{")  # tlparse's prefix


def _trace_of(tmp_path, fn):
    with ds.config.patch(trace_dir=str(tmp_path)):
        out = fn()
    trace.writer().flush()
    files = glob.glob(str(tmp_path / "*.log"))
    assert len(files) == 1, files
    return files[0], out


def _kinds(path):
    out = []
    for env, payload in report.records(path):
        assert env is not None
        kind = next(k for k in env if k not in ("rank", "frame_id", "frame_compile_id", "attempt", "has_payload"))
        out.append((kind, env, payload))
    return out


def test_tracing_is_off_by_default_and_on_while_a_directory_is_set(tmp_path):
    assert not tracehook.on
    with ds.config.patch(trace_dir=str(tmp_path)):
        assert tracehook.on
    assert not tracehook.on
    ds.compile(branchy)(torch.randn(3, 4))
    assert not os.listdir(tmp_path)


def test_every_line_has_the_glog_prefix_and_payloads_match_their_md5(tmp_path):
    path, _ = _trace_of(tmp_path, run_demo_like)
    lines = open(path).read().splitlines()
    assert os.path.basename(path).startswith("dedicated_log_torch_trace_")
    assert all(GLOG.match(ln) or ln.startswith("\t") for ln in lines)
    for _, env, payload in _kinds(path):
        if "has_payload" in env:
            assert hashlib.md5(payload.encode()).hexdigest() == env["has_payload"]


def test_a_compile_records_its_stack_symbols_guards_graph_code_and_metrics(tmp_path):
    def program():
        f = ds.compile(branchy)
        for n in (2, 3, 8):
            f(torch.randn(n, 4))
    path, _ = _trace_of(tmp_path, program)
    recs = _kinds(path)
    kinds = [k for k, _, _ in recs]
    for k in ("str", "dynamo_start", "create_symbol", "guard_added_fast", "dynamo_output_graph", "dynamo_guards",
              "dynamo_cpp_guards_str", "compilation_metrics"):
        assert k in kinds, k
    starts = [e for k, e, _ in recs if k == "dynamo_start"]
    assert [(e["frame_id"], e["frame_compile_id"]) for e in starts] == [(0, 0), (0, 1), (0, 2)]
    assert starts[0]["dynamo_start"]["stack"][-1]["name"] == "branchy"
    assert starts[0]["dynamo_start"]["inputs"] == {"L['x']": [2, 4]}
    assert "size mismatch at index 0. expected 2, actual 3" in starts[1]["dynamo_start"]["reasons"][0]
    sym = next(e["create_symbol"] for k, e, _ in recs if k == "create_symbol")
    assert sym["source"] == "L['x'].size()[0]" and sym["val"] == "3"
    guard = next(e["guard_added_fast"] for k, e, _ in recs if k == "guard_added_fast")
    assert guard["expr"] == "x.size(0) <= 6"
    assert guard["user_stack"][-1]["loc"] == "if x.size(0) > 6:  # a guard on a size, from this line"
    graphs = [p for k, _, p in recs if k == "dynamo_output_graph"]
    assert "f32[s0, 4]" in graphs[1]
    guards = json.loads([p for k, _, p in recs if k == "dynamo_guards"][1])
    assert any(g["code"] == "0 <= L['x'].size()[0] <= 6" and g["user_stack"] for g in guards)
    code = [p for k, e, p in recs if k == "artifact" and e["artifact"]["name"] == "generated_code"]
    assert code and "def forward(L):" in code[0]
    metrics = [e["compilation_metrics"] for k, e, _ in recs if k == "compilation_metrics"]
    assert len(metrics) == 3 and set(metrics[1]["phases_s"]) == {"trace", "guards", "codegen"}
    assert metrics[1]["dynamic_sources"]["L['x'].size()[0]"].startswith("automatic: seen with 2 and 3")


def test_graph_breaks_data_dependent_errors_specializations_and_limit_hits_are_recorded(tmp_path):
    def program():
        ds.compile(clip_positive)(torch.randn(4))

        def count_branch(x):
            if x.nonzero().size(0) > 2:  # data-dependent size
                return x + 1
            return x
        with pytest.raises(ds.DataDependentError), ds.config.patch(speculate_data_branches=False):
            ds.compile(count_branch, fullgraph=True)(torch.randn(4))

        @ds.compile(dynamic=True)
        def spec(x):
            return x.reshape(int(x.size(0)), -1)  # int() specializes the size
        spec(torch.randn(3, 2))
        with ds.config.patch(recompile_limit=1):
            f = ds.compile(branchy, dynamic=False)
            with pytest.warns(UserWarning):
                for n in (2, 3, 4):
                    f(torch.randn(n, 4))
    path, _ = _trace_of(tmp_path, program)
    recs = _kinds(path)
    arts = {}
    for k, e, p in recs:
        if k == "artifact":
            arts.setdefault(e["artifact"]["name"], p)
    assert "if x.sum() > 0:" in json.loads(arts["graph_break"])["reason"]
    assert "x.nonzero().size(0) > 2" in arts["data_dependent_error"]
    assert "hit recompile_limit" in arts["recompile_limit_hit"]
    metrics = [e["compilation_metrics"] for k, e, _ in recs if k == "compilation_metrics"]
    assert metrics[0]["fail_type"] == "GraphBreak (runs eagerly)" and metrics[0]["fail_user_frame_lineno"]
    assert metrics[1]["fail_type"] == "DataDependentError"
    spec = [e["symbolic_shape_specialization"] for k, e, _ in recs if k == "symbolic_shape_specialization"]
    assert spec and spec[0]["sources"] == ["L['x'].size()[0]"] and spec[0]["value"] == "3"


def test_a_traced_compile_costs_little_more(tmp_path, monkeypatch):
    """What a compile pays for tracing (queueing records; the writer thread formats them later).
    bench/trace_overhead.py measures it properly; here the best of 7 guards against regressions."""
    import time
    monkeypatch.setattr(trace.Writer, "soon", lambda self: None)  # formatting happens in flush(), untimed

    def compile_once():
        ds.reset()
        f = ds.compile(branchy, dynamic=True)
        t = time.perf_counter()
        f(torch.randn(5, 4))
        dt = time.perf_counter() - t
        trace.writer().flush()
        return dt
    compile_once()
    off = min(compile_once() for _ in range(7))
    with ds.config.patch(trace_dir=str(tmp_path)):
        on = min(compile_once() for _ in range(7))
    assert on < off * 1.3 + 0.001, (on, off)


TLPARSE = shutil.which("tlparse") or (os.path.join(os.path.dirname(sys.executable), "tlparse")
                                      if os.path.exists(os.path.join(os.path.dirname(sys.executable), "tlparse"))
                                      else None)


@pytest.mark.skipif(TLPARSE is None, reason="tlparse is not installed (pip install tlparse: a dev extra)")
def test_tlparse_renders_our_compiles_guards_and_graphs(tmp_path):
    path, _ = _trace_of(tmp_path / "trace", run_demo_like)
    out = tmp_path / "tl_out"
    p = subprocess.run([TLPARSE, path, "-o", str(out), "--no-browser", "--strict"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    index = (out / "index.html").read_text()
    for cid in ("[0/0]", "[0/1]", "[0/2]", "[1/0]", "[2/0]"):
        assert cid in index, cid
    assert "programs.py" in index  # the stack trie shows the user's frames
    graph = (out / "-_0_2_0").glob("dynamo_output_graph_*.txt")
    assert "f32[s0, s1, 32]" in next(graph).read_text()
    guards = next((out / "-_1_1_0").glob("dynamo_guards_*.html")).read_text()
    assert "L[&#39;x&#39;].size()[0] &lt;= 6" in guards or "L['x'].size()[0] &lt;= 6" in guards
    metrics = next((out / "-_1_1_0").glob("compilation_metrics_*.html")).read_text()
    assert "x.size(0) &gt; 6" in metrics  # the guard's user line, on the compile's page
    failures = (out / "failures_and_restarts.html").read_text()
    assert "GraphBreak" in failures and "demo.py" in failures


def test_with_tracing_off_no_hook_reaches_the_writer(monkeypatch):
    calls = []
    monkeypatch.setattr(trace.Writer, "__call__", lambda self, kind, *a: calls.append(kind))
    f = ds.compile(branchy)
    for n in (2, 3, 8):
        f(torch.randn(n, 4))
    assert f.stats.compiles == 3 and calls == []


def test_a_failing_writer_turns_tracing_off_and_the_compile_goes_on(tmp_path, monkeypatch):
    def broken(self, kind, *args):
        raise OSError("disk full")
    monkeypatch.setattr(trace.Writer, "on_create_symbol", broken)
    with ds.config.patch(trace_dir=str(tmp_path)):
        f = ds.compile(branchy, dynamic=True)
        with pytest.warns(UserWarning, match="the compile trace is off from now on"):
            assert f(torch.randn(3, 4)).shape == ()
        assert not tracehook.on
    tracehook.set_directory("")
    trace.install()


def test_a_backend_reports_its_kernel_compile_time_and_cache_lookups(tmp_path):
    from dynashape.backends.eager import EagerBackend

    class Cached(EagerBackend):  # what a fused backend with a disk cache would say
        def __call__(self, graph):
            if tracehook.on: tracehook.emit("kernel_cache", False, "abc123")  # noqa: E701
            if tracehook.on: tracehook.emit("phase", "kernel_compile", 0.25)  # noqa: E701
            return super().__call__(graph)

    path, _ = _trace_of(tmp_path, lambda: ds.compile(branchy, backend=Cached())(torch.randn(3, 4)))
    recs = _kinds(path)
    assert any(k == "artifact" and e["artifact"]["name"] == "fused_kernel_cache_miss" for k, e, _ in recs)
    metrics = next(e["compilation_metrics"] for k, e, _ in recs if k == "compilation_metrics")
    assert metrics["phases_s"]["kernel_compile"] == 0.25


def test_the_environment_variable_traces_a_whole_process_to_its_exit(tmp_path):
    code = ("import torch, dynashape as ds\n"
            "f = ds.compile(lambda x: x * 2)\n"
            "for n in (2, 3, 4): f(torch.randn(n))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, DYNASHAPE_TRACE=str(tmp_path), PYTHONPATH=root, DYNASHAPE_JOB_ID="")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    (path,) = glob.glob(str(tmp_path / "*.log"))
    recs = _kinds(path)
    names = [e["artifact"]["name"] for k, e, _ in recs if k == "artifact"]
    assert names[0] == "dynashape_run" and names[-1] == "dynashape_run_end"  # written at exit
    assert sum(k == "compilation_metrics" for k, _, _ in recs) == 2
    (run,) = report.load(str(tmp_path))
    assert run.end["functions"][0]["compiles"] == 2


def test_the_report_command_says_what_to_do_when_there_is_no_trace(tmp_path, capsys):
    from dynashape.__main__ import main
    assert main(["report", str(tmp_path)]) == 1
    assert "DYNASHAPE_TRACE=" in capsys.readouterr().err


def test_a_record_that_cannot_be_printed_is_replaced_by_an_error_record(tmp_path):
    def boom():
        raise ValueError("no")

    def program():
        trace.writer().record("artifact", {"name": "x", "encoding": "string"}, boom, cid=None)
        ds.compile(branchy)(torch.randn(3, 4))
    with ds.config.patch(trace_dir=str(tmp_path)):
        program()
    trace.writer().flush()
    (path,) = glob.glob(str(tmp_path / "*.log"))
    arts = [(e["artifact"]["name"], p) for k, e, p in _kinds(path) if k == "artifact"]
    assert ("trace_error", "could not write a 'artifact' record: ValueError('no')") in arts
    assert any(k == "compilation_metrics" for k, _, _ in _kinds(path))
