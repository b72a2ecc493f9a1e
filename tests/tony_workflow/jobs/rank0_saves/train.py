"""A torchrun script in the usual idiom, for tony.elastic.regroup=restart: rank 0 alone saves the
training state into $TONY_CHECKPOINT_DIR every --save-every steps, and every rank loads it from
there when it starts. It prints where each rank started and, at the end, a digest of its
parameters and its optimizer's momentum (which DistributedDataParallel does not keep equal: a rank
that started from another checkpoint ends with another digest).

Arguments: total steps, save every, seconds per step."""
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tony_workflow import report

total, save_every, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
path = os.path.join(os.environ["TONY_CHECKPOINT_DIR"], "state.pt")
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
step = 0
if os.path.exists(path):
    saved = torch.load(path, weights_only=False)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    step = saved["step"]
group = os.environ.get("TONY_ELASTIC_ROUND", "-")  # the rendezvous round this group formed in
print(f"round={group} rank={rank} world={world} start_step={step}", flush=True)
ddp = DistributedDataParallel(model)
while step < total:
    g = torch.Generator().manual_seed(step * 100 + rank)
    x = torch.randn(24, 16, generator=g)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True)).backward()
    optimizer.step()
    step += 1
    if rank == 0 and step % save_every == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)
        print(f"saved step={step}", flush=True)
    if rank == 0:
        report(step=step, total=total)
    time.sleep(pause)
momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in [*model.parameters(), *momentum]))
print(f"rank={rank} done steps={step} state={digest.hexdigest()[:16]}", flush=True)
dist.destroy_process_group()
