"""The examples as real multi-process TensorFlow jobs on 127.0.0.1, through the embedded cluster."""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO, app_processes, run_tony, user_process, wait_for
from tony_workflow.client import TonyClient, load_job
from tony_workflow.events import read_events

pytestmark = pytest.mark.tf

MWMS = REPO / "examples" / "mnist_mwms" / "mnist_mwms.yaml"
MWMS_XML = REPO / "examples" / "mnist_mwms" / "mnist_mwms.xml"
PS = REPO / "examples" / "ps_strategy" / "ps_strategy.yaml"
PS_XML = REPO / "examples" / "ps_strategy" / "ps_strategy.xml"
# Keep the AM small: the examples' defaults are sized for real machines.
SMALL = ["tony.am.memory=512m"]




def stdout(handle, task_id):
    return "".join(p.read_text() for k, p in handle.logs(task_id).items()
                   if k.split("#")[0].endswith("stdout") and p.exists())


def events(handle):
    return list(read_events(handle.backend.app_dir(handle.app_id) / "events.jsonl"))


def test_mwms_example_succeeds_through_the_cli(tony_home):
    r = run_tony("submit", str(MWMS), "--conf", *SMALL, "--wait", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    st = json.loads(r.stdout)
    assert st["state"] == "SUCCEEDED"
    assert [t["task_id"] if "task_id" in t else f"{t['type']}:{t['index']}" for t in st["tasks"]] == ["worker:0", "worker:1"]
    assert st["tensorboard_url"].startswith("http://127.0.0.1:")
    # The Keras progress callback reported every step of 3 epochs x 40, with the loss.
    assert st["progress"]["step"] == st["progress"]["total"] == 120 and "loss" in st["progress"]["metrics"]
    assert all(t["metrics"]["max_rss_mb"] > 50 for t in st["tasks"]), "TensorFlow trainers were sampled"
    assert "step=" in r.stderr, "progress lines were printed while the job ran"
    app_dir = tony_home / "local" / "apps" / st["application_id"]
    metrics = json.loads((app_dir / "checkpoints" / "final" / "metrics.json").read_text())
    assert metrics["steps"] > 0
    # both workers trained in lockstep: the same global steps, the same losses
    outs = [p.read_text() for p in sorted(app_dir.glob("containers/*/stdout"))]
    steps = [re.findall(r"step=(\d+) loss=([\d.]+)", o) for o in outs]
    assert steps[0] and steps[0] == steps[1]
    figures_shown_are_the_chiefs(st["application_id"], app_dir, stdout=outs[0])


def figures_shown_are_the_chiefs(app_id: str, app_dir: Path, stdout: str) -> None:
    """What the chief printed at its last epoch's end and after scoring, against what the job's
    history shows: ``tony history --json``, ``tony history`` and the job's page."""
    from starlette.testclient import TestClient

    from tony_workflow.client import TonyClient
    from tony_workflow.web.access import TokenBook
    from tony_workflow.web.server import create_server

    *_, (loss, accuracy) = re.findall(r"epoch=3 loss=([\d.]+) accuracy=([\d.]+)", stdout)
    (val_loss, val_accuracy), = re.findall(r"done steps=120 val_loss=([\d.]+) val_accuracy=([\d.]+)", stdout)
    printed = {"loss": loss, "accuracy": accuracy, "val_loss": val_loss, "val_accuracy": val_accuracy}

    shown = run_tony("history", app_id, "--json")
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    last = {k: record["progress"]["metrics"][k] for k in printed}
    assert {k: f"{v:.4f}" for k, v in last.items()} == printed
    lines = record["series"]["metrics"]
    assert {k: f"{[v for v in lines[k] if v is not None][-1]:.4f}" for k in printed} == printed
    assert all(0 <= v <= 1 for v in lines["accuracy"] if v is not None), lines["accuracy"]

    text = run_tony("history", app_id).stdout
    for name, value in printed.items():
        (last_shown,) = re.findall(rf"^  {name}: (?:.* )?([\d.]+) (?:last|\(1 point\))", text, re.MULTILINE)
        assert float(last_shown) == pytest.approx(float(value), abs=1e-3), (name, text)

    token = "owner-token-0123456789"
    app = create_server(TonyClient("local"), TokenBook("svc", owner_token=token), index_ttl=0)
    with TestClient(app) as c:
        page = c.get(f"/jobs/{app_id}", headers={"authorization": f"Bearer {token}"})
    app.state.pages.keeper.stop()
    assert page.status_code == 200, page.text[:2000]
    (progress,) = re.findall(r'<p id="progress">(.*?)</p>', page.text)
    for name, value in printed.items():
        (on_page,) = re.findall(rf"\b{name}=([\d.]+)", progress)
        assert float(on_page) == pytest.approx(float(value), abs=1e-3), (name, progress)


def test_mwms_tonyxml_spec_runs(tony_home):
    r = run_tony("submit", str(MWMS_XML), "--src-dir", str(MWMS.parent), "--conf", *SMALL,
                 "--conf", "tony.containers.command=python train.py --epochs 1 --steps-per-epoch 10",
                 "--wait", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["state"] == "SUCCEEDED"


def test_killed_worker_relaunches_the_session_and_resumes_from_the_checkpoint(tony_home, tmp_path):
    # The workers read their shares of Parquet files through tony_workflow.data: the relaunched
    # session's input starts at the step the backup restores (the reader's Keras callback).
    import sys
    sys.path.insert(0, str(MWMS.parent))
    import synthetic_mnist
    data = synthetic_mnist.save_parquet(str(tmp_path / "train"))
    spec = load_job(str(MWMS), conf=[*SMALL, "tony.am.retry-count=1", f"tony.data.train.path={data}"],
                    task_params="--epochs 3 --save-freq 10 --step-sleep 0.15")
    h = TonyClient("local").submit(spec)
    # TensorBoard comes up on the chief while the job runs, and answers on /data/logdir
    st = wait_for(lambda: (s := h.status()).tensorboard_url and s)
    assert st.state == "RUNNING"
    assert requests.get(st.tensorboard_url + "/data/logdir", timeout=10).status_code == 200
    # ... at the lowest CPU priority, every thread of it, while the trainers keep theirs.
    boards = [p for p in app_processes(h.app_id) if "tensorboard.main" in " ".join(p.cmdline())]
    assert len(boards) == 1, [p.cmdline() for p in boards]
    assert {os.getpriority(os.PRIO_PROCESS, t.id) for t in boards[0].threads()} == {19}
    assert user_process(st.task("worker:1").pid).nice() == os.nice(0)

    store = h.backend.app_dir(h.app_id) / "checkpoints"
    wait_for(lambda: re.search(r"step=(3\d|[4-9]\d|\d{3})", stdout(h, "worker:0"))
             and list(store.rglob("checkpoint")))
    victim = h.status().task("worker:1")
    user_process(victim.pid).send_signal(signal.SIGKILL)

    st = h.wait(poll_interval=0.5, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 1 and st.attempts == 2
    ended = [e for e in events(h) if e["event"] == "session_finished"]
    assert ended[0]["state"] == "FAILED" and "worker:1" in ended[0]["diagnostics"]
    resumed = [int(m) for m in re.findall(r"session=1 task=worker:\d start_step=(\d+)", stdout(h, "worker:0"))]
    assert resumed and resumed[0] > 0, stdout(h, "worker:0")[-2000:]
    assert re.search(r"session=1 done steps=120 ", stdout(h, "worker:0")), stdout(h, "worker:0")[-2000:]


def serving(status, task_id: str) -> bool:
    """Whether the task's TensorFlow server accepts connections at its registered address."""
    import socket
    task = status.task(task_id)
    if task.state != "RUNNING" or not task.port:
        return False
    try:
        socket.create_connection((task.host or "127.0.0.1", task.port), timeout=1).close()
        return True
    except OSError:
        return False


def test_ps_task_restart_policy_relaunches_only_the_killed_worker(tony_home, tmp_path):
    # The worker's executor is killed (a dead trainer alone is test_runtime's and test_deaths' case,
    # with no framework): its TensorFlow server must go with it, or the relaunch, which keeps the
    # task's address, would find the port taken. The coordinator holds still from the loss until
    # the replacement's server answers: a coordinator that ends its run while a worker it knows is
    # down aborts in TensorFlow's teardown, which would fail the session.
    pause = tmp_path / "pause"
    spec = load_job(str(PS), conf=[*SMALL, "tony.worker.restart-policy=task", "tony.am.retry-count=2"],
                    task_params=f"--steps 200 --step-sleep 0.05 --pause-while {pause}")
    h = TonyClient("local").submit(spec)
    wait_for(lambda: re.search(r"step=[2-9]\d", stdout(h, "chief:0")))
    before = {t.task_id: t.pid for t in h.status().tasks}
    trainer = user_process(before["worker:1"])
    task = h.status().task("worker:1")
    pause.touch()
    os.kill(int((Path(task.log_url).parent / "pid").read_text()), signal.SIGKILL)
    wait_for(lambda: (s := h.status()).is_final or (s.task("worker:1").restarts == 1 and serving(s, "worker:1")),
             timeout=300, interval=0.2)
    pause.unlink()
    st = h.wait(poll_interval=0.5, timeout=300)
    assert not trainer.is_running() or trainer.status() == "zombie"
    assert app_processes(h.app_id) == []
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 0 and st.attempts == 1
    after = {t.task_id: t.pid for t in st.tasks}
    assert after["chief:0"] == before["chief:0"] and after["ps:0"] == before["ps:0"]
    assert after["worker:0"] == before["worker:0"] and after["worker:1"] != before["worker:1"]
    assert st.task("worker:1").restarts == 1
    assert [e["task"] for e in events(h) if e["event"] == "task_restarted"] == ["worker:1"]
