"""The runner, started the way Azkaban's ProcessJob starts a process, on the embedded cluster."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from azkaban_jobtype.flow import load_project
from azkaban_jobtype.plugin import runner_command
from azkaban_jobtype.props import dump_properties, resolve
from azkaban_jobtype.runner import KILL_TIMEOUT, OUTPUT_KEYS
from tests.conftest import app_processes, run_tony, wait_for
from tony_workflow import process

from .conftest import EXAMPLE, partition_command_line

pytestmark = pytest.mark.job

APP_ID = re.compile(r"^(application_\d+_\d+)")
# Small enough for any machine the tests run on; no TensorBoard for the scripts that are not TensorFlow.
QUICK = {"tony.am.memory": "256m", "tony.worker.memory": "256m", "tony.task.tensorboard.enabled": "false"}


class Execution:
    """One job run as ProcessJob runs it: the props stored to a file in the working directory, the
    plugin's command split into argv without a shell, JOB_* variables, stdout and stderr merged."""

    def __init__(self, working_dir: Path, job_name: str, props: dict[str, str], env: dict[str, str] | None = None):
        self.working_dir = working_dir
        self.prop_file = working_dir / f"{job_name}_props_1234_tmp"
        self.output_file = working_dir / f"{job_name}_output_5678_tmp"
        dump_properties(props, self.prop_file)
        self.output_file.write_text("")
        env = {**os.environ, "JOB_PROP_FILE": str(self.prop_file), "JOB_NAME": job_name,
               "JOB_OUTPUT_PROP_FILE": str(self.output_file), "KRB5CCNAME": f"/tmp/krb5cc__test__{job_name}",
               **(env or {})}
        self.process = subprocess.Popen(partition_command_line(runner_command(sys.executable)), cwd=working_dir,
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 300) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match:
        deadline = time.time() + timeout
        while time.time() < deadline:
            match = re.search(pattern, self.log)
            if match:
                return match
            if self.process.poll() is not None:
                self._reader.join(5)
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not in the log:\n{self.log}")

    def output(self) -> dict:
        return json.loads(self.output_file.read_text())

    def application_ids(self) -> set[str]:
        """The ids Azkaban's log scanner finds: whitespace-separated tokens that start with one."""
        return {m.group(1) for line in self.lines for token in line.split() if (m := APP_ID.match(token))}


def script_project(root: Path, body: str) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "job.py").write_text(body)
    return root


def job_props(working_dir: Path, **extra: str) -> dict[str, str]:
    """Resolved props as the executor stores them for a job at the project root."""
    return {"type": "TonyJob", "executes": "job.py", "tony.worker.instances": "1", **QUICK,
            "azkaban.flow.flowid": "flow", "azkaban.flow.execid": "7", "azkaban.flow.projectname": "proj",
            "azkaban.job.id": "job", "azkaban.job.attempt": "0", "working.dir": str(working_dir),
            "user.to.proxy": "someone", **extra}


def app_dir(tony_home: Path, app_id: str) -> Path:
    return tony_home / "local" / "apps" / app_id


def container_processes(tony_home: Path, app_id: str) -> list[psutil.Process]:
    alive = []
    for pid_file in app_dir(tony_home, app_id).glob("containers/*/pid"):
        try:
            pid, started = int(pid_file.read_text()), float(pid_file.with_name("started").read_text())
            # The very process the container started: its pid alone may name another one by now.
            if process.alive(pid, started):
                alive.append(psutil.Process(pid))
        except (psutil.NoSuchProcess, ValueError, OSError):
            pass
    return alive


