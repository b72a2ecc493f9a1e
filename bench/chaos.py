"""chaos: kill -9 a random task at a random moment of training, in the PS and MWMS examples.

Each trial submits one example on the local backend with its own spec (MWMS: session relaunch,
``tony.am.retry-count: 1``; PS: ``restart_policy: task`` for workers, a session relaunch for the
chief or ps), waits until the chief has logged a randomly chosen step (plus up to 1 s), and
kill -9s the user process of a random task: any of worker:0 (chief) and worker:1 for MWMS; chief:0,
ps:0, worker:0, worker:1 for PS. Then it waits for the job's final state.

Steps lost beyond the last checkpoint: when the kill relaunched the session, the new chief's
``start_step`` is compared with the last checkpoint the trainer had written at the kill (for MWMS
the last logged step, which BackupAndRestore saved just before logging it; for PS the newest
``ckpt-N`` in the chief's checkpoint directory). Anything below is lost work. A worker relaunched
alone under PS loses nothing by construction (the coordinator re-runs its steps).

Runs with ``--step-sleep`` so that a kill lands in training rather than in TensorFlow's start-up,
and without TensorBoard (it takes CPU and is not what is tested).

Goal: all trials SUCCEEDED, nothing lost beyond the last checkpoint.
"""
from __future__ import annotations

import random
import re
import signal
import sys
import time
from pathlib import Path

import common
from common import log

EXAMPLES = {
    "mwms": {"spec": common.EXAMPLES / "mnist_mwms" / "mnist_mwms.yaml",
             "params": "--epochs 3 --steps-per-epoch 40 --save-freq 10 --step-sleep 0.1",
             "total": 120, "interval": 10, "chief": "worker:0", "victims": ["worker:0", "worker:1"],
             "step": re.compile(r"\[mnist\] session=(\d+) step=(\d+) "),
             "start": re.compile(r"\[mnist\] session=(\d+) task=worker:0 start_step=(\d+)")},
    "ps": {"spec": common.EXAMPLES / "ps_strategy" / "ps_strategy.yaml",
           "params": "--steps 200 --checkpoint-every 20 --step-sleep 0.05",
           "total": 200, "interval": 20, "chief": "chief:0", "victims": ["chief:0", "ps:0", "worker:0", "worker:1"],
           "step": re.compile(r"\[ps\] session=(\d+) step=(\d+) "),
           "start": re.compile(r"\[ps\] session=(\d+) start_step=(\d+)")},
}
CONF = {"tony.am.memory": "512m", "tony.task.tensorboard.enabled": "false"}


def chief_dir(h, chief: str) -> Path | None:
    st = h.status()
    t = st.task(chief)
    if t is None or not t.container_id:
        return None
    return h.backend.app_dir(h.app_id) / "containers" / t.container_id


def last_step(text: str, rx, session: int = 0) -> int | None:
    steps = [int(m.group(2)) for m in rx.finditer(text) if int(m.group(1)) == session]
    return steps[-1] if steps else None


def local_ps_checkpoint(cdir: Path) -> int | None:
    steps = [int(m.group(1)) for p in (cdir / "checkpoint" / "ps_ckpt").glob("ckpt-*.index")
             if (m := re.match(r"ckpt-(\d+)\.index$", p.name))]
    return max(steps) if steps else None


