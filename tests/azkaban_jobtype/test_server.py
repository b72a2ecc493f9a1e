"""A real Azkaban 3.58.0 solo server runs TonY jobs through the installed job type plugin.

The server (web server and executor in one JVM, embedded H2) is compiled once from the sources in
the shared folder (``azkaban/build.sh``) into ``~/.cache/tony-workflow/azkaban-3.58.0`` and started
with the job types ``tony-azkaban install-plugin`` wrote. Everything is driven through Azkaban's
AJAX API: upload a project, execute its flows, follow them, read job logs and attachments, cancel.
The jobs run on the embedded local cluster of an isolated TONY_HOME, which the server's JVM hands
to every job process through its own environment.
"""
from __future__ import annotations

import fcntl
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from tests.conftest import app_processes, run_tony, shared_dir, wait_for

from .conftest import run_cli, zip_project

pytestmark = pytest.mark.azkaban

AZKABAN_VERSION = "3.58.0"
BUILD_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tony-workflow" / \
    f"azkaban-{AZKABAN_VERSION}"
# What Maven prints when it cannot reach the repository at all (as opposed to a missing artifact).
OFFLINE = re.compile(r"UnknownHostException|Network is unreachable|Connection refused|Connect to .* timed out|"
                     r"offline mode|Could not transfer artifact")
# Small enough for any machine the tests run on; no TensorBoard for scripts that are not TensorFlow.
QUICK = {"tony.am.memory": "256m", "tony.worker.memory": "256m", "tony.task.tensorboard.enabled": "false",
         "tony.worker.instances": "1", "tony.task.heartbeat-interval-ms": "200"}
SUBMITTED = re.compile(r"Submitted application (application_\d+_\d+)\s*$", re.MULTILINE)
TERMINAL = {"SUCCEEDED", "FAILED", "KILLED", "CANCELLED"}


