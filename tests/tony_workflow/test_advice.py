"""Advice that sizes the next run (:mod:`tony_workflow.advice`): each heuristic on the figures it
reads, then real jobs made to trip them, one workflow task's runs judged together, and what
``tony advise`` and ``tony history`` print."""
from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_tony
from tests.tony_workflow.jobs.test_runtime import submit
from tony_workflow.advice import advise, as_conf_lines, memory_value, workflow_task


def run(app_id="application_1_0001", *, memory_mb=2048, vcores=1, gpus=0, peak=None, cpu=(), gpu=(), exit_code=0,
        waited=None, took=100.0):
    """A record as the history keeps it, with what matters to the heuristics."""
    series = {"t": list(range(len(cpu or gpu))), "tasks": {"worker:0": {"cpu_percent": list(cpu),
                                                                        "gpu_util_percent": list(gpu)}}}
    timeline = [{"ts": 1.0, "what": f"all 2 containers granted after waiting {waited:.0f} s"}] if waited else []
    return {"application_id": app_id, "started_at": 1000.0, "finished_at": 1000.0 + took, "timeline": timeline,
            "requested": {"worker": {"memory_mb": memory_mb, "vcores": vcores, "gpus": gpus}}, "series": series,
            "tasks": [{"task_id": "worker:0", "exit_code": exit_code,
                       "metrics": {} if peak is None else {"max_rss_mb": peak}}]}


def test_memory_values_round_up_to_128_mb():
    assert [memory_value(m) for m in (1, 300, 1024, 1500, 3000)] == ["128m", "384m", "1g", "1536m", "3g"]


def test_memory_too_much_too_little_and_killed():
    [idle] = advise([run(peak=300)])
    assert (idle.heuristic, idle.severity, idle.changes) == ("memory", "moderate", {"tony.worker.memory": "384m"})
    [tight] = advise([run(peak=1900)])
    assert tight.severity == "severe" and tight.changes == {"tony.worker.memory": "2432m"}
    [killed] = advise([run(memory_mb=512, peak=500, exit_code=-104)])
    assert killed.severity == "critical" and killed.changes == {"tony.worker.memory": "768m"}
    assert advise([run(peak=1500)]) == []  # between half and nine tenths: nothing to change


def test_the_newest_request_is_judged_against_the_busiest_run():
    quiet, busy = run("application_1_0002", peak=200), run("application_1_0001", peak=1200)
    assert advise([quiet]) and advise([quiet])[0].changes == {"tony.worker.memory": "256m"}
    assert advise([quiet, busy]) == []  # 1.2 GiB of 2 GiB on the busy day: keep it


def test_vcores_idle_and_busy():
    [idle] = advise([run(vcores=4, cpu=[20.0, 30.0, 40.0])])
    assert (idle.heuristic, idle.changes) == ("vcores", {"tony.worker.vcores": "1"})
    [busy] = advise([run(vcores=2, cpu=[195.0, 199.0])])
    assert busy.severity == "low" and busy.changes == {"tony.worker.vcores": "3"}
    assert advise([run(vcores=2, cpu=[120.0, 130.0])]) == []


def test_idle_gpus_and_a_long_wait_for_the_gang():
    [gpus] = advise([run(gpus=4, gpu=[5.0, 8.0])])
    assert gpus.severity == "severe" and gpus.changes == {"tony.worker.gpus": "2"}
    [wait] = advise([run(waited=600, took=700)])
    assert wait.heuristic == "gang wait" and "waited 600 s" in wait.message and "ran 100 s" in wait.message
    assert advise([run(waited=30, took=700)]) == []


def test_the_lines_to_paste_take_each_key_once_from_the_most_severe():
    found = advise([run(memory_mb=512, peak=500, exit_code=-104, vcores=4, cpu=[10.0, 10.0])])
    assert [a.severity for a in found] == ["critical", "moderate"]
    assert as_conf_lines(found) == ["--conf tony.worker.memory=768m", "--conf tony.worker.vcores=1"]