def test_a_job_runs_and_reports_as_azkaban_expects(tony_home, tmp_path):
    project = script_project(tmp_path / "project", "import time\nfrom tony_workflow import report\n"
                                                   "report(step=7, total=7, loss=0.25)\ntime.sleep(1.5)\n"
                                                   "print('trained', flush=True)\n")
    attachment = tmp_path / "attachment.json"
    run = Execution(project, "job", job_props(project, **{"worker_env.GREETING": "hello",
                                                          "azkaban.job.attachment.file": str(attachment),
                                                          "tony.task.heartbeat-interval-ms": "200",
                                                          "tony.worker.memory": "1g"}))
    assert run.wait() == 0, run.log
    [app_id] = run.application_ids()
    assert f"Submitted application {app_id}" in run.lines
    assert any(line.startswith("Tracking URL: http://127.0.0.1:") for line in run.lines)
    assert f"Final status of {app_id}: SUCCEEDED" in run.lines
    assert re.search(rf"\] {app_id} SUCCEEDED session=0 worker:0=SUCCEEDED", run.log)
    # What the training printed is in the job's log, after its task, before the job's end.
    assert run.lines.index("[worker:0] trained") < run.lines.index(f"Final status of {app_id}: SUCCEEDED")
    # The end of the log advises the next run: 1 GiB asked, a few dozen MB used.
    assert re.search(r"Advice for the next run \[moderate\] memory: worker asked for 1\.0 GiB and used at most "
                     r"\d+ MiB: .*; set tony\.worker\.memory=\d+m", run.log), run.log
    output = run.output()
    assert list(output)[:len(OUTPUT_KEYS)] == list(OUTPUT_KEYS)
    assert output["tony.application.id"] == app_id and output["tony.final.status"] == "SUCCEEDED"
    # The final figures, for the jobs after this one: the last progress and each task's peak memory.
    assert output["tony.progress.step"] == "7" and output["tony.metric.loss"] == "0.25"
    assert float(output["tony.worker.0.max_rss_mb"]) > 0
    [stats] = json.loads(attachment.read_text())
    assert stats["application_id"] == app_id and stats["state"] == "SUCCEEDED"
    assert stats["progress"]["step"] == 7 and stats["tasks"][0]["task_id"] == "worker:0"
    assert output["tony.tracking.url"].startswith("http://127.0.0.1:")
    assert output["tony.tensorboard.url"] == ""  # never null: Azkaban would drop the whole object
    status = json.loads(run_tony("status", app_id, "--json").stdout)
    assert status["state"] == "SUCCEEDED"
    spec = json.loads((app_dir(tony_home, app_id) / "spec.json").read_text())
    assert spec["conf"]["tony.execution.envs"] == "GREETING=hello"
    assert spec["conf"]["tony.context.execution-id"] == "7" and spec["conf"]["tony.context.source"] == "azkaban"
    assert spec["src_dir"] == str(project / "src")


