"""Checks only a machine with an NVIDIA GPU can make, on the embedded cluster with real processes:

1. **Pinning**: a task given one GPU sees exactly that GPU (``CUDA_VISIBLE_DEVICES``, torch's
   device count), allocates on it, and ``nvidia-smi`` shows its process on that GPU; a task given
   none sees none; the executor's NVML sampling reports the task's GPU memory.
2. **Sharing**: a second job asking for the GPU while the first holds it waits (ALLOCATING, with
   the reason) and runs once the GPU is free, never both at once.
3. **NCCL**: the PyTorch DDP example on the GPU, through torch's elastic agent
   (``tony.worker.processes=gpus``), joins its process group with the NCCL backend
   (``NCCL_DEBUG=INFO`` shows the communicator's set-up) and trains.

Run with the repository on ``PYTHONPATH`` and torch installed: ``python3 bench/gpu_check.py
--out DIR``. It writes ``DIR/gpu_check.json`` (what was seen, and ``ok`` per check) and the
tasks' logs, and exits 0 only when every check held. docs/benchmarks.md records what it saw.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, subprocess, time
import torch
seen = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count(),
        "pid": os.getpid()}
if seen["count"]:
    block = torch.empty(int(2 * 2**30), dtype=torch.uint8, device="cuda:0")  # 2 GiB on the task's GPU
    seen["name"] = torch.cuda.get_device_name(0)
    seen["uuid"] = str(torch.cuda.get_device_properties(0).uuid)
    time.sleep(1.0)
    seen["smi"] = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader"],
                                 capture_output=True, text=True).stdout.strip().splitlines()
print("PROBE " + json.dumps(seen), flush=True)
time.sleep(float(os.environ.get("HOLD_S", "6")))
"""

ALL_REDUCE = r"""
import torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl")  # env://: the MASTER_ADDR, RANK and WORLD_SIZE the task was given
t = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
torch.cuda.synchronize()
print("ALLREDUCE", dist.get_backend(), dist.get_world_size(), t.tolist(), flush=True)
dist.destroy_process_group()
"""


def job(name: str, gpus: int, hold_s: int, src: Path) -> dict:
    return {"name": name, "framework": "standalone", "executes": "probe.py", "src_dir": str(src),
            "am": {"memory": "512m"},
            "tasks": {"worker": {"instances": 1, "memory": "4g", "vcores": 2, "gpus": gpus}},
            "shell_env": {"HOLD_S": str(hold_s)},
            "conf": {"tony.task.tensorboard.enabled": "false", "tony.task.metrics-interval-ms": "500"}}


def probe_of(handle) -> dict:
    """What the job's task saw ({} when it printed nothing)."""
    path = handle.logs("worker:0").get("worker:0/stdout")
    text = path.read_text() if path and path.exists() else ""
    lines = [x for x in text.splitlines() if x.startswith("PROBE ")]
    return json.loads(lines[0].removeprefix("PROBE ")) if lines else {}