def test_a_workflow_task_is_its_dag_and_task_or_its_azkaban_job():
    assert workflow_task({"source": "airflow", "dag_id": "d", "task_id": "t", "dag_run_id": "r"}) == {
        "source": "airflow", "dag_id": "d", "task_id": "t"}
    assert workflow_task({"source": "azkaban", "project": "p", "flow_id": "f", "job_id": "j", "execution_id": "9"}) == {
        "source": "azkaban", "project": "p", "flow_id": "f", "job_id": "j"}
    assert workflow_task(None) is None and workflow_task({"source": "airflow", "dag_id": "d"}) is None


HOLD = ("python -c \"import time; from tony_workflow import report; b = bytearray({mb} * 2**20)\n"
        "for s in range(1, 13): report(step=s, total=12); time.sleep(0.25)\"")


@pytest.mark.job
def test_runs_of_one_dag_task_are_advised_together_on_real_jobs(tony_home, tmp_path):
    # Two runs of one DAG task (its context keys), each asking for 2 GiB and 4 vcores and sleeping:
    # the first holds 400 MB, the second 40.
    context = {"tony.context.source": "airflow", "tony.context.dag-id": "nightly", "tony.context.task-id": "fit",
               "tony.task.metrics-interval-ms": 200}
    apps = []
    for mb, run_id in ((400, "r1"), (40, "r2")):
        h = submit(tmp_path, HOLD.format(mb=mb), {"worker": {"instances": 1, "memory": "2g", "vcores": 4}},
                   conf={**context, "tony.context.dag-run-id": run_id})
        assert h.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
        apps.append(h.app_id)
    busy = json.loads(run_tony("history", apps[0], "--json").stdout)
    peak = max(t["metrics"]["max_rss_mb"] for t in busy["tasks"])
    assert peak >= 400
    out = run_tony("advise", "--dag", "nightly", "--task", "fit")
    assert out.returncode == 0, out.stderr
    # The memory comes from the busy run, though the newest was quiet; the vcores were idle in both.
    assert out.stdout.splitlines() == [f"--conf tony.worker.memory={memory_value(peak * 1.25)}",
                                       "--conf tony.worker.vcores=1"], out.stdout + out.stderr
    assert "from 2 run(s), the newest " + apps[1] in out.stderr and "[moderate] vcores" in out.stderr
    # Named by one of its runs, the same: that run and the others of its task.
    assert run_tony("advise", apps[1]).stdout == out.stdout
    assert json.loads(run_tony("advise", apps[1], "--json").stdout)["runs"] == [apps[1], apps[0]]
    shown = run_tony("history", apps[1]).stdout  # one run alone: its own figures
    assert "advice [moderate] memory: worker asked for 2.0 GiB" in shown and "next run: --conf tony.worker.memory=" in shown


@pytest.mark.job
def test_a_container_killed_for_its_memory_is_critical_advice_on_a_real_job(tony_home, tmp_path):
    h = submit(tmp_path, HOLD.format(mb=400), {"worker": {"instances": 1, "memory": "256m"}})
    st = h.wait(poll_interval=0.2, timeout=120)
    assert st.state == "FAILED" and st.tasks[0].exit_code == -104, st.diagnostics
    out = run_tony("advise", h.app_id)
    assert out.returncode == 0 and "[critical] memory: worker: the cluster killed 1 container(s)" in out.stderr
    assert out.stdout.splitlines()[0].startswith("--conf tony.worker.memory=")
    assert "submitted by hand: this run alone" in out.stderr
    nothing = run_tony("advise")
    assert nothing.returncode == 2 and "name a job (APPLICATION_ID) or a workflow task" in nothing.stderr


def timed(task_id, started, finished, state="SUCCEEDED"):
    return {"task_id": task_id, "state": state, "exit_code": 0, "metrics": {}, "started_at": started,
            "finished_at": finished}


def test_a_straggler_is_named_with_its_peers_median():
    record = {"application_id": "application_1_0001", "requested": {"worker": {"vcores": 1}},
              "tasks": [timed("worker:0", 0, 40), timed("worker:1", 0, 42), timed("worker:2", 0, 95)]}
    [slow] = advise([record])
    assert slow.heuristic == "straggler" and "worker:2 ran 95 s, its peers 42 s at the median" in slow.message
    record["tasks"][2] = timed("worker:2", 0, 55)  # 13 s over the median: no straggler
    assert advise([record]) == []


