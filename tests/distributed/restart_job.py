"""A training job for test_restart.py, run by torchrun --max-restarts 1 on 2 ranks.

Attempt 0: a compiled DDP model trains on batch sizes that change every step (a cold profile:
static, then dynamic: 2 compiles), then rank 1 dies hard mid-run. torchrun restarts both ranks;
attempt 1 starts from the PGO profile the first attempt left and compiles once. Each attempt
writes its compile counts to $OUT/attempt<k>-rank<r>.json.
"""
import json
import os
import time
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import dynashape as ds

warnings.simplefilter("ignore")
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
# a store per attempt: gloo on this torch would dial the addresses the dead attempt left in the agent's store
dist.init_process_group("gloo", init_method=f"file://{os.environ['OUT']}/store-{attempt}",
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
rank = dist.get_rank()
torch.manual_seed(0)
model = ds.compile(DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.randn(3 + rank + step, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if attempt == 0 and step == 4:
        with open(os.path.join(os.environ["OUT"], f"attempt0-rank{rank}.json"), "w") as f:
            json.dump({"compiles": model.stats.compiles}, f)
        dist.barrier()
        if rank == 1:
            os._exit(1)  # killed mid-run: no exit handlers, no final profile flush
        time.sleep(120)  # until torchrun, seeing rank 1 gone, stops this rank and restarts both
with open(os.path.join(os.environ["OUT"], f"attempt{attempt}-rank{rank}.json"), "w") as f:
    json.dump({"compiles": model.stats.compiles, "reasons": model.stats.recompile_reasons}, f)
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # the interpreter's teardown can abort in gloo's threads on this torch ("terminate called ...")
