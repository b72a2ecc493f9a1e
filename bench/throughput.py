"""throughput: training steps/s of the MWMS example under the runtime, against the same script by hand.

Both ways run ``examples/mnist_mwms/train.py`` on two workers with the same arguments, each piped
through ``tools/stamp.py`` so that every progress line carries the time it was printed:

* runtime: ``examples/mnist_mwms/mnist_mwms.yaml`` on the local backend, as a user submits it
  (TensorBoard on the chief, the checkpoint mirror, heartbeats, task metrics sampled every second,
  progress reported by the Keras callback), with only the command replaced to add the pipe;
* by hand: two processes started by this script with the TF_CONFIG the runtime would give them
  (two workers on 127.0.0.1), their own checkpoint and log directories, from a copy of the example.

The rate is worker 0's, from its first logged step to its last (start-up excluded: that is what
the launch benchmark measures). Runs alternate in back-to-back pairs, and the ratio is the median
of the pairs' ratios, which cancels load that drifts between pairs on a shared machine.
A third way, the runtime with ``tony.task.tensorboard.enabled=false``, shows what TensorBoard costs.

Goal: runtime / by hand >= 0.98.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import common
from common import log, median, rnd

GOAL = 0.98
EXAMPLE = common.EXAMPLES / "mnist_mwms"
STAMP = common.BENCH / "tools" / "stamp.py"
STEP = re.compile(r"^(\d+\.\d+) \[mnist\] session=\d+ step=(\d+) loss=")


def command(params: str) -> str:
    # pipefail: a training failure must not hide behind the stamper's exit status.
    return f"set -o pipefail; python train.py {params} | python {STAMP}"


def rate(text: str) -> dict:
    points = [(float(m.group(1)), int(m.group(2))) for m in map(STEP.match, text.splitlines()) if m]
    if len(points) < 3:
        raise RuntimeError(f"too few step lines to time:\n{text[-2000:]}")
    (t0, s0), (t1, s1) = points[0], points[-1]
    return {"steps_per_s": (s1 - s0) / (t1 - t0), "steps": s1 - s0, "seconds": t1 - t0,
            "timeline": [[round(t - t0, 3), s] for t, s in points]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_hand(params: str) -> dict:
    d = Path(tempfile.mkdtemp(prefix="throughput-hand-"))
    try:
        src = d / "src"
        shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("__pycache__"))
        cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        procs = []
        for i in range(2):
            env = {**os.environ, "PATH": path, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
                   "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                   "SESSION_ID": "0", "TONY_CHECKPOINT_DIR": str(d / f"checkpoint-{i}"),
                   "TONY_LOG_DIR": str(d / f"tensorboard-{i}")}
            (d / f"checkpoint-{i}").mkdir()
            procs.append(subprocess.Popen(["bash", "-c", command(params)], cwd=src, env=env, stdin=subprocess.DEVNULL,
                                          stdout=open(d / f"stdout-{i}", "wb"), stderr=open(d / f"stderr-{i}", "wb")))
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise RuntimeError(f"by-hand run failed {codes}: {(d / 'stderr-0').read_text()[-2000:]}")
        return rate((d / "stdout-0").read_text())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def under_runtime(params: str, tensorboard: bool = True) -> dict:
    from tony_workflow.client import TonyClient, load_job
    # Figures sampled every second (five times TonY's default) and every step's progress
    # reported by the example's Keras callback: what watching a job costs it.
    conf = {"tony.containers.command": command(params), "tony.task.metrics-interval-ms": "1000"}
    if not tensorboard:
        conf["tony.task.tensorboard.enabled"] = "false"
    with common.tony_home("tony-bench-throughput-"):
        h = TonyClient("local").submit(load_job(str(EXAMPLE / "mnist_mwms.yaml"), conf=conf))
        st = h.wait(poll_interval=1.0, timeout=900)
        if st.state != "SUCCEEDED":
            raise RuntimeError(f"runtime run {st.state}: {st.diagnostics[-2000:]}")
        return rate(common.task_stdout(h, "worker:0"))


def clean(run: dict) -> dict:
    return {k: (v if k == "timeline" else rnd(v, 3)) for k, v in run.items()}


def main() -> int:
    ap = common.parser("throughput", __doc__)
    ap.add_argument("--reps", type=int, default=None, help="alternating pairs (default 5; --quick 1)")
    ap.add_argument("--no-tensorboard-variant", action="store_true", help="skip the runtime-without-TensorBoard runs")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    params = "--epochs 1 --steps-per-epoch 80 --save-freq 10" if args.quick else \
        "--epochs 3 --steps-per-epoch 200 --save-freq 10"
    variant = not (args.quick or args.no_tensorboard_variant)
    host = common.host_info()
    hand, tony, tony_no_tb = [], [], []
    for r in range(reps):
        # Alternate the order too, so neither way always runs on a machine just warmed by the other.
        order = ["hand", "tony"] if r % 2 == 0 else ["tony", "hand"]
        for way in order:
            if way == "hand":
                hand.append(by_hand(params))
            else:
                tony.append(under_runtime(params))
        if variant:
            tony_no_tb.append(under_runtime(params, tensorboard=False))
        log(f"rep {r + 1}/{reps}: by hand {hand[-1]['steps_per_s']:.1f} steps/s, runtime {tony[-1]['steps_per_s']:.1f}"
            + (f", runtime without TensorBoard {tony_no_tb[-1]['steps_per_s']:.1f}" if variant else ""))
    floor = median([x["steps_per_s"] for x in hand])
    value = median([x["steps_per_s"] for x in tony])
    # Each pair ran back to back: the median of their ratios cancels the load drifting between pairs.
    pairs = [t["steps_per_s"] / h["steps_per_s"] for h, t in zip(hand, tony)]
    ratio = median(pairs)
    result = {
        "metric": "MWMS example, 2 workers: steps/s under the runtime (local backend)",
        "unit": "steps/s", "value": rnd(value, 2), "floor": rnd(floor, 2), "ratio": rnd(ratio, 3),
        "goal": f"ratio >= {GOAL}", "goal_met": bool(ratio >= GOAL),
        "params": {"task_params": params, "reps": reps, "spec": "examples/mnist_mwms/mnist_mwms.yaml"},
        "ratio_of_medians": rnd(value / floor, 3), "pair_ratios": [rnd(x, 3) for x in pairs],
        "by_hand": [clean(x) for x in hand],
        "runtime": [clean(x) for x in tony],
    }
    if variant:
        result["value_no_tensorboard"] = rnd(median([x["steps_per_s"] for x in tony_no_tb]), 2)
        result["runtime_no_tensorboard"] = [clean(x) for x in tony_no_tb]
        result["ratio_no_tensorboard"] = rnd(median([t["steps_per_s"] / h["steps_per_s"]
                                                     for h, t in zip(hand, tony_no_tb)]), 3)
    common.write_result(args, "throughput", result, host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