def test_tasks_that_run_on_after_the_chief_succeeded_are_untracked_next_time():
    record = {"application_id": "application_1_0001", "finished_at": 200.0,
              "requested": {"chief": {}, "worker": {}, "ps": {}},
              "conf": {"tony.application.untracked.jobtypes": "ps"},
              "tasks": [timed("chief:0", 0, 60), timed("worker:0", 0, 200, "KILLED"), timed("ps:0", 0, 200, "KILLED")]}
    [hang] = advise([record])
    assert hang.severity == "severe" and "the chief chief:0 succeeded and worker ran on 140 s more" in hang.message
    assert hang.changes == {"tony.application.untracked.jobtypes": "ps,worker"}
    record["tasks"][1] = timed("worker:0", 0, 64)  # ended with it, near enough
    assert advise([record]) == []
    record["tasks"][0]["state"] = "FAILED"
    assert advise([record]) == []


@pytest.mark.job
def test_a_straggler_and_tasks_left_running_after_the_chief_on_a_real_job(tony_home, tmp_path):
    # chief:0 ends at once; of three workers, worker:2 takes 25 s more than its peers.
    tasks = {"chief": {"instances": 1, "memory": "256m", "command": "sleep 1"},
             "worker": {"instances": 3, "memory": "256m", "command": 'sleep $(( TASK_INDEX == 2 ? 28 : 3 ))'}}
    h = submit(tmp_path, "true", tasks)
    assert h.wait(poll_interval=0.5, timeout=180).state == "SUCCEEDED"
    out = run_tony("advise", h.app_id, "--json")
    found = {a["heuristic"]: a for a in json.loads(out.stdout)["advice"]}
    assert set(found) == {"straggler", "hang after the chief"}, found
    # The figures are the job's own record of when each task started and ended (a loaded machine
    # adds seconds to a 3 s sleep); the record holds what the commands did: 28 s and 3 s of sleep.
    record = json.loads(run_tony("history", h.app_id, "--json").stdout)
    ran = {t["task_id"]: t["finished_at"] - t["started_at"] for t in record["tasks"]}
    peers = sorted(ran[f"worker:{i}"] for i in range(3))[1]
    assert ran["worker:2"] >= 28 and min(ran["worker:0"], ran["worker:1"]) >= 3, ran
    said = f"worker:2 ran {ran['worker:2']:.0f} s, its peers {peers:.0f} s at the median"
    assert found["straggler"]["message"].startswith(said), (found["straggler"]["message"], ran)
    assert found["hang after the chief"]["changes"] == {"tony.application.untracked.jobtypes": "ps,worker"}


def test_a_relaunch_that_went_far_back_asks_for_checkpoints_more_often():
    series = {"t": [0.0, 10.0, 20.0, 30.0, 40.0, 50.0], "step": [0, 100, 200, 290, 110, 210]}
    record = {"application_id": "application_1_0001", "requested": {}, "progress": {"total": 500}, "series": series,
              "sessions": [{"session": 0, "started_at": 0.0}, {"session": 1, "started_at": 35.0}]}
    [ckpt] = advise([record])
    assert ckpt.heuristic == "checkpoints" and "session 1 resumed from about step 110" in ckpt.message
    assert "had reached step 290: about 180 steps (19 s of training) lost" in ckpt.message
    series["t"].insert(4, 36.0)
    series["step"].insert(4, 290)  # the new session's first figures still show the old step
    assert "resumed from about step 110 after" in advise([record])[0].message
    series["step"][5:] = [280, 300]  # resumed 10 steps back: a fiftieth of the training
    assert advise([record]) == []


