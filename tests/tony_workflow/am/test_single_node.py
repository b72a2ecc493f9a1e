"""TonY's single-node job (:mod:`tony_workflow.am.single_node`): the command run in the
ApplicationMaster's own container by a real ApplicationMaster on the embedded cluster's manager,
with TonY's environment, and stopped with its processes by a kill or the job's timeout."""
from __future__ import annotations

import json
import threading
import time

import psutil

from tests.conftest import wait_for
from tony_workflow.am.master import ApplicationMaster
from tony_workflow.am.single_node import run_single_node
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.backends.local.localize import stage
from tony_workflow.spec import load_job
from tony_workflow.status import JobState


def make_am(tmp_path, command: str, conf: dict | None = None) -> ApplicationMaster:
    spec = load_job({"name": "single", "tasks": {}, "conf": {"tony.am.command": command, **(conf or {})},
                     "shell_env": {"FROM_SHELL_ENV": "yes"}})
    spec.validate()
    assert spec.single_node
    app_dir = tmp_path / "app"
    (app_dir / "src").mkdir(parents=True)
    (app_dir / "src" / "train.py").write_text("print('trained')\n")
    stage(spec.conf, app_dir)
    cluster = LocalClusterManager("application_1_0002", app_dir, Inventory(8192, 8, []))
    return ApplicationMaster(spec, "application_1_0002", app_dir, cluster, token="am-secret", view_token="v")


def test_the_command_runs_beside_the_source_and_resources_with_tonys_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("TONY_AM_TOKEN", "am-secret")  # the AM's own, never the command's
    (tmp_path / "vocab.txt").write_text("words")
    command = ("python -c \"import json, os; json.dump({k: os.environ.get(k) for k in ('PREPROCESSING_JOB', "
               "'TB_PORT', 'HOME', 'FROM_SHELL_ENV', 'TONY_AM_TOKEN', 'TONY_APPLICATION_ID')} | "
               "{'cwd': os.getcwd(), 'files': sorted(os.listdir('.'))}, open('seen.json', 'w'))\"")
    am = make_am(tmp_path, command, {"tony.containers.resources": str(tmp_path / "vocab.txt")})
    assert run_single_node(am) == (JobState.SUCCEEDED, "Single node job exited with 0")
    seen = json.loads((tmp_path / "app" / "single-node" / "seen.json").read_text())
    assert seen["PREPROCESSING_JOB"] == "true" and int(seen["TB_PORT"]) > 0 and seen["FROM_SHELL_ENV"] == "yes"
    assert seen["HOME"] == seen["cwd"] == str(tmp_path / "app" / "single-node")
    assert seen["TONY_AM_TOKEN"] is None and seen["TONY_APPLICATION_ID"] == "application_1_0002"
    assert {"train.py", "vocab.txt"} <= set(seen["files"])
    assert am.status.tasks == []


def test_a_failing_command_fails_the_job_saying_where_its_output_is(tmp_path):
    am = make_am(tmp_path, "echo oops >&2; exit 3")
    state, diagnostics = run_single_node(am)
    assert state == JobState.FAILED
    assert diagnostics == ("Single node job exited with 3: its output is in the ApplicationMaster's log "
                           "(tony logs application_1_0002 --task am)")


def test_a_kill_stops_the_command_and_what_it_started(tmp_path):
    am = make_am(tmp_path, "sleep 300 & echo $! > child.pid; wait")
    child_file = tmp_path / "app" / "single-node" / "child.pid"

    def kill_when_running():
        wait_for(lambda: child_file.exists() and child_file.read_text().strip(), timeout=30)
        with am.lock:
            am.request_kill("killed by user")

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    assert run_single_node(am) == (JobState.KILLED, "killed by user")
    killer.join()
    child = int(child_file.read_text())
    wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
             timeout=10)


def test_the_jobs_timeout_stops_the_command(tmp_path):
    am = make_am(tmp_path, "sleep 300", {"tony.application.timeout": "500"})
    am.status.started_at = time.time()
    state, diagnostics = run_single_node(am)
    assert state == JobState.FAILED and diagnostics == ("Application timed out after 500 ms "
                                                        "(tony.application.timeout)")


def test_a_preprocessing_job_hands_the_tasks_what_it_printed_and_fails_the_job_when_it_fails(tmp_path):
    from tony_workflow.am.single_node import preprocess
    am = make_am(tmp_path, "echo warming up; echo 'Model parameters: --lr 0.1 --layers 3'; test \"$PREPROCESSING_JOB\"")
    assert preprocess(am) == (None, "--lr 0.1 --layers 3")
    failing = make_am(tmp_path / "2", "exit 4")
    assert preprocess(failing) == ((JobState.FAILED, ("Preprocessing job exited with 4: its output is in the "
                                    "ApplicationMaster's log (tony logs application_1_0002 --task am)")), None)