def java_major(java: str) -> int | None:
    out = subprocess.run([java, "-XshowSettings:properties", "-version"], capture_output=True, text=True,
                         timeout=60, check=False).stderr
    m = re.search(r"java\.specification\.version = (\d+)(?:\.(\d+))?", out)
    if not m:
        return None
    return int(m.group(2)) if m.group(1) == "1" else int(m.group(1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def build_azkaban() -> Path:
    """The compiled server, built on first use; skips when this machine cannot build it."""
    script = shared_dir() / "azkaban" / "build.sh"
    if not script.is_file():
        pytest.skip(f"the Azkaban {AZKABAN_VERSION} sources and build script are not at {script.parent}")
    # Once built, running the server needs Java alone.
    tools = ("java",) if (BUILD_DIR / ".built").exists() else ("java", "javac", "mvn")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"building and running Azkaban needs {', '.join(missing)} (Java 17 and Maven)")
    version = java_major(shutil.which("java"))
    if version is None or version < 17:
        pytest.skip(f"Azkaban is built and run here with Java 17 or newer; `java` is Java {version}")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    # build.sh starts by wiping its output: two test runs must not build into the same folder at once.
    with open(BUILD_DIR.parent / f"azkaban-{AZKABAN_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (BUILD_DIR / ".built").exists():
            r = subprocess.run(["bash", str(script), str(BUILD_DIR)], capture_output=True, text=True, timeout=1800,
                               check=False)
            if r.returncode != 0:
                text = r.stdout + r.stderr
                if OFFLINE.search(text):
                    pytest.skip("Maven Central cannot be reached and ~/.m2 lacks Azkaban's jars:\n" + text[-2000:])
                pytest.fail("building Azkaban failed:\n" + text[-4000:])
    return BUILD_DIR


class AzkabanError(AssertionError):
    """An AJAX call the server refused."""


class AzkabanServer:
    """One solo server in its own run directory and process group, and the AJAX calls the tests make."""

    USER = PASSWORD = "azkaban"  # the solo server's own conf/azkaban-users.xml

    def __init__(self, build: Path, run_dir: Path, env: dict[str, str]):
        self.build, self.run_dir, self.env = build, run_dir, env
        self.port, self.executor_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.session_id = ""
        self.http = requests.Session()

    @property
    def log(self) -> str:
        """What the JVM printed, then the server's log."""
        paths = (self.run_dir / "server.log", self.run_dir / "azkaban.log")
        return "".join(p.read_text(errors="replace") for p in paths if p.exists())

    def install(self, job_types: Path) -> None:
        """Lays out the run directory; ``job_types`` is a ``plugins/jobtypes`` folder to copy in."""
        shutil.copytree(self.build / "conf", self.run_dir / "conf")
        # The server's own log, for when a call fails; the solo server ships no log4j configuration.
        (self.run_dir / "conf" / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, file\nlog4j.appender.file=org.apache.log4j.FileAppender\n"
            "log4j.appender.file.File=azkaban.log\nlog4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=%d %-5p [%c{1}] [%t] %m%n\n")
        shutil.copytree(self.build / "sql", self.run_dir / "sql")
        (self.run_dir / "web").mkdir()
        shutil.copytree(job_types, self.run_dir / "plugins" / "jobtypes")
        conf = self.run_dir / "conf" / "azkaban.properties"
        text = re.sub(r"(?m)^jetty\.port=.*$", f"jetty.port={self.port}", conf.read_text())
        text = re.sub(r"(?m)^executor\.port=.*$", f"executor.port={self.executor_port}", text)
        conf.write_text(text)

    def start(self, timeout: float = 120) -> None:
        classpath = f"{self.build / 'classes'}:{(self.build / 'classpath.txt').read_text().strip()}"
        with open(self.run_dir / "server.log", "wb") as out:
            # A session of its own: stopping the process group takes the JVM and every job it started.
            self.process = subprocess.Popen(
                ["java", "-Xmx512M", "-Dlog4j.configuration=file:conf/log4j.properties",
                 "--add-opens", "java.base/java.lang=ALL-UNNAMED",
                 "--add-exports", "java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
                 "-cp", classpath, "azkaban.soloserver.AzkabanSingleServer", "-conf", "conf"],
                cwd=self.run_dir, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

        def answers() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the Azkaban server exited with {self.process.returncode}:\n{self.log[-4000:]}")
            try:
                return self.http.get(self.url + "/", timeout=5).status_code == 200
            except requests.ConnectionError:
                return False
        wait_for(answers, timeout=timeout, interval=0.5)
        r = self.http.post(self.url + "/", data={"action": "login", "username": self.USER,
                                                 "password": self.PASSWORD}, timeout=30)
        self.session_id = self._json(r, "login")["session.id"]

    def stop(self) -> None:
        """Stops the JVM and everything in its process group, and waits for both ports to close."""
        if self.process is None:
            return
        pgid = self.process.pid
        if self.process.poll() is None:
            os.killpg(pgid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(pgid, signal.SIGKILL)  # whatever the JVM left in its group
        except ProcessLookupError:
            pass
        self.process.wait(30)
        wait_for(lambda: not self.group_members(pgid), timeout=30)
        wait_for(lambda: not port_open(self.port) and not port_open(self.executor_port), timeout=30)
        self.http.close()

    @staticmethod
    def group_members(pgid: int) -> list[psutil.Process]:
        alive = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except (psutil.Error, ProcessLookupError):
                continue
        return alive

    def _json(self, response: requests.Response, what: str) -> dict:
        assert response.status_code == 200, \
            f"{what}: HTTP {response.status_code}; the server's log:\n{self.log[-5000:]}"
        body = response.json()
        if isinstance(body, dict) and (body.get("error") or body.get("status") == "error"):
            raise AzkabanError(f"{what}: {body.get('error') or body.get('message')}")
        return body

    def get(self, path: str, timeout: float = 60, **params) -> dict:
        r = self.http.get(self.url + path, params={**params, "session.id": self.session_id}, timeout=timeout)
        return self._json(r, f"{path} {params.get('ajax', '')}")

    def create_project(self, name: str, archive: Path) -> dict:
        r = self.http.post(self.url + "/manager", params={"action": "create"}, timeout=60,
                           data={"session.id": self.session_id, "name": name, "description": "TonY jobs"})
        self._json(r, "create")
        with open(archive, "rb") as f:
            r = self.http.post(self.url + "/manager", timeout=120,
                               data={"session.id": self.session_id, "ajax": "upload", "project": name},
                               files={"file": (archive.name, f, "application/zip")})
        return self._json(r, "upload")

    def flows(self, project: str) -> list[str]:
        return [f["flowId"] for f in self.get("/manager", ajax="fetchprojectflows", project=project)["flows"]]

    def execute(self, project: str, flow: str) -> int:
        return int(self.get("/executor", ajax="executeFlow", project=project, flow=flow)["execid"])

    def execution(self, exec_id: int) -> dict:
        return self.get("/executor", ajax="fetchexecflow", execid=exec_id)

    def running(self, project: str, flow: str) -> list[int]:
        return self.get("/executor", ajax="getRunning", project=project, flow=flow).get("execIds", [])

    def wait_until_done(self, exec_id: int, timeout: float = 180) -> dict:
        """The execution once it ended and the web server let go of it: until then the web server asks
        the executor for the job logs and stats, and the executor may already have dropped the flow."""
        def done():
            e = self.execution(exec_id)
            return e["status"] in TERMINAL and exec_id not in self.running(e["project"], e["flow"]) and e
        return wait_for(done, timeout=timeout, interval=1)

    def wait_for_job(self, exec_id: int, job: str, status: str = "RUNNING", timeout: float = 120) -> None:
        """Waits for a job to reach ``status``; until it starts, asking for its log is a server error."""
        wait_for(lambda: node_states(self.execution(exec_id)).get(job) == status, timeout=timeout, interval=0.5)

    def job_log(self, exec_id: int, job: str) -> str:
        """The whole job log; the server sends it HTML-escaped, in pieces of at most ``length`` bytes."""
        parts, offset = [], 0
        while True:
            piece = self.get("/executor", ajax="fetchExecJobLogs", execid=exec_id, jobId=job, offset=offset,
                             length=100_000)
            if not piece.get("length"):
                return html.unescape("".join(parts))
            parts.append(piece["data"])
            offset = piece["offset"] + piece["length"]

    def job_stats(self, exec_id: int, job: str):
        return self.get("/executor", ajax="fetchExecJobStats", execid=exec_id, jobid=job).get("jobStats")

    def cancel(self, exec_id: int) -> dict:
        # The executor waits for the job process to end before it answers.
        return self.get("/executor", timeout=120, ajax="cancelFlow", execid=exec_id)


def node_states(execution: dict) -> dict[str, str]:
    return {n["id"]: n["status"] for n in execution["nodes"]}


# It reads the job's input, declared in its .job file (tony.data.train.*): a batch a step.
TRAIN_SCRIPT = """\
import time
from tony_workflow import report
from tony_workflow.data import dataset
ids = []
for step, batch in enumerate(dataset("train", batch_size=10), 1):
    ids += batch["id"].tolist()
    report(step=step, total=5, loss=1.0 / step)
    time.sleep(1)
print("trained on ids", min(ids), "to", max(ids), "each once:", sorted(ids) == list(range(50)), flush=True)
"""

# Long enough that only a cancel ends it within the test's time.
LONG_SCRIPT = """\
import time
from tony_workflow import report
for step in range(1, 601):
    report(step=step, total=600)
    time.sleep(1)
"""


def write_job(path: Path, props: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))


@pytest.fixture(scope="module")
def tony_env(tmp_path_factory):
    """An isolated TONY_HOME and TONY_CONF_DIR (the local cluster's size) for every job the server runs."""
    from tony_workflow.hadoop import site_xml
    root = tmp_path_factory.mktemp("azkaban-tony")
    home, conf = root / "tony-home", root / "tony-conf"
    conf.mkdir()
    (conf / "tony-site.xml").write_text(site_xml({"tony.local.memory": "4g"}))
    env = {"TONY_HOME": str(home), "TONY_CONF_DIR": str(conf)}
    yield env
    # Whatever an application left behind, found by scanning the machine.
    for app in home.glob("local/apps/application_*"):
        for p in app_processes(app.name):
            try:
                p.kill()
            except psutil.Error:
                pass


@pytest.fixture(scope="module")
def azkaban(tony_env, tmp_path_factory):
    build = build_azkaban()
    root = tmp_path_factory.mktemp("azkaban")
    job_types = root / "jobtypes"
    r = run_cli("install-plugin", str(job_types))
    assert r.returncode == 0, r.stderr
    # Without it ProcessJob runs every command through the setuid execute-as-user binary.
    (job_types / "commonprivate.properties").write_text("execute.as.user=false\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TONY_BACKEND", "TONY_HOME", "TONY_CONF_DIR")}
    server = AzkabanServer(build, root / "server", {**env, **tony_env})
    server.run_dir.mkdir()
    server.install(job_types)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def project(azkaban, tmp_path_factory) -> str:
    """A Flow 1.0 project with four flows: ``report`` (a TensorFlowJob reading the project's Parquet
    files as its input, and a command job after it),
    ``after_long`` (a TonyJob that runs until cancelled, and a command job after it), and two
    notebooks as jobs: ``explore`` (with parameters) and ``broken`` (a cell raises)."""
    src = tmp_path_factory.mktemp("tony-project")
    (src / "src").mkdir()
    (src / "src" / "train.py").write_text(TRAIN_SCRIPT)
    (src / "src" / "long.py").write_text(LONG_SCRIPT)
    (src / "data").mkdir()  # the training job's input, in the project: a path relative to it
    for part in range(2):
        pq.write_table(pa.table({"id": np.arange(part * 25, part * 25 + 25)}), src / "data" / f"part-{part}.parquet")
    write_job(src / "train.job", {"type": "TensorFlowJob", "executes": "train.py", "src_dir": "src",
                                  "tony.data.train.path": "data", "tony.data.train.format": "parquet", **QUICK})
    write_job(src / "report.job", {
        "type": "command", "dependencies": "train",
        "command": "echo upstream ${tony.application.id} ended ${tony.final.status} at step ${tony.progress.step}"
                   " of ${tony.progress.total} with loss ${tony.metric.loss}"})
    write_job(src / "long.job", {"type": "TonyJob", "executes": "long.py", "src_dir": "src", **QUICK})
    # Two notebooks as job steps, each a flow of its own: one with the job's parameters, one whose
    # cell raises.
    from tests.tony_workflow.task.test_notebook import notebook
    notebook(src / "src" / "explore.ipynb", ("who = 'nobody'", ["parameters"]),
             ("print(f'explored for {who}')", []))
    notebook(src / "src" / "broken.ipynb", ("raise ValueError('the notebook broke here')", []))
    write_job(src / "explore.job", {"type": "TensorFlowJob", "executes": "explore.ipynb", "src_dir": "src",
                                    "task_params": "--who azkaban", **QUICK})
    write_job(src / "broken.job", {"type": "TonyJob", "executes": "broken.ipynb", "src_dir": "src", **QUICK})
    write_job(src / "after_long.job", {"type": "command", "dependencies": "long",
                                       "command": "echo long ended ${tony.final.status}"})
    archive = zip_project(src, tmp_path_factory.mktemp("zip") / "tony.zip")
    uploaded = azkaban.create_project("tony", archive)
    assert uploaded["version"] == "1"  # the server sends it as text
    return "tony"


@pytest.fixture(scope="module")
def first_run(azkaban, project) -> dict:
    """The ``report`` flow, executed once and followed to its end."""
    exec_id = azkaban.execute(project, "report")
    execution = azkaban.wait_until_done(exec_id)
    return {"exec_id": exec_id, "execution": execution}


def test_the_uploaded_project_has_every_flow(azkaban, project):
    assert sorted(azkaban.flows(project)) == ["after_long", "broken", "explore", "report"]


def test_a_notebook_runs_as_a_job_with_its_parameters_and_a_failing_cell_fails_it_with_its_traceback(
        azkaban, project):
    ran = azkaban.execute(project, "explore")
    execution = azkaban.wait_until_done(ran)
    log = azkaban.job_log(ran, "explore")
    assert execution["status"] == "SUCCEEDED", log[-4000:]
    assert re.search(r"\[worker:0\] explored for azkaban", log), log[-4000:]
    failed = azkaban.execute(project, "broken")
    execution = azkaban.wait_until_done(failed)
    log = azkaban.job_log(failed, "broken")
    assert execution["status"] == "FAILED", log[-4000:]
    [app_id] = SUBMITTED.findall(log)
    assert f"Final status of {app_id}: FAILED" in log
    assert "ValueError: the notebook broke here" in log and "Traceback" in log, log[-4000:]


def test_the_flow_succeeds_and_the_next_job_gets_the_output_props(azkaban, first_run, tony_env):
    exec_id, execution = first_run["exec_id"], first_run["execution"]
    train_log = azkaban.job_log(exec_id, "train")
    assert execution["status"] == "SUCCEEDED", train_log[-4000:]
    assert node_states(execution) == {"train": "SUCCEEDED", "report": "SUCCEEDED"}
    [app_id] = SUBMITTED.findall(train_log)
    # Azkaban resolved the upstream job's output props in the downstream job's command.
    report_log = azkaban.job_log(exec_id, "report")
    assert f"upstream {app_id} ended SUCCEEDED at step 5 of 5 with loss 0.2" in report_log
    status = json.loads(run_tony("status", app_id, "--json", env=tony_env).stdout)
    assert status["state"] == "SUCCEEDED"
    assert [(t["type"], t["index"], t["state"]) for t in status["tasks"]] == [("worker", 0, "SUCCEEDED")]
    # The task read the input its .job file declared, every row once.
    assert "trained on ids 0 to 49 each once: True" in run_tony("logs", app_id, env=tony_env).stdout


def test_the_job_log_shows_the_application_and_its_progress(azkaban, first_run):
    log = azkaban.job_log(first_run["exec_id"], "train")
    [app_id] = SUBMITTED.findall(log)
    assert "Building TensorFlowJob job executor." in log
    assert re.search(rf"{app_id} RUNNING session=0 worker:0=RUNNING step=\d/5", log), log[-4000:]
    assert f"Final status of {app_id}: SUCCEEDED" in log
    # What the training printed, as it printed it, after its task (Azkaban stamps each line of the log).
    assert re.search(r"\[worker:0\] trained on ids 0 to 49 each once: True", log), log[-4000:]
    assert log.index("[worker:0] trained on ids") < log.index(f"Final status of {app_id}: SUCCEEDED")
    assert "Process completed successfully" in log
    assert "Traceback" not in log


def test_the_attachment_comes_back_through_fetchexecjobstats(azkaban, first_run):
    exec_id = first_run["exec_id"]
    [app_id] = SUBMITTED.findall(azkaban.job_log(exec_id, "train"))
    stats = azkaban.job_stats(exec_id, "train")
    # Azkaban keeps a job's attachment as a JSON list of stats records, one per writer.
    assert isinstance(stats, list) and len(stats) == 1, stats
    [record] = stats
    assert record["application_id"] == app_id and record["state"] == "SUCCEEDED"
    assert record["progress"]["step"] == 5 and record["progress"]["total"] == 5
    assert record["progress"]["metrics"] == {"loss": 0.2}
    assert [(t["task_id"], t["state"], t["exit_code"]) for t in record["tasks"]] == [("worker:0", "SUCCEEDED", 0)]
    # the command job wrote no attachment
    assert azkaban.job_stats(exec_id, "report") is None


def test_cancelling_the_flow_kills_the_application(azkaban, project, tony_env):
    exec_id = azkaban.execute(project, "after_long")
    azkaban.wait_for_job(exec_id, "long")
    app_id = wait_for(lambda: (m := SUBMITTED.search(azkaban.job_log(exec_id, "long"))) and m.group(1),
                      timeout=120, interval=1)

    def worker_running() -> bool:
        r = run_tony("status", app_id, "--json", env=tony_env)
        return r.returncode == 0 and [t["state"] for t in json.loads(r.stdout)["tasks"]] == ["RUNNING"]
    wait_for(worker_running, timeout=120, interval=1)
    assert app_processes(app_id), "the running application has no process on this machine"

    azkaban.cancel(exec_id)
    execution = azkaban.wait_until_done(exec_id, timeout=90)
    assert execution["status"] == "KILLED"
    assert node_states(execution) == {"long": "KILLED", "after_long": "CANCELLED"}
    status = json.loads(run_tony("status", app_id, "--json", env=tony_env).stdout)
    assert status["state"] == "KILLED"
    assert [t["state"] for t in status["tasks"]] == ["KILLED"]
    wait_for(lambda: not app_processes(app_id), timeout=30)
    log = azkaban.job_log(exec_id, "long")
    assert f"Received SIGTERM: killing application {app_id}" in log
    assert f"Final status of {app_id}: KILLED" in log
    assert "Kill with signal TERM failed" not in log  # the runner ended within ProcessJob's 30 s
    assert "Traceback" not in log
    [record] = azkaban.job_stats(exec_id, "long")
    assert record["application_id"] == app_id and record["state"] == "KILLED"
    assert record["diagnostics"] == "killed by Azkaban (SIGTERM)"


def test_the_server_stops_and_leaves_nothing_behind(azkaban):
    pgid = azkaban.process.pid
    assert AzkabanServer.group_members(pgid)
    azkaban.stop()
    assert azkaban.process.returncode is not None
    assert not AzkabanServer.group_members(pgid)
    assert not port_open(azkaban.port) and not port_open(azkaban.executor_port)