@pytest.mark.job
def test_a_relaunch_that_lost_much_of_its_work_on_a_real_job(tony_home, tmp_path):
    from tests.conftest import REPO

    # The stand-in trainer saves every 50 of 120 steps; worker:0 dies at step 95 in the first session.
    spec = REPO / "tests" / "stand_in" / "stand_in.yaml"
    from tony_workflow.client import TonyClient, load_job
    job = load_job(str(spec), task_params="--steps 120 --save-every 50 --step-sleep 0.1 --die-at 95 --fault-task worker:0",
                   conf=["tony.task.metrics-interval-ms=200"])
    h = TonyClient("local").submit(job)
    st = h.wait(poll_interval=0.5, timeout=180)
    assert st.state == "SUCCEEDED" and st.session_id == 1, st.diagnostics
    found = {a["heuristic"]: a for a in json.loads(run_tony("advise", h.app_id, "--json").stdout)["advice"]}
    assert "checkpoints" in found, found
    assert found["checkpoints"]["message"].startswith("session 1 resumed from about step ")


@pytest.mark.job
def test_idle_vcores_on_a_real_job(tony_home, tmp_path):
    # Two vcores asked for a task that sleeps. (A task bound by its CPU is judged on the figures
    # above: a busy two-core machine does not give a spinning task a whole core to measure.)
    h = submit(tmp_path, "sleep 8", {"worker": {"instances": 1, "memory": "256m", "vcores": 2}})
    assert h.wait(poll_interval=0.5, timeout=180).state == "SUCCEEDED"
    found = {a["heuristic"]: a for a in json.loads(run_tony("advise", h.app_id, "--json").stdout)["advice"]}
    assert found["vcores"]["severity"] == "moderate" and found["vcores"]["changes"] == {"tony.worker.vcores": "1"}
    assert found["vcores"]["message"].startswith("worker asked for 2 vcores and kept 0.")


@pytest.mark.job
def test_a_long_wait_for_the_gang_on_a_real_job(tony_home, tmp_path, local_site):
    # A 3 GB job holds the 4 GB cluster for 75 s; a gang of two 1 GB workers waits for it, then runs a moment.
    from tests.conftest import sleeper_job, wait_for
    from tony_workflow.client import TonyClient, load_job

    local_site({"tony.local.memory": "4g"})
    blocker = TonyClient("local").submit(load_job(sleeper_job("blocker", memory="3g", seconds=75)))
    wait_for(lambda: blocker.status().state == "RUNNING", timeout=60)
    h = submit(tmp_path, "sleep 1", {"worker": {"instances": 2, "memory": "1g"}})
    assert h.wait(poll_interval=0.5, timeout=300).state == "SUCCEEDED"
    out = run_tony("advise", h.app_id, "--json")
    [wait] = [a for a in json.loads(out.stdout)["advice"] if a["heuristic"] == "gang wait"]
    waited, ran = (int(n) for n in re.match(r"the job waited (\d+) s for its gang and then ran (\d+) s", wait["message"]).groups())
    assert waited >= 60 and ran < waited, wait
    assert blocker.wait(poll_interval=0.5, timeout=120).state == "SUCCEEDED"


@pytest.mark.job
def test_gpus_asked_against_their_use_on_a_real_job(tony_home, tmp_path, fake_gpu_machine):
    # This machine has no GPU: a stand-in for NVIDIA's library on the executor's path reports its
    # GPUs 0 and 1 at 10 % and 20 % busy. The executor, the allocation, the figures, the record
    # and the advice are the real ones.
    h = submit(tmp_path, "sleep 6", {"worker": {"instances": 1, "gpus": 2}},
               conf={"tony.task.metrics-interval-ms": 200, "tony.task.heartbeat-interval-ms": 200})
    assert h.wait(poll_interval=0.5, timeout=120).state == "SUCCEEDED"
    # The record is in this cluster's history, though the whitelist lets only PYTHONPATH through.
    out = run_tony("advise", h.app_id, "--json")
    assert out.returncode == 0, out.stderr
    found = {a["heuristic"]: a for a in json.loads(out.stdout)["advice"]}
    assert found["gpus"]["severity"] == "moderate" and found["gpus"]["changes"] == {"tony.worker.gpus": "1"}, found
    assert found["gpus"]["message"].startswith("worker's 2 GPU(s) per task were 15 % busy on average")
