"""Progress (:mod:`tony_workflow.progress`): a task's and the job's, with rate and ETA, as the status
line shows them; and seeing a job run end to end: metrics and progress while it runs and kept at
its end, a frozen user process found out. The end-to-end tests run real executors and user
processes on the embedded cluster; the only fake is NVML in the GPU test (this machine has no
GPU), which says so where it is used."""
from __future__ import annotations

import json
import textwrap

import psutil
import pytest

from tests.conftest import run_tony, wait_for
from tests.tony_workflow.jobs.test_runtime import events, submit
from tony_workflow.client.follow import Follower
from tony_workflow.progress import TaskProgress, job_progress
from tony_workflow.status import JobStatus, progress_text


def test_task_progress_gives_a_fraction_a_rate_and_an_eta():
    p = TaskProgress()
    assert not p.update(None, 100.0) and p.to_dict() is None
    assert p.update({"step": 10, "total": 110, "reports": 1, "age": 0.0}, 100.0)
    assert not p.update({"step": 10, "total": 110, "reports": 1, "age": 0.0}, 101.0), "the same report again"
    assert p.update({"step": 30, "reports": 2, "age": 1.0}, 111.0)  # made at 110: 20 steps in 10 s
    assert p.updated_at == 110.0 and p.fraction == round(30 / 110, 4)
    assert p.rate() == pytest.approx(2.0)
    assert p.eta(110.0) == pytest.approx(40.0) and p.eta(120.0) == pytest.approx(30.0)
    assert p.update({"step": 5, "reports": 3, "age": 0.0}, 112.0)  # a restore went back
    assert p.rate() is None, "the old rate no longer applies"


def test_job_progress_is_the_chiefs_or_else_the_latest_reporters():
    chief, worker = TaskProgress(), TaskProgress()
    worker.update({"step": 4, "total": 8, "reports": 1, "age": 0, "metrics": {"loss": 1.5}}, 50.0)
    assert job_progress([("chief:0", chief), ("worker:0", worker)], "chief:0", 50.0)["task"] == "worker:0"
    chief.update({"step": 2, "total": 8, "reports": 1, "age": 0}, 40.0)
    got = job_progress([("chief:0", chief), ("worker:0", worker)], "chief:0", 50.0)
    assert got["task"] == "chief:0" and got["step"] == 2 and got["fraction"] == 0.25
    assert job_progress([("chief:0", TaskProgress())], "chief:0", 1.0) is None


def test_progress_shows_in_the_status_line_and_the_follower_paces_it():
    now = [0.0]
    statuses = []

    def status(step):
        return JobStatus("application_1_0001", state="RUNNING",
                         progress={"step": step, "total": 200, "fraction": step / 200, "eta_seconds": 125,
                                   "metrics": {"loss": 0.123456}})

    follower = Follower(lambda: statuses[-1], progress_every=15.0, clock=lambda: now[0])
    statuses.append(status(10))
    first = follower.poll()
    assert first is not None and "step=10/200 (5.0%) eta=2m05s loss=0.1235" in first.status.summary()
    now[0] = 5.0
    statuses.append(status(20))
    assert follower.poll() is None, "progress moved, but a line was shown 5 s ago"
    now[0] = 16.0
    statuses.append(status(30))
    update = follower.poll()
    assert update is not None and update.progressed
    now[0] = 40.0
    assert follower.poll() is None, "the step did not move"
    assert progress_text({"step": 3}) == "step=3"
    # A finished run has nothing left to wait for.
    assert progress_text({"step": 200, "total": 200, "fraction": 1.0, "eta_seconds": 0}) == "step=200/200 (100.0%)"


TRAINER = textwrap.dedent('''
    import os, signal, sys, time
    from tony_workflow import report
    block = bytearray(60 * 1024 * 1024)  # something for the sampler to see
    total = int(sys.argv[1])
    hang_at = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    for step in range(1, total + 1):
        time.sleep(0.1)
        report(step=step, total=total, loss=1.0 / step)
        if step == hang_at and os.environ["SESSION_ID"] == "0":
            time.sleep(0.5)  # the last report is out
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen: the executor goes on heartbeating
    ''')


