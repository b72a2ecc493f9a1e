"""The ``tony`` command line, run as a real subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import app_processes, run_tony
from tony_workflow.hadoop import site_xml

pytestmark = pytest.mark.job

BAD_SPECS = Path(__file__).parents[1] / "bad_specs"


def write_job(tmp_path, **overrides):
    doc = {"name": "cli", "command": "echo hello-from-$JOB_NAME-$TASK_INDEX", "am": {"memory": "128m"},
           "tasks": {"worker": {"instances": 2, "memory": "128m"}},
           "conf": {"tony.task.tensorboard.enabled": "false"}, **overrides}
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_submit_wait_json_then_status_logs_list(tony_home, tmp_path):
    r = run_tony("submit", str(write_job(tmp_path)), "--wait", "--json", "--poll-interval", "0.2")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["state"] == "SUCCEEDED" and len(st["tasks"]) == 2
    app = st["application_id"]
    # progress lines on stderr, and the id as its own token for log scanners
    assert f"Submitted application {app}" in r.stderr and "worker:0=" in r.stderr

    s = run_tony("status", app, "--json")
    assert s.returncode == 0 and json.loads(s.stdout)["state"] == "SUCCEEDED"
    assert "SUCCEEDED" in run_tony("status", app).stdout

    logs = run_tony("logs", app, "--task", "worker:1")
    assert logs.returncode == 0 and "hello-from-worker-1" in logs.stdout and "hello-from-worker-0" not in logs.stdout
    assert "hello-from-worker-0" in run_tony("logs", app).stdout
    unknown = run_tony("logs", app, "--task", "worker:7")
    assert unknown.returncode == 2 and "no task 'worker:7'" in unknown.stderr and "am, worker:0, worker:1" in unknown.stderr
    am = run_tony("logs", app, "--task", "am").stdout  # the AM's own log: its events, a line each
    assert "tony-am INFO session_finished session=0 state=SUCCEEDED" in am, am

    listed = run_tony("list", "--json")
    assert app in [a["application_id"] for a in json.loads(listed.stdout)]
    # list and history: one table, with a header, newest first.
    table = run_tony("list").stdout.splitlines()
    assert table[0].split()[:4] == ["APPLICATION", "STATE", "STARTED", "TOOK"] and table[1].startswith(f"{app} ")
    assert "SUCCEEDED" in table[1] and " cli" in table[1]
    history = run_tony("history").stdout.splitlines()
    assert history[0] == table[0] and history[1].startswith(f"{app} ")
    # Killing a job that has ended says so, and changes nothing.
    k = run_tony("kill", app)
    assert k.returncode == 0 and "had already ended (SUCCEEDED): nothing to kill" in k.stderr
    # A reader that goes away early (`tony history | head`) gets no traceback.
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "history"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141 and "Error" not in proc.stderr.read()


def test_conf_overrides_and_failure_exit_code(tony_home, tmp_path):
    r = run_tony("submit", str(write_job(tmp_path)), "--conf", "tony.worker.instances=1",
                 "--conf", "tony.worker.command=exit 9", "--wait", "--json", "--poll-interval", "0.2")
    assert r.returncode == 1
    st = json.loads(r.stdout)
    assert st["state"] == "FAILED" and len(st["tasks"]) == 1 and "exit code 9" in st["diagnostics"]


def test_submit_without_wait_prints_the_id_and_kill_works(tony_home, tmp_path):
    r = run_tony("submit", str(write_job(tmp_path, command="sleep 60")))
    assert r.returncode == 0
    app = r.stdout.strip()
    assert app.startswith("application_")
    assert f"follow it with 'tony status {app} --wait'" in r.stderr  # the next step
    k = run_tony("kill", app)
    assert k.returncode == 0 and "KILLED" in k.stdout
    assert json.loads(run_tony("status", app, "--json").stdout)["state"] == "KILLED"
    assert app_processes(app) == []


def test_bad_specs_give_clear_errors_and_submit_nothing(tony_home, tmp_path):
    files = sorted(BAD_SPECS.iterdir())
    assert len(files) >= 25
    for f in files[:25]:
        expect = f.read_text().splitlines()[0].split("expect:", 1)[1].strip().rstrip("->").strip()
        r = run_tony("submit", str(f), "--wait")
        assert r.returncode == 2, f.name
        assert expect in r.stderr, (f.name, r.stderr)
        assert "Traceback" not in r.stderr and "nothing was submitted" in r.stderr
    assert not list((tony_home / "local" / "apps").glob("application_*"))


def test_unknown_application_and_bad_conf_pair(tony_home, tmp_path):
    r = run_tony("status", "application_1_0001")
    assert r.returncode == 3 and "unknown application" in r.stderr and "Traceback" not in r.stderr
    assert "add --backend yarn, or set TONY_BACKEND=yarn" in r.stderr  # a YARN id asked of the embedded cluster
    r = run_tony("status", "application_1_0001", env={"TONY_BACKEND": "yran"})
    assert r.returncode == 2 and "TONY_BACKEND='yran' names no backend" in r.stderr and "Traceback" not in r.stderr
    # A machine whose tony-site.xml says every command means YARN: here one with no Hadoop configuration.
    site = tmp_path / "site"
    site.mkdir()
    (site / "tony-site.xml").write_text(site_xml({"tony.client.backend": "yarn"}))
    r = run_tony("list", env={"TONY_CONF_DIR": str(site), "HADOOP_CONF_DIR": str(tmp_path / "nowhere")})
    assert r.returncode == 2 and f"the Hadoop conf directory '{tmp_path / 'nowhere'}' does not exist" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run_tony("submit", str(write_job(tmp_path)), "--conf", "novalue")
    assert r.returncode == 2 and "novalue" in r.stderr and "Traceback" not in r.stderr
    r = run_tony("submit", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "missing.yaml" in r.stderr and "Traceback" not in r.stderr


def test_cannot_fit_via_cli(tony_home, tmp_path, local_site):
    job = write_job(tmp_path, tasks={"worker": {"instances": 1, "gpus": 4}})
    # A job cannot give the machine GPUs it does not have...
    r = run_tony("submit", str(job), "--conf", "tony.local.gpus=4", "--wait")
    assert r.returncode == 2 and "tony.local.gpus" in r.stderr and "tony-site.xml" in r.stderr
    assert "Traceback" not in r.stderr
    # ... the site configuration says what it has.
    local_site({"tony.local.gpus": "2"})
    r = run_tony("submit", str(job), "--wait")
    assert r.returncode == 2 and "tony.worker.gpus" in r.stderr and "Traceback" not in r.stderr
    assert not list((tony_home / "local" / "apps").glob("application_*"))


def test_ctrl_c_while_following_leaves_the_job_running_and_says_how_to_stop_it(tony_home, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO, wait_for

    proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "submit", str(write_job(tmp_path, command="sleep 60")),
                             "--wait", "--poll-interval", "0.2"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ),
                            # As from a terminal: a runner that started the suite in the background
                            # hands SIGINT down ignored, and Python then installs no handler for it.
                            # Only a preexec_fn resets SIGINT in the child: no other argument of Popen does.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509 - as above
    try:
        app = wait_for(lambda: next((a["application_id"] for a in json.loads(run_tony("list", "--json").stdout)
                                     if a["state"] == "RUNNING"), None), timeout=60)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert "Traceback" not in err
        assert f"stopped following {app}; the job keeps running" in err and f"tony kill {app}" in err
        assert f"Follow it again with 'tony status {app} --wait'" in err
        assert json.loads(run_tony("status", app, "--json").stdout)["state"] == "RUNNING"
        # Which it does: the same progress lines, then the end as `submit --wait` says it.
        follower = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "status", app, "--wait",
                                     "--poll-interval", "0.2"], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        wait_for(lambda: json.loads(run_tony("status", app, "--json").stdout)["state"] == "RUNNING", timeout=10)
        run_tony("kill", app)
        out, err = follower.communicate(timeout=60)
        assert follower.returncode == 1 and out.strip().startswith(f"{app} KILLED"), (out, err)
        assert "worker:0=" in err
    finally:
        if proc.poll() is None:
            proc.kill()
        for a in json.loads(run_tony("list", "--json").stdout):
            run_tony("kill", a["application_id"])
    assert json.loads(run_tony("status", app, "--json").stdout)["state"] == "KILLED"
    assert app_processes(app) == []


def test_every_verb_refuses_what_is_not_an_application_id(tony_home):
    import pytest

    from tony_workflow.client import TonyClient

    outside = tony_home.parent / "outside"
    outside.mkdir()
    (outside / "status.json").write_text('{"application_id": "x", "state": "SUCCEEDED"}')
    for bad in ("../outside", "application_1_0001/../../outside", "application_x_1", "", "a" * 500):
        for verb in (["status"], ["status", "--json"], ["kill"], ["logs"]):
            r = run_tony(*verb, bad)
            assert r.returncode == 2, (verb, bad, r.stderr)
            assert "not an application id" in r.stderr and "Traceback" not in r.stderr
            assert len(r.stderr) < 400  # a long id is cut short in the message
        with pytest.raises(ValueError, match="not an application id"):
            TonyClient("local").attach(bad)
    assert (outside / "status.json").read_text().startswith('{"application_id": "x"')


def test_a_task_not_yet_placed_shows_no_address():
    from tony_workflow.client.cli import _task_row
    from tony_workflow.status import JobStatus, TaskStatus

    waiting = TaskStatus(type="worker", index=0, state="REQUESTED")
    placed = TaskStatus(type="worker", index=1, state="RUNNING", host="node1", port=4711, log_url="http://node1/logs")
    st = JobStatus(application_id="application_1_0001", state="RUNNING", tasks=[waiting, placed])
    assert _task_row(st, waiting).split() == ["worker:0", st.shown_state(waiting), "-"]
    assert _task_row(st, placed).split() == ["worker:1", "RUNNING", "node1:4711", "http://node1/logs"]


@pytest.mark.parametrize("argv,expected", [
    (["history", "serve", "--port", "0"], ["--port", "0"]),
    (["--backend", "yarn", "history", "serve"], ["--backend", "yarn"]),
    (["--backend=yarn", "history", "serve", "--tokens", "t"], ["--backend=yarn", "--tokens", "t"]),
    (["history", "application_1_0001"], None),
    (["history"], None),
    (["--backend", "yarn"], None),
])
def test_history_serve_is_told_from_tony_history_app(argv, expected):
    from tony_workflow.client.cli import _history_serve
    assert _history_serve(argv) == expected


def test_data_inspect_says_what_an_input_holds_and_refuses_a_bad_one(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    for i, n in enumerate([300, 120]):
        pq.write_table(pa.table({"id": np.arange(n), "label": np.arange(n) % 3}), tmp_path / f"p{i}.parquet",
                       row_group_size=100)
    r = run_tony("data", "inspect", str(tmp_path), "--filter", "label == 0", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["format"] == "parquet" and summary["rows"] == 100 + 40 and len(summary["files"]) == 2
    assert [c["name"] for c in summary["schema"]] == ["id", "label"] and summary["unit"] == "row groups"
    text = run_tony("data", "inspect", str(tmp_path)).stdout
    assert "parquet, 2 files, 420 rows" in text and "p1.parquet" in text
    (tmp_path / "p2.parquet").write_bytes(b"PAR1 not a real file")
    bad = run_tony("data", "inspect", str(tmp_path))
    assert bad.returncode == 2 and "p2.parquet: not a readable Parquet file" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("module,argv,extra", [("fastapi", ["history", "serve", "--help"], "history"),
                                               ("pyarrow", ["data", "inspect", "x.parquet"], "data")])
def test_a_command_whose_extra_is_not_installed_names_it_in_one_line(module, argv, extra, tmp_path):
    # The module made absent in the command's own interpreter, as in an install without the extra.
    code = (f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = ['tony', *{argv!r}]; "
            "runpy.run_module('tony_workflow.client.cli', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "TONY_HOME": str(tmp_path)}, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"tony: this needs {module}, which is not installed: pip install "
                                f"'tony-workflow[{extra}]' (the {extra} extra)"), r.stderr


def test_validate_and_dry_run_say_every_problem_at_once_and_submit_nothing(tony_home, tmp_path):
    """A misspelled field, a value that does not parse and a missing script: three problems, said
    together by `tony validate` and `tony submit --dry-run`, exit 2; fixed, the job is described,
    exit 0. Neither submits anything."""
    (tmp_path / "train.py").write_text("print('hello')\n")
    spec = tmp_path / "three.yaml"
    spec.write_text("name: three\nframework: tensorflow\nexecutes: trian.py\nsrc_dir: .\n"
                    "tasks:\n  worker: {instances: 2, memroy: 2g, vcores: x}\n")
    problems = ["tasks.worker.memroy: unknown task field (did you mean 'memory'?)",
                "tasks.worker.vcores (tony.worker.vcores): must be an integer >= 1 (got 'x')",
                "executes: is not a file in src_dir", "(did you mean train.py?)"]
    for command in (["validate", str(spec)], ["submit", str(spec), "--dry-run"]):
        r = run_tony(*command)
        assert r.returncode == 2, r
        assert all(p in r.stderr for p in problems), r.stderr
        assert r.stderr.count("\n") == 4 and "Traceback" not in r.stderr  # the heading and one line each
    xml = tmp_path / "three.xml"
    xml.write_text("<configuration>" + "".join(
        f"<property><name>{k}</name><value>{v}</value></property>" for k, v in
        [("tony.worker.instances", "2"), ("tony.worker.memroy", "2g"), ("tony.worker.vcores", "x"),
         ("tony.application.framework", "tensorfow")]) + "</configuration>")
    r = run_tony("validate", str(xml), "--executes", "train.py", "--src-dir", str(tmp_path))
    assert r.returncode == 2
    assert all(p in r.stderr for p in ["tony.worker.memroy: unknown key (did you mean tony.worker.memory?)",
                                       "tony.worker.vcores: must be an integer >= 1 (got 'x')",
                                       "(got 'tensorfow'); did you mean 'tensorflow'?"]), r.stderr

    spec.write_text(spec.read_text().replace("memroy: 2g, vcores: x", "memory: 2g").replace("trian", "train"))
    r = run_tony("validate", str(spec))
    assert r.returncode == 0, r.stderr
    assert "valid; nothing was submitted" in r.stdout
    assert "worker: 2 instances of 2048 MB, 1 vcore, 0 GPUs; runs python train.py" in r.stdout
    as_json = run_tony("submit", str(spec), "--dry-run", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["conf"]["tony.worker.instances"] == "2"
    huge = run_tony("validate", str(spec), "--conf", "tony.worker.memory=900g")  # a gang no machine here holds
    assert huge.returncode == 2 and "the job cannot run on this cluster" in huge.stderr, huge.stderr
    assert "tony.worker.memory" in huge.stderr
    apps = tony_home / "local" / "apps"
    assert not apps.exists() or not any(apps.iterdir()), "nothing was submitted"


def test_a_memory_below_the_clusters_minimum_is_raised_to_it_and_said(tony_home, tmp_path):
    """2 MB cannot hold a Python: the embedded cluster gives the minimum allocation, 128 MB, as YARN
    would, says so naming the key, and the job runs with what it is given."""
    p = write_job(tmp_path, command="python -c 'print(42)'", tasks={"worker": {"instances": 1, "memory": "2m"}})
    r = run_tony("submit", str(p), "--wait", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert ("warning: tasks.worker.memory (tony.worker.memory): 2 MB is below the cluster's minimum allocation, "
            "128 MB (tony.local.minimum-allocation-mb): the container is given 128 MB") in r.stderr
    app = json.loads(r.stdout)["application_id"]
    kept = json.loads((tony_home / "local" / "apps" / app / "spec.json").read_text())
    assert kept["conf"]["tony.worker.memory"] == "128m" and kept["conf"]["tony.am.memory"] == "128m"
