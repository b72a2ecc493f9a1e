"""An elastic trainer that only reads: it trains through tony_workflow.torch_elastic.run with the
reader in its State, each step's batch taken by every rank of the generation and joined with
gloo (an all-reduce of the ids' sum: a real collective, which a lost member breaks). Each rank
writes down the ids it took before the collective ("took") and that the step was done after it
("done"): a step counts when some rank saw its collective complete, with every member's batch in
it, the one a member killed right after the collective included; a step whose collective failed
does not count, and is taken again by the next generation.

With ``--save`` (for tony.elastic.regroup=restart, where a change of the group or a relaunched
session starts the trainers again) rank 0 saves the step and the reader's state into
$TONY_CHECKPOINT_DIR after every step's collective, and every rank starts from there, as a torchrun
script does; each rank writes down where it started ("start"). ``--pause-while FILE``: no step
starts while FILE exists (a test holds the group still with it)."""
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
    p.add_argument("--save", action="store_true")
    p.add_argument("--pause-while")
    args = p.parse_args()
    out = Path(args.out)
    ds = dataset("train", batch_size=args.global_batch, shuffle=True, seed=5)
    state = State(step=0, data=ds)
    me = os.environ.get("TONY_TASK_ID", "?")
    saved = Path(os.environ["TONY_CHECKPOINT_DIR"]) / "data-state.json"
    if args.save and saved.exists():
        checkpoint = json.loads(saved.read_text())
        ds.load_state_dict(checkpoint["data"])
        state.step = checkpoint["step"]
    # The group this process trains in: a session's rendezvous round under torch's agent, the
    # generation regrouping in place.
    session, rendezvous = int(os.environ.get("SESSION_ID", "0")), int(os.environ.get("TONY_ELASTIC_ROUND", "-1"))

    def train(state: State, group) -> None:
        ds.set_group(group.rank, group.world_size)
        ds.batch_size = args.global_batch // group.world_size
        generation = group.generation if group.generation >= 0 else session * 1000 + rendezvous
        print(f"[elastic-reader] {me} rank={group.rank} world={group.world_size} start_step={state.step} "
              f"epoch={ds.epoch} session={session} round={rendezvous}", flush=True)
        with open(out / f"ids-{me.replace(':', '-')}-{os.getpid()}.jsonl", "a") as log:
            log.write(json.dumps({"generation": generation, "phase": "start", "step": state.step,
                                  "world": group.world_size, "rank": group.rank}) + "\n")
            log.flush()
            while ds.epoch < args.epochs:
                epoch = ds.epoch
                for batch in ds:
                    while args.pause_while and os.path.exists(args.pause_while):
                        time.sleep(0.05)
                    ids = torch.tensor(batch["id"])
                    mark = {"generation": generation, "step": state.step + 1, "epoch": epoch,
                            "world": group.world_size, "rank": group.rank}
                    log.write(json.dumps({**mark, "phase": "took", "ids": ids.tolist()}) + "\n")
                    log.flush()
                    total = torch.tensor([int(ids.sum())], dtype=torch.int64)
                    if group.world_size > 1:
                        dist.all_reduce(total)
                    state.step += 1
                    if args.save and group.rank == 0:
                        ds.commit()  # this step's batch is trained: the saved position is after it
                        part = saved.with_suffix(".tmp")
                        part.write_text(json.dumps({"step": state.step, "data": ds.state_dict()}))
                        os.replace(part, saved)
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
