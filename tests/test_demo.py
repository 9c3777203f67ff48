"""`make demo` (examples/demo.py) runs, and ends with the trace and the report of its own run."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_demo_ends_with_the_path_of_its_own_report(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), DYNASHAPE_CACHE_DIR=str(tmp_path / "pgo"), PYTHONPATH=ROOT,
               DYNASHAPE_JOB_ID="")
    env.pop("DYNASHAPE_TRACE", None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "demo.py")], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    m = re.search(r"open file://(\S+)$", last)
    assert m, last
    index = m.group(1)
    assert index.startswith(str(tmp_path)) and os.path.exists(index)
    html = open(index).read()
    assert "forward (demo.py:" in html and "clip_if_positive" in html and "mark it dynamic" in html
    assert "this run's compile trace:" in p.stdout
