"""Azkaban's own classes load the installed plugin folder and run the example job.

``tests/azkaban`` holds a small Java harness over ``com.linkedin.azkaban:azkaban-common:3.58.0`` (and
az-core) from Maven Central: JobTypeManager loads the folder ``tony-azkaban install-plugin`` wrote and
builds the job from its props, ProcessJob runs it, and ``cancel()`` stops it. HadoopJobUtils (the
Hadoop job type plugin's) scans the job log for application ids as Azkaban does.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, run_tony
from tony_workflow import process
from tony_workflow.context import application_tags
from tony_workflow.spec import JobSpec

from .conftest import EXAMPLE, run_cli

pytestmark = [pytest.mark.azkaban, pytest.mark.tf]

HARNESS = REPO / "tests" / "azkaban"
MAIN_CLASS = "tonyworkflow.azkaban.AzkabanHarness"
# What Maven prints when it cannot reach the repository at all (as opposed to a missing artifact).
OFFLINE = re.compile(r"UnknownHostException|Network is unreachable|Connection refused|Connect to .* timed out|"
                     r"offline mode")


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> list[str]:
    """The java command line that runs the harness; the Maven resolve and javac happen once a session."""
    missing = [tool for tool in ("mvn", "java", "javac") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (Java 17 and Maven)")
    build = tmp_path_factory.mktemp("azkaban-harness")
    classpath_file = build / "classpath.txt"
    r = subprocess.run(["mvn", "-q", "-B", "-f", str(HARNESS / "pom.xml"), "dependency:build-classpath",
                        f"-Dmdep.outputFile={classpath_file}"], capture_output=True, text=True, timeout=900,
                       check=False)
    if r.returncode != 0:
        text = r.stdout + r.stderr
        if OFFLINE.search(text):
            pytest.skip("Maven Central cannot be reached and ~/.m2 lacks Azkaban's jars:\n" + text[-2000:])
        pytest.fail("resolving Azkaban's jars failed:\n" + text[-4000:])
    classpath = classpath_file.read_text().strip()
    classes = build / "classes"
    sources = [str(p) for p in (HARNESS / "src" / "main" / "java").rglob("*.java")]
    r = subprocess.run(["javac", "-d", str(classes), "-cp", classpath, *sources], capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    # Guice 4.1 (Azkaban's injector) defines classes by reflection, and ProcessJob reads the pid it
    # signals on cancel the same way; Java 17 allows both only with java.lang opened.
    return ["java", "--add-opens", "java.base/java.lang=ALL-UNNAMED", "-cp", f"{classes}:{classpath}"]


@pytest.fixture
def executor(tmp_path) -> dict[str, Path]:
    """A plugin folder as an executor has it, and a copy of the example project as its working directory."""
    plugins = tmp_path / "plugins" / "jobtypes"
    r = run_cli("install-plugin", str(plugins))
    assert r.returncode == 0, r.stderr
    # The executor's own setting: without it ProcessJob runs every command through the setuid
    # execute-as-user binary of azkaban.native.lib, which a test machine does not have.
    (plugins / "commonprivate.properties").write_text("execute.as.user=false\n")
    project = tmp_path / "mnist"
    shutil.copytree(EXAMPLE, project)
    return {"plugins": plugins, "project": project, "out": tmp_path / "result"}


def run_harness(harness: list[str], executor: dict[str, Path], mode: str, *overrides: str,
                java_props: tuple[str, ...] = ()) -> tuple[dict, str]:
    command = [*harness, *java_props, MAIN_CLASS, mode, str(executor["plugins"]), str(executor["project"]),
               "mnist_train", str(executor["out"]), *overrides]
    r = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    log_file = executor["out"] / "job.log"
    log = log_file.read_text() if log_file.exists() else ""
    assert r.returncode == 0, f"harness failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}\n{log[-3000:]}"
    return json.loads((executor["out"] / "result.json").read_text()), log


def container_processes(tony_home: Path, app_id: str) -> list[psutil.Process]:
    alive = []
    for pid_file in (tony_home / "local" / "apps" / app_id).glob("containers/*/pid"):
        try:
            pid, started = int(pid_file.read_text()), float(pid_file.with_name("started").read_text())
            # The very process the container started: its pid alone may name another one by now.
            if process.alive(pid, started):
                alive.append(psutil.Process(pid))
        except (psutil.NoSuchProcess, ValueError, OSError):
            pass
    return alive


def test_jobtypemanager_loads_the_plugin_and_processjob_runs_the_example(harness, executor, tony_home):
    result, log = run_harness(harness, executor, "run")
    runner = f"{sys.executable} -m azkaban_jobtype"
    assert result["jobTypes"] == {"TensorFlowJob": {"class": "azkaban.jobExecutor.ProcessJob", "command": runner},
                                  "TonyJob": {"class": "azkaban.jobExecutor.ProcessJob", "command": runner}}
    assert result["jobClass"] == "azkaban.jobExecutor.ProcessJob"
    assert result["resolvedCommand"] == runner
    assert result["success"] is True, result["error"] + "\n" + log[-4000:]

    # Azkaban's log scanner finds exactly the one application, the one in the output properties
    [app_id] = result["applicationIds"]
    assert f"mnist_train INFO - Submitted application {app_id}" in log
    assert "Process completed successfully" in log
    output = result["outputProps"]
    assert output["tony.application.id"] == app_id
    assert output["tony.final.status"] == "SUCCEEDED"
    assert output["tony.tracking.url"].startswith("http://127.0.0.1:")
    assert output["tony.tensorboard.url"].startswith("http://127.0.0.1:")

    status = json.loads(run_tony("status", app_id, "--json").stdout)
    assert status["state"] == "SUCCEEDED"
    spec = json.loads((tony_home / "local" / "apps" / app_id / "spec.json").read_text())
    tags = application_tags([], [], JobSpec.from_dict(spec).context)[0]
    # the tags TonY's own job type built with HadoopJobUtils, plus the job id and attempt
    assert set(result["hadoopTags"].split(",")) <= set(tags)
    assert {"azkaban.flow.execid:42", "azkaban.job.id:mnist_train", "azkaban.job.attempt:0"} <= set(tags)
    assert spec["conf"]["tony.application.name"] == "mnist-mnist"
    assert spec["conf"]["tony.execution.envs"] == "MNIST_EXECUTION=42"


def test_cancel_kills_the_application(harness, executor, tony_home):
    result, log = run_harness(harness, executor, "cancel", "type=TonyJob",
                              "task_params=--epochs 50 --steps-per-epoch 40 --step-sleep 0.2",
                              java_props=("-Dharness.cancelAfter=worker:1=RUNNING",))
    assert "Building TonyJob job executor." in log
    [app_id] = result["idsBeforeCancel"]
    assert result["applicationIds"] == [app_id]
    assert result["finished"] is True and result["success"] is False
    # ProcessJob's SIGTERM was enough: no SIGKILL after its 30 s, and the runner killed the application
    assert result["cancelSeconds"] < 30
    assert "Kill with signal TERM failed" not in log
    assert f"Received SIGTERM: killing application {app_id}" in log
    assert f"Final status of {app_id}: KILLED" in log
    status = json.loads(run_tony("status", app_id, "--json").stdout)
    assert status["state"] == "KILLED"
    assert all(task["state"] == "KILLED" for task in status["tasks"])
    assert not container_processes(tony_home, app_id)