@pytest.mark.job
def test_metrics_and_progress_are_visible_while_a_job_runs_and_kept_at_its_end(tony_home, tmp_path):
    (tmp_path / "trainer.py").write_text(TRAINER)
    h = submit(tmp_path, f"python {tmp_path}/trainer.py 80", {"worker": {"instances": 2, "memory": "512m"}},
               conf={"tony.task.metrics-interval-ms": 300, "tony.task.heartbeat-interval-ms": 200})

    def live():
        out = run_tony("status", h.app_id, "--json", timeout=60)
        st = json.loads(out.stdout)
        w = st["tasks"][0]
        return st if st["progress"] and st["progress"]["step"] >= 10 and w["metrics"].get("rss_mb", 0) >= 60 else None

    st = wait_for(live, timeout=120, interval=0.5)
    assert st["state"] == "RUNNING"
    metrics = st["tasks"][0]["metrics"]
    assert {"rss_mb", "max_rss_mb", "avg_rss_mb", "cpu_percent"} <= set(metrics)
    progress = st["progress"]
    assert progress["total"] == 80 and progress["task"] == "worker:0" and 0 < progress["fraction"] < 1
    assert progress["metrics"]["loss"] == pytest.approx(1.0 / progress["step"])
    assert st["tasks"][1]["progress"]["total"] == 80
    # The record a job page shows, live from the AM: figures over time and the timeline so far.
    live = wait_for(lambda: (r := h.record()) and len(r["series"]["t"]) >= 2 and r, timeout=30)
    assert live["state"] == "RUNNING" and "session 0 started" in [i["what"] for i in live["timeline"]]
    assert any(v and v >= 60 for v in live["series"]["tasks"]["worker:0"]["rss_mb"])
    final = h.wait(poll_interval=0.5, timeout=120)
    assert final.state == "SUCCEEDED"
    assert final.progress["step"] == 80, "the last report arrives even though it came right before the exit"
    done = [e for e in events(h) if e["event"] == "task_state" and e["state"] == "SUCCEEDED"]
    assert len(done) == 2 and all(e["metrics"]["max_rss_mb"] >= 60 for e in done), done


@pytest.mark.job
def test_a_user_process_frozen_after_reporting_is_lost_and_the_job_recovers(tony_home, tmp_path):
    (tmp_path / "trainer.py").write_text(TRAINER)
    h = submit(tmp_path, f"python {tmp_path}/trainer.py 30 10", {"worker": {"instances": 2}},
               conf={"tony.am.retry-count": 1, "tony.task.progress-timeout-ms": 2000,
                     "tony.task.heartbeat-interval-ms": 200})
    frozen = wait_for(lambda: [p for p in psutil.process_iter(["cmdline", "status"])
                               if f"{tmp_path}/trainer.py" in " ".join(p.info["cmdline"] or [])
                               and p.info["status"] == psutil.STATUS_STOPPED], timeout=60)
    st = h.wait(poll_interval=0.2, timeout=120)
    assert st.state == "SUCCEEDED" and st.session_id == 1, st.diagnostics
    lost = [e for e in events(h) if e["event"] == "task_state" and e["state"] == "LOST"]
    assert lost and "reported no progress" in lost[0]["diagnostics"], lost
    assert "tony.task.progress-timeout-ms=2000" in lost[0]["diagnostics"]
    for p in frozen:  # the frozen trainers were killed, not left stopped
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE


@pytest.mark.job
def test_a_gpu_task_reports_its_own_gpus_figures(tony_home, tmp_path, fake_gpu_machine):
    # Fake NVML (no GPU here): the real executor, allocation and CUDA_VISIBLE_DEVICES pinning, with
    # a stand-in for the NVIDIA library on the executor's path.
    h = submit(tmp_path, "sleep 20", {"worker": {"instances": 2, "gpus": 2}},
               conf={"tony.task.metrics-interval-ms": 200, "tony.task.heartbeat-interval-ms": 200})
    st = wait_for(lambda: (s := h.status()).tasks and all("gpu_util_percent" in t.metrics for t in s.tasks) and s,
                  timeout=60)
    by_task = {t.task_id: t.metrics for t in st.tasks}
    # worker:0 holds GPUs 0 and 1 (10 % and 20 %, 1000 and 2000 MiB), worker:1 GPUs 2 and 3.
    assert by_task["worker:0"]["gpu_util_percent"] == 15.0 and by_task["worker:0"]["gpu_mem_mb"] == 3000.0
    assert by_task["worker:1"]["gpu_util_percent"] == 35.0 and by_task["worker:1"]["gpu_mem_mb"] == 7000.0
    h.kill()
    h.wait(timeout=60)