def collect_logs(out: Path) -> None:
    """Every job's AM and task logs, in one file (what comes back from a device run is few files)."""
    with open(out / "logs.txt", "w") as sink:
        for f in sorted(Path(os.environ["TONY_HOME"]).glob("local/apps/*/**/*")):
            if f.is_file() and f.name in ("am.stderr", "am.stdout", "stdout", "stderr", "status.json"):
                sink.write(f"===== {f}\n{f.read_text(errors='replace')[-20000:]}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gpu-check"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["TONY_HOME"] = tempfile.mkdtemp(prefix="tony-gpu-home-")
    try:
        return check(args.out)
    finally:
        collect_logs(args.out)


def check(out: Path) -> int:
    from tony_workflow.client import TonyClient, load_job

    report: dict = {"nvidia_smi": subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout.strip()}
    import torch
    report["torch"] = torch.__version__
    src = Path(tempfile.mkdtemp(prefix="tony-gpu-src-"))
    (src / "probe.py").write_text(PROBE)
    (src / "all_reduce.py").write_text(ALL_REDUCE)
    client = TonyClient("local")

    # 1 and 2: one job holds the GPU; one with none runs beside it; one more for the GPU waits.
    started = time.time()
    holder = client.submit(load_job(job("gpu-holder", 1, 12, src)))
    cpu = client.submit(load_job(job("no-gpu", 0, 2, src)))
    while holder.status().state != "RUNNING" and not holder.status().is_final and time.time() - started < 120:
        time.sleep(0.5)
    print("holder:", holder.status().summary(), flush=True)
    waiter = client.submit(load_job(job("gpu-waiter", 1, 2, src)))
    time.sleep(3)
    waiting = waiter.status()
    print("waiter:", waiting.summary(), waiting.waiting_reason, flush=True)
    sampled = None
    while not holder.status().is_final:
        for t in holder.status().tasks:
            if t.metrics.get("gpu_mem_mb"):
                sampled = dict(t.metrics)
        time.sleep(0.5)
    finals = {h.app_id: h.wait(poll_interval=0.5, timeout=300) for h in (holder, cpu, waiter)}
    held, none, after = probe_of(holder), probe_of(cpu), probe_of(waiter)
    holder_st, waiter_st = finals[holder.app_id], finals[waiter.app_id]
    report["jobs"] = {s.name: {"state": s.state, "diagnostics": s.diagnostics} for s in finals.values()}
    # nvidia-smi names processes by their pid as the host sees it: in a sandbox it may list the
    # allocation under another pid, or none; what it says is recorded either way.
    report["pinning"] = {"with_gpu": held, "without_gpu": none, "sampled_metrics": sampled,
                         "smi_lists_the_task": any(line.startswith(f"{held.get('pid')},") for line in held.get("smi", [])),
                         "ok": held.get("count") == 1 and bool(held.get("cuda_visible_devices"))
                         and none.get("count") == 0 and none.get("cuda_visible_devices") == ""
                         and bool(sampled and sampled.get("gpu_mem_mb", 0) >= 1024)}
    report["sharing"] = {"waiter_state_while_held": waiting.state, "waiting_reason": waiting.waiting_reason,
                         "holder_finished_at": holder_st.finished_at, "waiter_started_at": waiter_st.started_at,
                         "waiter_probe": after,
                         "ok": waiting.state == "ALLOCATING" and bool(waiting.waiting_reason)
                         and after.get("count") == 1 and all(s.succeeded for s in finals.values())}

    # 3: NCCL through torch's agent on the GPU.
    spec = load_job(str(REPO / "examples" / "pytorch_ddp" / "pytorch_ddp.yaml"),
                    conf=["tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.processes=gpus",
                          "tony.worker.memory=8g", "tony.task.tensorboard.enabled=false"],
                    task_params="--epochs 2 --save-every 10", shell_env={"NCCL_DEBUG": "INFO"})
    ddp = client.submit(spec)
    st = ddp.wait(poll_interval=1, timeout=300)
    logs = ddp.logs("worker:0")
    text = "".join(p.read_text(errors="replace") for p in logs.values() if p.exists())
    (out / "ddp_worker.log").write_text(text[-400_000:])
    # One GPU makes a group of one: DDP then runs no collective. An all-reduce of its own makes
    # NCCL set a communicator up.
    reduce_job = client.submit(load_job({
        "name": "nccl-all-reduce", "framework": "pytorch", "executes": "all_reduce.py", "src_dir": str(src),
        "am": {"memory": "512m"}, "tasks": {"worker": {"instances": 1, "memory": "4g", "gpus": 1}},
        "shell_env": {"NCCL_DEBUG": "INFO"}, "conf": {"tony.task.tensorboard.enabled": "false"}}))
    reduced = reduce_job.wait(poll_interval=0.5, timeout=180)
    reduce_text = "".join(p.read_text(errors="replace") for p in reduce_job.logs("worker:0").values() if p.exists())
    (out / "all_reduce_worker.log").write_text(reduce_text[-400_000:])
    nccl = [line for line in (text + reduce_text).splitlines() if "NCCL INFO" in line or "ALLREDUCE" in line]
    report["nccl"] = {"ddp": {"state": st.state, "diagnostics": st.diagnostics, "progress": st.progress,
                              "process_group_nccl": "ProcessGroupNCCL" in text},
                      "all_reduce": {"state": reduced.state, "diagnostics": reduced.diagnostics},
                      "lines": [x for x in nccl if "Init COMPLETE" in x or "ALLREDUCE" in x or "NET/" in x][:12],
                      "ok": st.succeeded and reduced.succeeded and "ProcessGroupNCCL" in text
                      and any("Init COMPLETE" in x for x in nccl) and "ALLREDUCE nccl 1 [1.0, 1.0, 1.0, 1.0]" in reduce_text}
    report["ok"] = all(report[k]["ok"] for k in ("pinning", "sharing", "nccl"))
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report, indent=1, default=str))
    shutil.rmtree(src, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
