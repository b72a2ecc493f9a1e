"""An elastic trainer that only reads: it trains through tony_workflow.torch_elastic.run with the
reader in its State, each step's batch taken by every rank of the generation and joined with
gloo (an all-reduce of the ids' sum: a real collective, which a lost member breaks). Each rank
writes down the ids it took before the collective ("took") and that the step was done after it
("done"): a step counts when some rank saw its collective complete, with every member's batch in
it, the one a member killed right after the collective included; a step whose collective failed
does not count, and is taken again by the next generation."""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tony_workflow import report
from tony_workflow.data import dataset
from tony_workflow.torch_elastic import State, run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--global-batch", type=int, default=30)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--step-sleep", type=float, default=0.3)
    args = p.parse_args()
    out = Path(args.out)
    ds = dataset("train", batch_size=args.global_batch, shuffle=True, seed=5)
    state = State(step=0, data=ds)
    me = os.environ.get("TONY_TASK_ID", "?")

    def train(state: State, group) -> None:
        ds.set_group(group.rank, group.world_size)
        ds.batch_size = args.global_batch // group.world_size
        print(f"[elastic-reader] {me} rank={group.rank} world={group.world_size} start_step={state.step} "
              f"epoch={ds.epoch}", flush=True)
        with open(out / f"ids-{me.replace(':', '-')}-{os.getpid()}.jsonl", "a") as log:
            while ds.epoch < args.epochs:
                epoch = ds.epoch
                for batch in ds:
                    ids = torch.tensor(batch["id"])
                    mark = {"generation": group.generation, "step": state.step + 1, "epoch": epoch,
                            "world": group.world_size, "rank": group.rank}
                    log.write(json.dumps({**mark, "phase": "took", "ids": ids.tolist()}) + "\n")
                    log.flush()
                    total = torch.tensor([int(ids.sum())], dtype=torch.int64)
                    if group.world_size > 1:
                        dist.all_reduce(total)
                    state.step += 1
                    log.write(json.dumps({**mark, "phase": "done"}) + "\n")
                    log.flush()
                    if group.rank == 0:
                        report(step=state.step)
                    time.sleep(args.step_sleep)
                    state.commit()

    run(train, state)
    print(f"[elastic-reader] {me} done steps={state.step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
