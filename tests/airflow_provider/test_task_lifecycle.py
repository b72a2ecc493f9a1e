"""Worker crash, retry and mark-failed, with Airflow's own processes.

Tasks run under the LocalExecutor (``dag.test(use_executor=True)`` in a subprocess), talking to a
real ``airflow api-server``; deferred tasks wait in a real ``airflow triggerer``.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import requests

from tests.airflow_provider.conftest import AIRFLOW_HOME, task_instance, write_dag
from tests.conftest import app_processes, wait_for
from tony_workflow.client import TonyClient

pytestmark = pytest.mark.tf

RUN_DAG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
dr = module.dag.test(use_executor=True)
print("DAGRUN", dr.state, dr.run_id, flush=True)
"""

JOB = {"name": "lifecycle", "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 2, "memory": "256m"}},
       "conf": {"tony.task.tensorboard.enabled": "false"}}




def start(argv, log: Path, tony_home: Path) -> subprocess.Popen:
    env = {**os.environ, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "TONY_HOME": str(tony_home)}
    return subprocess.Popen(argv, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Stops the run and everything of its session: Airflow's LocalExecutor workers outlive a
    run that ended by itself, and only their group still names them."""
    from tony_workflow.process import group_members

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    for member in group_members(proc.pid):
        member.kill()
    wait_for(lambda: not group_members(proc.pid), timeout=30)


def applications(tony_home: Path) -> list[Path]:
    """The applications submitted, once each has a status (its directory comes first, while the
    job's source and resources are staged into it)."""
    return sorted(p for p in (tony_home / "local" / "apps").glob("application_*") if (p / "status.json").is_file())


def running_app(tony_home: Path) -> str | None:
    apps = applications(tony_home)
    if not apps:
        return None
    st = TonyClient("local").attach(apps[-1].name).status()
    return st.application_id if st.state == "RUNNING" and st.tasks and \
        all(t.state == "RUNNING" for t in st.tasks) else None


def ended_run(dag_id: str):
    """The DAG's run once it has ended, from the metadata DB. ``dag.test()`` returns only once its
    executor has shut down, which, after a task process was killed, can wait on Airflow's own
    worker long after the run ended: the run's state is what these tests are about."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select
    with create_session() as session:
        runs = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id)).all()
        for run in runs:
            session.expunge(run)
    return next((r for r in runs if r.state in ("success", "failed")), None)


def dag_run_id(api: str, dag_id: str) -> str | None:
    runs = requests.get(f"{api}/api/v2/dags/{dag_id}/dagRuns", timeout=10).json().get("dag_runs", [])
    return runs[0]["dag_run_id"] if runs else None


def clear_stale_triggers() -> None:
    """dag.test() runs triggers inline but leaves their rows behind; a real triggerer started later
    would pick those up too and resume tasks long finished. Start it from a clean table."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import delete, update
    with create_session() as session:
        session.execute(update(TaskInstance).values(trigger_id=None))
        session.execute(delete(Trigger))


def mark_failed(api: str, dag_id: str, run_id: str) -> None:
    r = requests.patch(f"{api}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train",
                       json={"new_state": "failed"}, timeout=30)
    assert r.status_code == 200, r.text


#: a job printing numbered lines for about 12 s
TICKS = 24
TICKING = f"for i in $(seq 1 {TICKS}); do echo tick $i; sleep 0.5; done"


def task_logs(dag_id: str, pattern: str = "attempt=*.log*") -> str:
    """Every log file of the DAG's task so far (each try's, and its triggers'), oldest try first."""
    files = sorted((AIRFLOW_HOME / "logs" / f"dag_id={dag_id}").rglob(pattern))
    return "".join(p.read_text(errors="replace") for p in files)


def ticks(text: str) -> list[int]:
    """The job's numbered lines, as the task's logs hold them."""
    return [int(n) for n in re.findall(r"\[worker:0\] tick (\d+)", text)]


def test_killed_task_process_retries_and_reattaches_without_a_second_application(api_server, tony_home, tmp_path):
    job = {**JOB, "command": TICKING}
    dag = write_dag("tony_resume", {"job_spec": job, "poll_interval": 0.5, "tensorboard_wait": 0, "retries": 1},
                    retry_delay_s=1)
    runner = start([sys.executable, "-c", RUN_DAG, str(dag)], tmp_path / "dag.log", tony_home)
    try:
        app_id = wait_for(lambda: running_app(tony_home))
        # The job's lines reach the task's log while it runs, before the task's process is killed.
        wait_for(lambda: ticks(task_logs("tony_resume", "attempt=1.log")) and running_app(tony_home), timeout=60)
        sup_pid = json.loads((tony_home / "local" / "apps" / app_id / "supervisor.json").read_text())["pid"]
        # The job's supervisor (the AM's parent) was started by the task's own process: that is the
        # process a crash takes away.
        task_process = psutil.Process(psutil.Process(sup_pid).ppid())
        assert "python" in task_process.name().lower() or "airflow" in " ".join(task_process.cmdline())
        task_process.kill()
        run = wait_for(lambda: ended_run("tony_resume"), timeout=240,
                       describe=lambda: (tmp_path / "dag.log").read_text()[-4000:])
    finally:
        stop(runner)
    assert run.state == "success", (tmp_path / "dag.log").read_text()[-4000:]
    assert [p.name for p in applications(tony_home)] == [app_id]  # reattached: no second application
    run_id = run.run_id
    assert task_instance("tony_resume", run_id, "train").try_number == 2
    assert TonyClient("local").attach(app_id).status().state == "SUCCEEDED"
    # Between the two tries, every line of the job once, in order: the second went on from where
    # the first had got to.
    first, second = ticks(task_logs("tony_resume", "attempt=1.log")), ticks(task_logs("tony_resume", "attempt=2.log"))
    assert first and second and first + second == list(range(1, TICKS + 1)), (first, second)


# The first try's process dies right after the submission returns, before Airflow records the
# application id: the moment Airflow's own reconnection cannot cover.
DIES_AFTER_SUBMITTING = """
import os, signal
from datetime import datetime, timedelta
from airflow.sdk import DAG
from airflow_provider.operators import TonyOperator


class DiesAfterSubmitting(TonyOperator):
    def submit_job(self, context):
        app_id = super().submit_job(context)
        if context["ti"].try_number == 1:
            print("SUBMITTED", app_id, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return app_id


with DAG("tony_gap", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    DiesAfterSubmitting(task_id="train", retries=1, retry_delay=timedelta(seconds=1), job_spec=%r,
                        poll_interval=0.5, tensorboard_wait=0)
"""


def gap_state(tony_home: Path, log: Path) -> str:
    """What a stuck run of the DAG below had done: its applications, its task's tries and logs."""
    apps = {p.name: TonyClient("local").attach(p.name).status().summary() for p in applications(tony_home)}
    tries = "".join(f"\n--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                    for p in sorted((AIRFLOW_HOME / "logs").rglob("attempt=*.log")) if "tony_gap" in str(p))
    return f"applications {apps}; the run's output:\n{log.read_text(errors='replace')[-4000:]}{tries}"


def test_a_task_killed_between_submitting_and_recording_finds_its_application_by_context(api_server, tony_home,
                                                                                          tmp_path):
    from tests.airflow_provider.conftest import DAGS
    job = {**JOB, "command": "sleep 15"}
    dag = DAGS / "tony_gap.py"
    dag.write_text(DIES_AFTER_SUBMITTING % (job,))
    runner = start([sys.executable, "-c", RUN_DAG, str(dag)], tmp_path / "dag.log", tony_home)
    try:
        run = wait_for(lambda: ended_run("tony_gap"), timeout=300,
                       describe=lambda: gap_state(tony_home, tmp_path / "dag.log"))
    finally:
        stop(runner)
    assert run.state == "success", gap_state(tony_home, tmp_path / "dag.log")
    [app] = applications(tony_home)  # the retry followed the first try's job: no second application
    run_id = run.run_id
    assert task_instance("tony_gap", run_id, "train").try_number == 2
    status = TonyClient("local").attach(app.name).status()
    assert status.state == "SUCCEEDED"
    # The application is the first try's, and says so.
    assert status.context["dag_id"] == "tony_gap" and status.context["dag_run_id"] == run_id
    assert status.context["try_number"] == "1" and status.context["task_id"] == "train"
    logs = "".join(p.read_text(errors="replace") for p in (AIRFLOW_HOME / "logs").rglob("attempt=2*.log")
                   if "tony_gap" in str(p))
    assert f"Application {app.name}, submitted earlier by this task run" in logs, logs[-3000:]
    wait_for(lambda: not app_processes(app.name), timeout=60)  # nothing of it outlives it


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_marking_the_running_task_failed_kills_the_application(api_server, tony_home, tmp_path, deferrable):
    dag_id = f"tony_mark_failed_{'deferrable' if deferrable else 'sync'}"
    dag = write_dag(dag_id, {"job_spec": {**JOB, "command": f"{TICKING}; sleep 120"}, "poll_interval": 0.5,
                             "tensorboard_wait": 0, "deferrable": deferrable})
    if deferrable:
        clear_stale_triggers()
    procs = [start([sys.executable, "-c", RUN_DAG, str(dag)], tmp_path / "dag.log", tony_home)]
    if deferrable:
        procs.append(start([sys.executable, "-m", "airflow", "triggerer"], tmp_path / "triggerer.log", tony_home))
    try:
        app_id = wait_for(lambda: running_app(tony_home), timeout=180)
        run_id = wait_for(lambda: dag_run_id(api_server, dag_id))
        if deferrable:
            wait_for(lambda: task_instance(dag_id, run_id, "train").state == "deferred", timeout=120)
            # on_kill reaches triggers the triggerer is running: wait until it polls this application
            # (a trigger's log lines go to the task's log, in a file of their own)
            trigger_logs = AIRFLOW_HOME / "logs" / f"dag_id={dag_id}"
            wait_for(lambda: any(app_id in p.read_text(errors="replace")
                                 for p in trigger_logs.rglob("attempt=*.log.trigger.*.log")), timeout=180)
        # What the job prints reaches the task's log while it runs (the trigger's, when deferred),
        # in order, once each.
        wait_for(lambda: len(ticks(task_logs(dag_id))) >= 3 and running_app(tony_home) == app_id, timeout=60,
                 describe=lambda: task_logs(dag_id)[-3000:])
        said = ticks(task_logs(dag_id))
        assert said == list(range(1, len(said) + 1)), said
        mark_failed(api_server, dag_id, run_id)
        st = wait_for(lambda: (s := TonyClient("local").attach(app_id).status()).is_final and s, timeout=120)
        assert st.state == "KILLED"
        assert "Airflow" in st.diagnostics
    finally:
        for p in procs:
            stop(p)


def trigger_files(dag_id: str) -> list[Path]:
    """The trigger log files of the DAG's task, in the order their triggerers started."""
    # attempt=1.log.trigger.<the triggerer's job id>.log
    return sorted((AIRFLOW_HOME / "logs" / f"dag_id={dag_id}").rglob("attempt=*.log.trigger.*.log"),
                  key=lambda p: int(p.name.removesuffix(".log").rsplit(".", 1)[-1]))


def job_ticks(app_id: str) -> list[int]:
    """The numbered lines the job's worker has printed so far, from its own stdout."""
    printed = TonyClient("local").attach(app_id).logs("worker:0")["worker:0/stdout"].read_text()
    return [int(n) for n in re.findall(r"^tick (\d+)$", printed, re.MULTILINE)]


def kept_ticks(dag_id: str, app_id: str) -> int:
    """How many of the job's numbered lines the cursor its trigger keeps in the task's XCom has
    passed (0 before it keeps one)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider.triggers import OUTPUT_CURSOR_KEY
    with create_session() as session:
        rows = session.scalars(select(XComModel).where(XComModel.dag_id == dag_id,
                                                       XComModel.key == OUTPUT_CURSOR_KEY)).all()
        kept = [XComModel.deserialize_value(r) for r in rows]
    offsets = [off for k in kept if k.get("application_id") == app_id
               for key, off in (k.get("cursor") or {}).get("offsets", {}).items() if key.endswith("/stdout")]
    if not offsets:
        return 0
    printed = TonyClient("local").attach(app_id).logs("worker:0")["worker:0/stdout"].read_bytes()
    return len(re.findall(rb"^tick \d+$", printed[:max(offsets)], re.MULTILINE))


def test_a_triggerer_stopped_mid_job_and_another_started_go_on_where_the_first_left(api_server, tony_home,
                                                                                  tmp_path):
    # A deferred task's trigger follows the job's output; its triggerer is stopped (a restart, a
    # deployment), and a new one takes the trigger over: it starts again from its arguments, which
    # say where the task deferred, not how far the first got. The job ticks until the test says
    # so (a file), however long each step takes on a busy machine.
    dag_id = "tony_trigger_moves"
    done = tmp_path / "done"
    ticking = f"for i in $(seq 1 1200); do [ -e {done} ] && exit 0; echo tick $i; sleep 0.5; done; exit 9"
    dag = write_dag(dag_id, {"job_spec": {**JOB, "command": ticking}, "poll_interval": 0.5, "tensorboard_wait": 0,
                             "deferrable": True})
    clear_stale_triggers()
    procs = [start([sys.executable, "-c", RUN_DAG, str(dag)], tmp_path / "dag.log", tony_home)]
    first = start([sys.executable, "-m", "airflow", "triggerer"], tmp_path / "triggerer-1.log", tony_home)
    try:
        app_id = wait_for(lambda: running_app(tony_home), timeout=180)
        # Stopped once the first trigger keeps a cursor past lines of its own. It keeps how far
        # it got one look late (Airflow's triggerer drops log lines still on their way from its
        # trigger process when it stops), so by then it has written more than it keeps.
        first_log = lambda: ticks(trigger_files(dag_id)[0].read_text()) if trigger_files(dag_id) else []
        wait_for(lambda: len(first_log()) >= 3 and kept_ticks(dag_id, app_id) > first_log()[0], timeout=180,
                 describe=lambda: task_logs(dag_id)[-3000:])
        kept_then = kept_ticks(dag_id, app_id)
        stop(first)
        assert TonyClient("local").attach(app_id).status().state == "RUNNING"  # the job goes on meanwhile
        procs.append(start([sys.executable, "-m", "airflow", "triggerer"], tmp_path / "triggerer-2.log", tony_home))
        wait_for(lambda: len(trigger_files(dag_id)) == 2 and len(ticks(trigger_files(dag_id)[1].read_text())) >= 3,
                 timeout=180, describe=lambda: task_logs(dag_id)[-3000:])
        done.touch()
        run = wait_for(lambda: ended_run(dag_id), timeout=240, describe=lambda: task_logs(dag_id)[-3000:])
    finally:
        done.touch()
        stop(first)
        for p in procs:
            stop(p)
    assert run.state == "success", task_logs(dag_id)[-3000:]
    files = trigger_files(dag_id)
    assert len(files) == 2, files
    before = ticks((files[0].parent / "attempt=1.log").read_text())  # the task's, before it deferred
    by_first, by_second = ticks(files[0].read_text()), ticks(files[1].read_text())
    # Every line, in order, across the task's own log and its two triggers': the second trigger
    # went on from where the first had kept it (not from where the task deferred), writing again
    # the lines of the first's last look, which may not have got into the log.
    printed = job_ticks(app_id)
    assert by_first and by_second, (before, by_first, by_second)
    assert before + by_first == printed[:len(before) + len(by_first)], (before, by_first)
    assert by_second == printed[printed.index(by_second[0]):], by_second
    assert kept_then < by_second[0] <= by_first[-1] + 1, (kept_then, by_first[-3:], by_second[:3])
    assert "may be written twice" in files[1].read_text() and "may be written twice" not in files[0].read_text()
    wait_for(lambda: not app_processes(app_id), timeout=60)