def test_a_job_reports_its_openlineage_run_and_links_it_in_its_output(tony_home, tmp_path, monkeypatch):
    pytest.importorskip("openlineage.client", reason="installed with the lineage (and airflow) extra: make test")
    events_file = tmp_path / "lineage.jsonl"
    # Configured as the OpenLineage client reads it: here the file transport, set the way an
    # Azkaban job's env.NAME props set it.
    for name, value in {"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__APPEND": "true",
                        "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(events_file),
                        "OPENLINEAGE_NAMESPACE": "az-tests"}.items():
        monkeypatch.setenv(name, value)
    project = script_project(tmp_path / "project", "from tony_workflow import report\n"
                                                   "report(step=3, total=3, accuracy=0.9)\n")
    run = Execution(project, "job", job_props(project, **{"tony.lineage.inputs": "hdfs://nn.example:8020/data/x"}))
    assert run.wait() == 0, run.log
    [app_id] = run.application_ids()
    output = run.output()
    assert output["tony.lineage.namespace"] == "az-tests" and output["tony.lineage.job"] == "proj.flow.job"
    run_id = output["tony.lineage.run-id"]
    assert f"OpenLineage run {run_id} of job proj.flow.job (namespace az-tests)" in run.log
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert {e["run"]["runId"] for e in events} == {run_id}
    assert {(e["job"]["namespace"], e["job"]["name"]) for e in events} == {("az-tests", "proj.flow.job")}
    done = events[1]
    parent = done["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("az-tests", "proj.flow")
    assert done["run"]["facets"]["tony"]["applicationId"] == app_id
    assert done["run"]["facets"]["tony"]["metrics"] == {"accuracy": 0.9}
    assert done["job"]["facets"]["tony"]["tasks"]["worker"]["instances"] == 1
    checkpoints = json.loads(run_tony("status", app_id, "--json").stdout)["checkpoint_location"]
    assert ("file", checkpoints.removeprefix("file://")) in {(d["namespace"], d["name"]) for d in done["outputs"]}
    assert ("file", checkpoints.removeprefix("file://")) in {(d["namespace"], d["name"]) for d in events[0]["outputs"]}
    assert {(d["namespace"], d["name"]) for d in done["inputs"]} == {("hdfs://nn.example:8020", "/data/x")}


def test_a_failed_application_fails_the_job_and_its_log_ends_with_the_traceback(tony_home, tmp_path):
    project = script_project(tmp_path / "project", "print('reading part 3', flush=True)\n"
                                                   "raise ValueError('bad data in part 3')\n")
    run = Execution(project, "job", job_props(project))
    assert run.wait() == 1, run.log
    assert run.output()["tony.final.status"] == "FAILED"
    assert re.search(r"Final status of application_\d+_\d+: FAILED", run.log)
    assert "Diagnostics: " in run.log
    # The log ends with what the failed task printed last: its stdout, then its stderr's traceback.
    tail = run.log[run.log.rindex("--- worker:0 stdout (FAILED, exit code 1)"):]
    assert "\nreading part 3\n--- worker:0 stderr (FAILED, exit code 1), its last " in tail, tail
    assert "Traceback (most recent call last):" in tail
    assert tail.rstrip().endswith("ValueError: bad data in part 3"), tail


def test_a_notebook_runs_as_the_jobs_step_with_its_parameters(tony_home, tmp_path):
    from tests.tony_workflow.task.test_notebook import notebook
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    notebook(project / "src" / "train.ipynb", ("who = 'nobody'", ["parameters"]), ("print(f'trained for {who}')", []))
    run = Execution(project, "job", job_props(project, executes="train.ipynb", task_params="--who azkaban"))
    assert run.wait() == 0, run.log
    assert run.output()["tony.final.status"] == "SUCCEEDED"
    assert "trained for azkaban" in run.log


def test_with_a_history_server_the_output_links_to_the_finished_jobs_page_there(tony_home, tmp_path, monkeypatch):
    monkeypatch.setenv("TONY_HISTORY_SERVER", "http://hs.example.com:19886")
    project = script_project(tmp_path / "project", "print('done')\n")
    run = Execution(project, "job", job_props(project))
    assert run.wait() == 0, run.log
    output = run.output()
    assert output["tony.tracking.url"] == f"http://hs.example.com:19886/jobs/{output['tony.application.id']}"


def test_a_job_that_waits_for_room_says_why_in_the_job_log(tony_home, tmp_path, local_site):
    local_site({"tony.local.memory": "1g"})
    from tony_workflow.client import TonyClient, load_job
    holder = TonyClient("local").submit(load_job({
        "name": "holder", "command": "sleep 4", "am": {"memory": "256m"},
        "tasks": {"worker": {"instances": 1, "memory": "512m"}}, "conf": {"tony.task.tensorboard.enabled": "false"}}))
    project = script_project(tmp_path / "project", "print('ran', flush=True)\n")
    run = Execution(project, "job", job_props(project))
    run.wait_for(rf"waiting 1/2 containers[^:]*: worker: 0 of 1 containers \(256 MB, 1 vcore each\); blocked by "
                 rf"memory: the gang needs 512 MB at once and 256 MB of 1024 MB are free, held by {holder.app_id}")
    assert run.wait() == 0, run.log
    assert holder.wait(timeout=60).state == "SUCCEEDED"


def test_bad_props_submit_nothing_and_name_the_key(tony_home, tmp_path):
    project = script_project(tmp_path / "project", "pass\n")
    props = job_props(project, **{"tony.worker.instances": "many"})
    del props["executes"]
    run = Execution(project, "bad_job", props)
    assert run.wait(60) == 2
    assert "error: the props of job bad_job cannot be submitted:" in run.lines
    assert "  job bad_job: tony.worker.instances: must be an integer >= 0 (got 'many')" in run.lines
    assert any(line.startswith("  job bad_job: executes: is required") for line in run.lines)
    assert "Traceback" not in run.log
    assert not run.application_ids() and not list(tony_home.glob("local/apps/*"))
    assert run.output_file.read_text() == ""


def test_without_azkabans_environment_it_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOB_")}
    r = subprocess.run([sys.executable, "-m", "azkaban_jobtype"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=60, check=False)
    assert r.returncode == 2 and "JOB_PROP_FILE is not set" in r.stdout


def test_sigterm_kills_the_application_within_azkabans_grace(tony_home, tmp_path):
    project = script_project(tmp_path / "project", "import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    run = Execution(project, "job", job_props(project))
    run.wait_for(r"worker:0=RUNNING")
    [app_id] = run.application_ids()
    assert container_processes(tony_home, app_id)
    started = time.monotonic()
    run.process.send_signal(signal.SIGTERM)
    code = run.wait(30)
    took = time.monotonic() - started
    assert code == 128 + signal.SIGTERM, run.log
    assert took < KILL_TIMEOUT + 5 < 30
    assert f"Received SIGTERM: killing application {app_id}" in run.lines
    assert run.output()["tony.final.status"] == "KILLED"
    status = json.loads(run_tony("status", app_id, "--json").stdout)
    assert status["state"] == "KILLED" and "killed by Azkaban (SIGTERM)" in status["diagnostics"]
    assert not container_processes(tony_home, app_id)


def test_a_retry_after_its_runner_died_follows_the_running_application(tony_home, tmp_path):
    # The first attempt's runner is killed outright (its executor died): the application runs on.
    project = script_project(tmp_path / "project", "import os, time\n"
                                                   "print('execution', os.environ['TONY_CONTEXT_EXECUTION_ID'],\n"
                                                   "      'job', os.environ['TONY_CONTEXT_JOB_ID'], flush=True)\n"
                                                   "time.sleep(6)\n")
    first = Execution(project, "job", job_props(project))
    first.wait_for(r"worker:0=RUNNING")
    [app_id] = first.application_ids()
    first.process.kill()
    first.wait(30)
    # Azkaban's retry: the same execution and job, the next attempt.
    again = Execution(project, "job", job_props(project, **{"azkaban.job.attempt": "1"}))
    assert again.wait() == 0, again.log
    assert (f"Application {app_id}, submitted by an earlier attempt of job job in this execution, still runs: "
            "following it instead of submitting another") in again.lines
    assert again.output()["tony.application.id"] == app_id and again.output()["tony.final.status"] == "SUCCEEDED"
    assert [p.name for p in (tony_home / "local" / "apps").glob("application_*")] == [app_id]
    [stdout] = app_dir(tony_home, app_id).glob("containers/*/stdout")
    assert "execution 7 job job" in stdout.read_text()
    # Another execution of the same job is another run: it submits its own.
    other = Execution(project, "job", job_props(project, **{"azkaban.flow.execid": "8"}))
    assert other.wait() == 0, other.log
    assert other.output()["tony.application.id"] != app_id
    # Nothing of either application outlives it, the one the killed runner left included.
    for done in (app_id, other.output()["tony.application.id"]):
        wait_for(lambda done=done: not app_processes(done), timeout=60)


def test_an_execution_id_of_another_server_or_set_by_hand_is_not_followed(tony_home, tmp_path):
    # Every Azkaban server counts its execution ids from 1: server A's execution 7 left its
    # application running (its runner was killed); a stranger then submitted by hand a job whose
    # props set the same execution, flow and job.
    project = script_project(tmp_path / "project", "import time\ntime.sleep(20)\n")
    a = {"azkaban.webserverhost": "azkaban-a.example.com"}
    first = Execution(project, "job", job_props(project, **a))
    first.wait_for(r"worker:0=RUNNING")
    [left] = first.application_ids()
    first.process.kill()
    first.wait(30)
    by_hand = tmp_path / "forged.json"
    by_hand.write_text(json.dumps({"name": "forged", "command": "sleep 20", "tasks": {"worker": {"instances": 1}},
                                   "conf": {**QUICK, "tony.context.execution-id": "7", "tony.context.flow-id": "flow",
                                            "tony.context.job-id": "job",
                                            "tony.context.host": "azkaban-a.example.com"}}))
    forged = run_tony("submit", str(by_hand), "--json")
    assert forged.returncode == 0, forged.stderr[-2000:]
    stranger = json.loads(forged.stdout)["application_id"]
    quick = script_project(tmp_path / "quick", "print('trained', flush=True)\n")
    # Server B's execution 7, and a server under another key that calls itself by the same host:
    # each runs a job of its own.
    other_key = tmp_path / "other.key"
    other_key.write_text("another-executors-key-0123456789\n")
    other_key.chmod(0o600)
    for props, env in (({"azkaban.webserverhost": "azkaban-b.example.com"}, None),
                       (a, {"TONY_REATTACH_KEY_FILE": str(other_key)})):
        other = Execution(quick, "job", job_props(quick, **props, **{"azkaban.job.attempt": "1"}), env=env)
        assert other.wait() == 0, other.log
        assert other.output()["tony.application.id"] not in (left, stranger), other.log
        assert "still runs: following it" not in other.log
    # Server A's own retry follows the application its first attempt left, not the newer forged one.
    again = Execution(quick, "job", job_props(quick, **a, **{"azkaban.job.attempt": "1"}))
    assert again.wait() == 0, again.log
    assert again.output()["tony.application.id"] == left, again.log
    for app_id in (left, stranger):
        wait_for(lambda app_id=app_id: not app_processes(app_id), timeout=90)


@pytest.mark.tf
def test_the_example_project_trains_mnist(tony_home, tmp_path):
    import shutil
    project = tmp_path / "mnist"
    shutil.copytree(EXAMPLE, project)
    with load_project(project) as loaded:
        [train] = [i for i in loaded.instances(runtime={"azkaban.flow.execid": "99"})
                   if i.node.name == "mnist_train"]
        props = resolve(train.props)
    run = Execution(project, "mnist_train", props)
    assert run.wait(600) == 0, run.log
    [app_id] = run.application_ids()
    assert f"Submitted application {app_id}" in run.lines
    assert any(line.startswith("TensorBoard URL: http://127.0.0.1:") for line in run.lines)
    output = run.output()
    assert output["tony.final.status"] == "SUCCEEDED" and output["tony.tensorboard.url"].startswith("http://")
    metrics = json.loads((app_dir(tony_home, app_id) / "checkpoints" / "final" / "metrics.json").read_text())
    assert metrics["steps"] == 2 * 20
    stdout = "".join(p.read_text() for p in app_dir(tony_home, app_id).glob("containers/*/stdout"))
    assert "[mnist] session=0 done steps=40" in stdout