def trial(i: int, example: str, victim: str, target: int, jitter: float) -> dict:
    from tony_workflow.client import TonyClient, load_job
    ex = EXAMPLES[example]
    out = {"trial": i, "example": example, "victim": victim, "target_step": target}
    with common.tony_home("tony-bench-chaos-"):
        h = TonyClient("local").submit(load_job(str(ex["spec"]), conf=CONF, task_params=ex["params"]))
        out["app_id"] = h.app_id

        def reached():
            st = h.status()
            if st.is_final:
                return "final"
            cdir = chief_dir(h, ex["chief"])
            if cdir is None or not (cdir / "stdout").exists():
                return None
            step = last_step((cdir / "stdout").read_text(errors="replace"), ex["step"])
            return step is not None and step >= target and cdir
        cdir = common.wait_for(reached, 600, 0.05, f"chief at step {target}")
        if cdir == "final":
            out.update(state=h.status().state, note="ended before the kill")
            return out
        time.sleep(jitter)
        st = h.status()
        try:
            proc = common.user_process(st.task(victim).pid, "train.py")
            logged = last_step((cdir / "stdout").read_text(errors="replace"), ex["step"])
            ckpt = local_ps_checkpoint(cdir) if example == "ps" else (logged // ex["interval"]) * ex["interval"]
            proc.send_signal(signal.SIGKILL)
            out.update(killed_at=round(time.time(), 3), logged_step=logged, checkpoint_step=ckpt)
        except (LookupError, OSError, AttributeError) as e:
            out["note"] = f"victim gone before the kill: {e!r}"[:200]
        final = h.wait(poll_interval=0.5, timeout=900)
        out["state"] = final.state
        out["sessions"] = final.session_id + 1
        out["task_restarts"] = sum(t.restarts for t in final.tasks)
        if final.state != "SUCCEEDED":
            out["diagnostics"] = final.diagnostics[-1500:]
        text = common.task_stdout(h, ex["chief"])
        restarts = [(int(s), int(n)) for s, n in ex["start"].findall(text)]
        resumed = [n for s, n in restarts if s >= 1]
        out["restart_start_step"] = resumed[0] if resumed else None
        if "checkpoint_step" in out and resumed:
            out["steps_redone"] = out["logged_step"] - resumed[0]
            out["lost_beyond_checkpoint"] = max(0, out["checkpoint_step"] - resumed[0])
        elif "checkpoint_step" in out:
            out["lost_beyond_checkpoint"] = 0  # no session relaunch: training went on in place
        done = re.findall(r"done steps=(\d+)", text)
        out["final_steps"] = int(done[-1]) if done else None
    return out


def main() -> int:
    ap = common.parser("chaos", __doc__)
    ap.add_argument("--trials", type=int, default=None, help="trials (default 20; --quick 2)")
    ap.add_argument("--seed", type=int, default=20251121)
    args = ap.parse_args()
    trials = args.trials or (2 if args.quick else 20)
    rng = random.Random(args.seed)
    host = common.host_info()
    rows = []
    for i in range(trials):
        example = "mwms" if i % 2 == 0 else "ps"
        ex = EXAMPLES[example]
        victim = rng.choice(ex["victims"])
        target = rng.randrange(ex["interval"], ex["total"] - ex["interval"], 10)
        row = trial(i, example, victim, target, round(rng.uniform(0.0, 1.0), 2))
        rows.append(row)
        log(f"trial {i + 1}/{trials}: {example} kill {victim} at step~{row.get('logged_step')} "
            f"(checkpoint {row.get('checkpoint_step')}) -> {row.get('state')}, restart start_step="
            f"{row.get('restart_start_step')}, lost {row.get('lost_beyond_checkpoint')}")
    succeeded = sum(1 for r in rows if r.get("state") == "SUCCEEDED")
    lost = [r.get("lost_beyond_checkpoint") or 0 for r in rows]
    killed = [r for r in rows if "killed_at" in r]
    result = {
        "metric": "trials SUCCEEDED after kill -9 of a random task (PS and MWMS examples)",
        "unit": "trials", "value": succeeded, "floor": trials, "ratio": round(succeeded / trials, 3),
        "goal": f"{trials}/{trials} SUCCEEDED, 0 steps lost beyond the last checkpoint",
        "goal_met": bool(succeeded == trials and not any(lost)),
        "trials": trials, "kills_landed": len(killed),
        "trials_with_loss": sum(1 for x in lost if x), "max_steps_lost": max(lost) if lost else 0,
        "params": {"seed": args.seed, "conf": CONF, **{k: {"params": v["params"], "checkpoint_every": v["interval"]}
                                                       for k, v in EXAMPLES.items()}},
        "rows": rows,
    }
    common.write_result(args, "chaos", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
