"""A stand-in trainer, standard library only, for the tests whose subject is the runtime and not a
framework: it starts in a blink, where TensorFlow takes seconds to import and MNIST a minute to train.

It keeps the contract a real trainer keeps with the runtime: it reads its place from TF_CONFIG (or
the runtime's JOB_NAME and TASK_INDEX); it keeps its step in $TONY_CHECKPOINT_DIR the way
TensorFlow lays a checkpoint out (a ``checkpoint`` state file naming ``ckpt-<step>``, beside its
``.index`` and ``.data-*`` files: what the runtime reads to choose where a session resumes) and
resumes from it in a later session; at the end the chief writes ``final/metrics.json`` there, as
the examples do; it reports its progress with ``tony_workflow.report`` when the runtime gave it an
inbox; and it says what it did on its last line:

    [stand-in] worker:0 session=1 done steps=40 resumed=20

Faults where a test needs them, each for one task (``--fault-task``, default every one) and one
session (``--fault-session``, default the first):

- ``--die-at STEP`` exits with ``--exit-code`` (default 3) at that step;
- ``--hang-at STEP`` stops stepping and reporting at that step and sleeps until killed.

Every task counts its steps; the chief (``chief:0``, else ``worker:0``) writes the checkpoint,
every ``--save-every`` steps and at the end, as a real chief does.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

try:
    from tony_workflow import report
except ImportError:  # run outside tony-workflow's environment
    def report(step=None, total=None, **metrics):
        return None

TAG = "[stand-in]"


def place() -> tuple[str, int, dict]:
    """(type, index, cluster) from TF_CONFIG, else from the runtime's variables."""
    raw = os.environ.get("TF_CONFIG")
    if raw:
        config = json.loads(raw)
        task = config.get("task") or {}
        return str(task.get("type", "worker")), int(task.get("index", 0)), dict(config.get("cluster") or {})
    return os.environ.get("JOB_NAME", "worker"), int(os.environ.get("TASK_INDEX", "0")), {}


def saved_step(store: Path) -> int:
    """The step of the checkpoint the state file in ``store`` names (0: none)."""
    state = store / "checkpoint"
    if not state.is_file():
        return 0
    name = state.read_text().split('"')[1]
    return int(name.rsplit("-", 1)[1])


def write_checkpoint(store: Path, step: int) -> None:
    """``ckpt-<step>`` with its index and data, then the state file naming it (written last and
    renamed into place: a reader never sees it name a checkpoint not yet whole)."""
    store.mkdir(parents=True, exist_ok=True)
    name = f"ckpt-{step}"
    (store / f"{name}.data-00000-of-00001").write_text(json.dumps({"step": step}))
    (store / f"{name}.index").write_text(name)
    tmp = store / "checkpoint.tmp"
    tmp.write_text(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    tmp.replace(store / "checkpoint")
    for old in store.glob("ckpt-*"):
        if not old.name.startswith(f"{name}."):
            old.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--step-sleep", type=float, default=0.05)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--die-at", type=int)
    ap.add_argument("--hang-at", type=int)
    ap.add_argument("--exit-code", type=int, default=3)
    ap.add_argument("--fault-task", default="", help="the task the fault is for (type:index); every one if empty")
    ap.add_argument("--fault-session", type=int, default=0)
    args = ap.parse_args(argv)

    ttype, index, cluster = place()
    me = f"{ttype}:{index}"
    session = int(os.environ.get("SESSION_ID", "0"))
    chief = ("chief", 0) if "chief" in cluster else ("worker", 0)
    store = Path(os.environ["TONY_CHECKPOINT_DIR"]) if os.environ.get("TONY_CHECKPOINT_DIR") else None
    resumed = saved_step(store) if store is not None else 0
    faulty = (not args.fault_task or args.fault_task == me) and session == args.fault_session
    # The examples' own words for where a session began, which tests read in the job's logs.
    print(f"{TAG} session={session} task={me} start_step={resumed} steps={args.steps} "
          f"(cluster: {', '.join(f'{t}={len(a)}' for t, a in sorted(cluster.items())) or 'none'})", flush=True)

    def save(step: int) -> None:
        if store is not None and (ttype, index) == chief:
            write_checkpoint(store, step)

    for step in range(resumed + 1, args.steps + 1):
        if faulty and step == args.die_at:
            print(f"{TAG} {me} session={session} dies at step {step}", flush=True)
            return args.exit_code
        if faulty and step == args.hang_at:
            print(f"{TAG} {me} session={session} hangs at step {step}", flush=True)
            while True:
                time.sleep(3600)
        time.sleep(args.step_sleep)
        report(step=step, total=args.steps, loss=1.0 / step)
        if step % args.save_every == 0:
            save(step)
    save(args.steps)
    if store is not None and (ttype, index) == chief:
        (store / "final").mkdir(parents=True, exist_ok=True)
        (store / "final" / "metrics.json").write_text(json.dumps({"steps": args.steps, "resumed": resumed}))
    print(f"{TAG} {me} session={session} done steps={args.steps} resumed={resumed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
