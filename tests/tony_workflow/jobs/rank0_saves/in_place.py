"""The same training as train.py, regrouping in place (tony.elastic.regroup=in-place): it trains
through tony_workflow.torch_elastic.run, and rank 0 alone saves the state into
$TONY_CHECKPOINT_DIR every --save-every steps (every rank loads it there as it starts).

Arguments: total steps, save every, seconds per step, and optionally a hold file: while it exists,
every rank waits before its next step (saying so once), so a test can act between two steps however
slow the machine is."""
import hashlib
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

from tony_workflow import report
from tony_workflow.torch_elastic import State, run

total, save_every, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
hold = sys.argv[4] if len(sys.argv) > 4 else None
path = os.path.join(os.environ["TONY_CHECKPOINT_DIR"], "state.pt")
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
state = State(model=model, optimizer=optimizer, step=0)
if os.path.exists(path):
    saved = torch.load(path, weights_only=False)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    state.step = saved["step"]


def train(state, group):
    print(f"generation={group.generation} rank={group.rank} world={group.world_size} start_step={state.step}",
          flush=True)
    ddp = DistributedDataParallel(state.model)
    while state.step < total:
        if hold and os.path.exists(hold):
            print(f"holding rank={group.rank} step={state.step}", flush=True)
            while os.path.exists(hold):
                time.sleep(0.05)
        g = torch.Generator().manual_seed(state.step * 100 + group.rank)
        x = torch.randn(24, 16, generator=g)
        state.optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True)).backward()
        state.optimizer.step()
        state.step += 1
        if group.rank == 0 and state.step % save_every == 0:
            torch.save({"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict(),
                        "step": state.step}, path)
            print(f"saved step={state.step}", flush=True)
        if group.rank == 0:
            report(step=state.step, total=total)
        time.sleep(pause)
        state.commit()
    return group.rank


rank = run(train, state)
momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in [*model.parameters(), *momentum]))
print(f"rank={rank} done steps={state.step} state={digest.hexdigest()[:16]}", flush=True)
