"""A trainer that only reads: each step takes this rank's batch of the job's ``train`` input and
writes down the ids it held, so a test can count every id across ranks, sessions and groups.

Rank 0 saves the reader's state with its step every ``--save-every`` steps into
$TONY_CHECKPOINT_DIR (what the runtime mirrors and gives every task of the next session); every
rank starts from it. ``--hang-at STEP`` makes rank ``--hang-rank`` of the first session stop there
(after writing ``hanging`` into ``--out``) until it is killed. The ranks step together, as a
synchronous job's do: none starts a step before every rank has finished the one before (a barrier
of files in ``--out``, per session).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from tony_workflow.data import dataset


def barrier(out: Path, session: int, rank: int, world: int, step: int) -> None:
    """Says this rank reached ``step``, and waits until every rank has."""
    mine = out / f"at-s{session}-r{rank}"
    part = mine.with_suffix(".tmp")
    part.write_text(str(step))
    os.replace(part, mine)
    while True:
        seen = []
        for r in range(world):
            try:
                seen.append(int((out / f"at-s{session}-r{r}").read_text()))
            except (FileNotFoundError, ValueError):
                seen.append(-1)
        if min(seen) >= step:
            return
        time.sleep(0.005)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--step-sleep", type=float, default=0.02)
    args = p.parse_args()
    session = int(os.environ.get("SESSION_ID", "0"))
    store = Path(os.environ["TONY_CHECKPOINT_DIR"])
    out = Path(args.out)
    ds = dataset("train", batch_size=args.batch, shuffle=True, seed=3)
    rank, world = ds.group()
    step = 0
    saved = store / "data-state.json"
    if saved.exists():
        state = json.loads(saved.read_text())
        ds.load_state_dict(state["data"])
        step = state["step"]
    with open(out / f"ids-r{rank}.jsonl", "a") as log:
        print(f"[reader] rank={rank}/{world} session={session} start_step={step} epoch={ds.epoch}", flush=True)
        while ds.epoch < args.epochs:
            epoch = ds.epoch
            for k, batch in enumerate(ds):
                barrier(out, session, rank, world, step)
                at = ds.state_dict()["steps"] - 1  # this batch's step within the epoch's segment
                log.write(json.dumps({"session": session, "epoch": epoch, "step": step, "k": k, "at": at,
                                      "ids": batch["id"].tolist()}) + "\n")
                log.flush()
                step += 1
                if rank == 0 and step % args.save_every == 0:
                    part = saved.with_suffix(".tmp")
                    part.write_text(json.dumps({"step": step, "data": ds.state_dict()}))
                    os.replace(part, saved)
                if session == 0 and rank == args.hang_rank and step == args.hang_at:
                    (out / "hanging").write_text(str(step))
                    while True:
                        time.sleep(1)
                time.sleep(args.step_sleep)
    print(f"[reader] rank={rank} session={session} done steps={step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
