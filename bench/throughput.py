"""throughput: training steps/s of the examples under the runtime, against the same script by hand.

Two examples, each on two workers, both ways running the example's own ``train.py`` with the same
arguments, piped through ``tools/stamp.py`` so that every progress line carries the time it was
printed:

* ``mwms`` (``examples/mnist_mwms``, TensorFlow's MultiWorkerMirroredStrategy), result
  ``throughput``; ``ddp`` (``examples/pytorch_ddp``, PyTorch DistributedDataParallel over gloo),
  result ``throughput_ddp``;
* runtime: the example's spec on the local backend, as a user submits it (TensorBoard on the
  chief, the checkpoint mirror, heartbeats, task metrics sampled every second, progress reported
  every step), with only the command replaced to add the pipe;
* by hand: two processes started by this script with the variables the runtime would give them
  (built by the runtime's own ``frameworks.build_env`` for two workers on 127.0.0.1, and the
  thread limits of a task of the spec's vcores, ``frameworks.thread_env``), their own checkpoint
  and log directories, from a copy of the example.

The rate is worker 0's, from its first logged step to its last (start-up excluded: that is what
the launch benchmark measures). Runs alternate in back-to-back pairs, and the ratio is the median
of the pairs' ratios, which cancels load that drifts between pairs on a shared machine.
A third way, the runtime with ``tony.task.tensorboard.enabled=false``, shows what TensorBoard costs;
with ``--followed`` a fourth, the runtime with its chief's output followed every second (as the
Airflow operator, the Azkaban runner and ``tony logs --follow`` follow it), what following costs
the job (goal: >= 0.98 of the same run not followed).

Goal: runtime / by hand >= 0.98 for each example.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import common
from common import log, median, rnd

GOAL = 0.98
STAMP = common.BENCH / "tools" / "stamp.py"


@dataclass(frozen=True)
class Example:
    """One example as this benchmark runs it: where it lives, its spec, the framework whose
    variables its workers get, how its progress lines read, and its arguments (full run, quick)."""

    name: str
    result: str
    directory: Path
    spec: str
    framework: str
    step: re.Pattern
    params: str
    quick_params: str
    title: str


EXAMPLES = {
    "mwms": Example("mwms", "throughput", common.EXAMPLES / "mnist_mwms", "mnist_mwms.yaml", "tensorflow",
                    re.compile(r"^(\d+\.\d+) \[mnist\] session=\d+ step=(\d+) loss="),
                    "--epochs 3 --steps-per-epoch 200 --save-freq 10", "--epochs 1 --steps-per-epoch 80 --save-freq 10",
                    "MWMS example, 2 workers"),
    "ddp": Example("ddp", "throughput_ddp", common.EXAMPLES / "pytorch_ddp", "pytorch_ddp.yaml", "pytorch",
                   re.compile(r"^(\d+\.\d+) \[ddp\] session=\d+ step=(\d+) loss="),
                   "--epochs 60 --save-every 10", "--epochs 10 --save-every 10", "PyTorch DDP example, 2 workers"),
}


def command(params: str) -> str:
    # pipefail: a training failure must not hide behind the stamper's exit status.
    return f"set -o pipefail; python train.py {params} | python {STAMP}"


def rate(text: str, step: re.Pattern) -> dict:
    points = [(float(m.group(1)), int(m.group(2))) for m in map(step.match, text.splitlines()) if m]
    if len(points) < 3:
        raise RuntimeError(f"too few step lines to time:\n{text[-2000:]}")
    (t0, s0), (t1, s1) = points[0], points[-1]
    return {"steps_per_s": (s1 - s0) / (t1 - t0), "steps": s1 - s0, "seconds": t1 - t0,
            "timeline": [[round(t - t0, 3), s] for t, s in points]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_hand(example: Example, params: str) -> dict:
    from tony_workflow.client import load_job
    from tony_workflow.frameworks import TaskContext, build_env, thread_env
    worker = load_job(example.directory / example.spec).tasks["worker"]
    d = Path(tempfile.mkdtemp(prefix="throughput-hand-"))
    try:
        src = d / "src"
        shutil.copytree(example.directory, src, ignore=shutil.ignore_patterns("__pycache__"))
        cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        procs = []
        for i in range(2):
            ctx = TaskContext(example.framework, cluster, "worker", i, is_chief=i == 0, monitored=2)
            env = {**os.environ, "PATH": path, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
                   **build_env(ctx), "SESSION_ID": "0", "TONY_CHECKPOINT_DIR": str(d / f"checkpoint-{i}"),
                   "TONY_LOG_DIR": str(d / f"tensorboard-{i}")}
            # The threads a task of the spec's vcores is given, as the runtime gives them: the floor
            # runs the same processes in the same environment, or the ratio measures the threads.
            env.update(thread_env(worker.resources.vcores, worker.processes, env))
            (d / f"checkpoint-{i}").mkdir()
            procs.append(subprocess.Popen(["bash", "-c", command(params)], cwd=src, env=env, stdin=subprocess.DEVNULL,
                                          stdout=open(d / f"stdout-{i}", "wb"),  # noqa: SIM115 - held by the worker
                                          stderr=open(d / f"stderr-{i}", "wb")))  # noqa: SIM115 - held by the worker
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise RuntimeError(f"by-hand run failed {codes}: {(d / 'stderr-0').read_text()[-2000:]}")
        return rate((d / "stdout-0").read_text(), example.step)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def under_runtime(example: Example, params: str, tensorboard: bool = True, followed: bool = False) -> dict:
    from tony_workflow.client import TonyClient, load_job
    # Figures sampled every second (five times TonY's default) and every step's progress
    # reported by the example's Keras callback: what watching a job costs it.
    conf = {"tony.containers.command": command(params), "tony.task.metrics-interval-ms": "1000"}
    if not tensorboard:
        conf["tony.task.tensorboard.enabled"] = "false"
    with common.tony_home("tony-bench-throughput-"):
        h = TonyClient("local").submit(load_job(str(example.directory / example.spec), conf=conf))
        if followed:  # its chief's output followed as the Airflow operator follows it, every second
            seen = []
            for update in h.follow(poll_interval=1.0, timeout=900, output=h.output(), on_output=seen.extend):
                st = update.status
            if not seen:
                raise RuntimeError("the followed run passed on no line of its chief's output")
        else:
            st = h.wait(poll_interval=1.0, timeout=900)
        if st.state != "SUCCEEDED":
            raise RuntimeError(f"runtime run {st.state}: {st.diagnostics[-2000:]}")
        return rate(common.task_stdout(h, "worker:0"), example.step)


def clean(run: dict) -> dict:
    return {k: (v if k == "timeline" else rnd(v, 3)) for k, v in run.items()}


def run_example(example: Example, args, reps: int, variant: bool, host: dict) -> None:
    params = example.quick_params if args.quick else example.params
    hand, tony, tony_no_tb, tony_followed = [], [], [], []
    for r in range(reps):
        # Alternate the order too, so neither way always runs on a machine just warmed by the other.
        order = ["hand", "tony"] if r % 2 == 0 else ["tony", "hand"]
        if args.followed:  # the followed run takes each place in turn beside its pair's runtime run
            order = [["followed", "tony", "hand"], ["hand", "followed", "tony"], ["tony", "hand", "followed"]][r % 3]
        for way in order:
            if way == "hand":
                hand.append(by_hand(example, params))
            elif way == "followed":
                tony_followed.append(under_runtime(example, params, followed=True))
            else:
                tony.append(under_runtime(example, params))
        if variant:
            tony_no_tb.append(under_runtime(example, params, tensorboard=False))
        if args.followed:
            log(f"{example.name} rep {r + 1}/{reps}: runtime with its chief's output followed "
                f"{tony_followed[-1]['steps_per_s']:.1f} steps/s")
        log(f"{example.name} rep {r + 1}/{reps}: by hand {hand[-1]['steps_per_s']:.1f} steps/s, "
            f"runtime {tony[-1]['steps_per_s']:.1f}"
            + (f", runtime without TensorBoard {tony_no_tb[-1]['steps_per_s']:.1f}" if variant else ""))
    floor = median([x["steps_per_s"] for x in hand])
    value = median([x["steps_per_s"] for x in tony])
    # Each pair ran back to back: the median of their ratios cancels the load drifting between pairs.
    pairs = [t["steps_per_s"] / h["steps_per_s"] for h, t in zip(hand, tony)]
    ratio = median(pairs)
    result = {
        "metric": f"{example.title}: steps/s under the runtime (local backend)",
        "unit": "steps/s", "value": rnd(value, 2), "floor": rnd(floor, 2), "ratio": rnd(ratio, 3),
        "goal": f"ratio >= {GOAL}", "goal_met": bool(ratio >= GOAL),
        "params": {"task_params": params, "reps": reps,
                   "spec": str((example.directory / example.spec).relative_to(common.REPO))},
        "ratio_of_medians": rnd(value / floor, 3), "pair_ratios": [rnd(x, 3) for x in pairs],
        "by_hand": [clean(x) for x in hand],
        "runtime": [clean(x) for x in tony],
    }
    if variant:
        result["value_no_tensorboard"] = rnd(median([x["steps_per_s"] for x in tony_no_tb]), 2)
        result["runtime_no_tensorboard"] = [clean(x) for x in tony_no_tb]
        result["ratio_no_tensorboard"] = rnd(median([t["steps_per_s"] / h["steps_per_s"]
                                                     for h, t in zip(hand, tony_no_tb)]), 3)
    if tony_followed:
        # Each followed run came right after its pair's runtime run: their ratio is what following costs.
        result["value_followed"] = rnd(median([x["steps_per_s"] for x in tony_followed]), 2)
        result["runtime_followed"] = [clean(x) for x in tony_followed]
        result["ratio_followed"] = rnd(median([f["steps_per_s"] / t["steps_per_s"]
                                               for t, f in zip(tony, tony_followed)]), 3)
        result["goal_followed"] = f"followed / not followed >= {GOAL}"
    common.write_result(args, example.result, result, host)


def main() -> int:
    ap = common.parser("throughput", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="alternating pairs (default 5; --quick 1)")
    ap.add_argument("--example", choices=[*EXAMPLES, "both"], default="both")
    ap.add_argument("--no-tensorboard-variant", action="store_true", help="skip the runtime-without-TensorBoard runs")
    ap.add_argument("--followed", action="store_true",
                    help="also run the runtime with its chief's output followed (as the Airflow operator does)")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    variant = not (args.quick or args.no_tensorboard_variant)
    host = common.host_info()
    for name, example in EXAMPLES.items():
        if args.example in (name, "both"):
            run_example(example, args, reps, variant, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
