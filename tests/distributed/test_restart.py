"""A rank killed mid-run and restarted by torchrun resumes from the PGO profile: one compile per entry."""
import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

from .harness import free_port

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
JOB = os.path.join(os.path.dirname(__file__), "restart_job.py")


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_a_rank_killed_and_restarted_by_torchrun_compiles_once_from_the_profile(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), DYNASHAPE_JOB_ID="restart-test", DYNASHAPE_CACHE_DIR=str(tmp_path / "cache"),
               OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=os.pathsep.join(sys.path))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", JOB]
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang: torchrun still running after 240 s\n{(e.stderr or '')[-3000:]}")
    assert run.returncode == 0, run.stderr[-3000:]
    first = [json.loads((tmp_path / f"attempt0-rank{r}.json").read_text())["compiles"] for r in range(2)]
    again = [json.loads((tmp_path / f"attempt1-rank{r}.json").read_text()) for r in range(2)]
    print(f"compiles per rank: cold attempt {first}, after the restart {[a['compiles'] for a in again]}")
    assert first == [2, 2]  # cold: static, then dynamic once the batch size changed
    assert [a["compiles"] for a in again] == [1, 1], again  # the profile made the batch dim dynamic


@pytest.mark.slow  # (make test-slow: CI runs it after make test)
def test_a_fresh_job_of_more_ranks_starts_from_the_fleets_profile(tmp_path):
    from . import ranks
    from .harness import run_ranks
    cache = str(tmp_path / "pgo")
    cold = run_ranks(2, ranks.pgo_job, cache, timeout=180)
    warm = run_ranks(4, ranks.pgo_job, cache, timeout=180)
    print(f"compiles per rank: a cold 2-rank job {[r['compiles'] for r in cold]}, "
          f"then a fresh 4-rank job {[r['compiles'] for r in warm]}")
    assert {r["key"] for r in cold + warm} == {"fleet-test:ranks"}  # one profile for every rank
    assert [r["compiles"] for r in cold] == [1, 1]  # the ranks' batch sizes differ: dynamic at once
    assert [r["compiles"] for r in warm] == [1, 1, 1, 1]
