"""``tony notebook`` for real on the embedded cluster: JupyterLab in a container, reached through the
one URL the command prints (a server it runs itself, or ``tony history serve``), its kernels
seeing the job's environment, opened and run in headless Chromium; a stranger refused, page and
kernel websocket alike; ``tony kill`` and the idle timeout each end it with nothing left."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import REPO, app_processes, run_tony, sleeper_job, stopped, wait_for
from tests.tony_workflow.web.test_server import shoot
from tony_workflow.protocol import notebook_token
from tony_workflow.task.lab import idle_seconds

pytestmark = pytest.mark.job


def test_idle_means_no_connection_no_busy_kernel_and_no_activity_for_that_long():
    status = {"last_activity": "2026-12-07T10:00:00+00:00", "connections": 0}
    at = 1796637600.0  # 2026-12-07T10:00:00Z
    assert idle_seconds(status, [], at + 90) == pytest.approx(90)
    assert idle_seconds(status, [{"execution_state": "idle"}], at + 90) == pytest.approx(90)
    assert idle_seconds(status, [{"execution_state": "busy"}], at + 90) == 0  # a long cell is work
    assert idle_seconds({**status, "connections": 1}, [], at + 90) == 0  # an open tab is someone there


def test_the_labs_token_is_neither_the_jobs_nor_its_group_token():
    from tony_workflow.protocol import group_token
    secret = uuid.uuid4().hex
    assert notebook_token(secret) not in (secret, group_token(secret)) and notebook_token(secret) == notebook_token(secret)


def test_a_duration_that_is_none_is_refused_with_nothing_submitted(tony_home):
    r = run_tony("notebook", "--idle-timeout", "soon")
    assert r.returncode == 2 and "--idle-timeout" in r.stderr and "'soon'" in r.stderr and "Traceback" not in r.stderr
    assert not (tony_home / "local" / "apps").exists() or not any((tony_home / "local" / "apps").iterdir())


NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
                       "source": "import os\nprint('application:', os.environ['TONY_APPLICATION_ID'])"}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def tony(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """``tony`` with ``env`` (a cluster's) over this process's environment."""
    return run_tony(*args, env=env, **kw)


def start(tmp_path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str, str]:
    """Runs ``tony [--backend B] notebook ARGS`` (``args`` starts with the backend's flags, if any)
    over a source directory holding hello.ipynb; the command, the URL it printed, the application."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "hello.ipynb").write_text(json.dumps(NOTEBOOK))
    flags = list(args[:2]) if args[:1] == ("--backend",) else []
    proc = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", *flags, "notebook", "--memory", "1g",
                             "--src-dir", str(src), "--conf", "tony.am.memory=512m", *args[len(flags):]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})})
    url = proc.stdout.readline().strip()
    if not url:
        proc.wait(30)
        pytest.fail(f"tony notebook printed no URL (exit {proc.returncode}): {proc.stderr.read()[-3000:]}")
    (app_id,) = re.findall(r"/jobs/(application_\w+)/notebook/lab\?token=\S+$", url)
    return proc, url, app_id


def lab_token(app_id: str, backend: str = "local") -> str:
    from tony_workflow.client import TonyClient
    return notebook_token(TonyClient(backend).backend.endpoint(app_id).token)


def run_cell_over_the_kernels_websocket(base: str, app_id: str, headers: dict[str, str],
                                        code: str = "import os; print(os.environ['TONY_APPLICATION_ID'], "
                                                    "os.environ['TONY_TASK_ID'])") -> str:
    """Starts a kernel through the server and runs a cell over its websocket; what it printed."""
    import requests
    import websocket

    kernel = requests.post(f"{base}/jobs/{app_id}/notebook/api/kernels", json={"name": "python3"}, headers=headers,
                           timeout=60)
    assert kernel.status_code == 201, kernel.text[:500]
    ws = websocket.create_connection(f"ws{base[4:]}/jobs/{app_id}/notebook/api/kernels/{kernel.json()['id']}/channels",
                                     header=[f"{k}: {v}" for k, v in headers.items()], timeout=60)
    try:
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "t",
                                       "session": uuid.uuid4().hex, "version": "5.3", "date": ""},
                            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                            "content": {"code": code, "silent": False}}))
        deadline = time.time() + 120
        while time.time() < deadline:
            m = json.loads(ws.recv())
            if (m.get("parent_header", {}).get("msg_id") == msg_id and m["msg_type"] == "stream"
                    and m["content"].get("name") == "stdout"):
                return m["content"]["text"]
        raise AssertionError("the kernel printed nothing in 120 s")
    finally:
        ws.close()


def test_a_notebook_opens_through_its_url_runs_a_cell_refuses_a_stranger_and_ends_with_kill(tony_home, tmp_path,
                                                                                          browser, local_site):
    # No GPU on this machine: the embedded cluster's inventory is told it has two, and the kernel
    # sees the one pinned to its container, as a task's process does.
    local_site({"tony.local.gpus": "2"})
    # Its kernel imports TensorFlow (about 800 MB) to write a summary: 2 GB for the notebook.
    walk(tmp_path, browser, "local", options=("--gpus", "1", "--memory", "2g"), kernel_checks={
        "import os; print(len(os.environ['CUDA_VISIBLE_DEVICES'].split(',')))": "1",
        "import os; print(os.path.isabs(os.environ['TONY_CHECKPOINT_DIR']), os.path.isdir(os.environ['TONY_LOG_DIR']))":
            "True True",
        SUMMARY: "written"}, board_run="from-notebook")


#: a kernel's cell writing a TensorBoard summary where a task's would go
SUMMARY = ("import os, tensorflow as tf\n"
           "w = tf.summary.create_file_writer(os.path.join(os.environ['TONY_LOG_DIR'], 'from-notebook'))\n"
           "with w.as_default():\n"
           "    tf.summary.scalar('loss', 0.5, step=1)\n"
           "w.flush()\n"
           "print('written')")


def walk(tmp_path, browser, backend: str, env: dict | None = None, kernel_checks: dict[str, str] | None = None,
         options: tuple[str, ...] = (), board_run: str | None = None) -> None:
    """The notebook's life as its user and a stranger see it, on ``backend`` (its cluster's ``env``):
    started with the URL printed; the page, a kernel over its websocket, and JupyterLab in Chromium
    running the notebook's cell, all through that URL; a stranger refused by a history server of
    the same cluster; tony kill ends it, the command with it, and nothing of the job is left."""
    import requests
    import websocket
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    on = ["--backend", backend]
    proc, url, app_id = start(tmp_path, *on, "--idle-timeout", "0", *options, env=env)
    try:
        base = url.split("/jobs/")[0]
        owner = {"Cookie": f"tony_history_token={url.split('token=')[1]}"}
        page = requests.get(url, timeout=60)  # signs in (a cookie), then JupyterLab's page, through the server
        assert page.status_code == 200 and "jupyter-config-data" in page.text and "Error" not in page.text, page.text[:500]
        assert lab_token(app_id, backend) not in page.text and lab_token(app_id, backend) not in page.url
        assert run_cell_over_the_kernels_websocket(base, app_id, owner).split() == [app_id, "notebook:0"]
        for code, said in (kernel_checks or {}).items():  # what else its kernels must see
            assert run_cell_over_the_kernels_websocket(base, app_id, owner, code).strip() == said, code
        # In Chromium: JupyterLab opens the notebook, and its cell runs in the container's kernel.
        browser.get(url)
        browser.get(f"{base}/jobs/{app_id}/notebook/lab/tree/hello.ipynb")
        wait_for(lambda: "Idle" in browser.find_element(By.TAG_NAME, "body").text, timeout=120, interval=1)

        def run_the_cell() -> bool:  # JupyterLab renders the cell again as it settles: asked afresh each time
            try:
                browser.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content").click()
                ActionChains(browser).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
                return True
            except StaleElementReferenceException:
                return False
        wait_for(run_the_cell, timeout=60, interval=1)
        out = wait_for(lambda: [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                                if app_id in e.text], timeout=120, interval=1)
        assert out == [f"application: {app_id}"]
        shoot(browser, tmp_path, "notebook-lab.png")
        # Nobody is asked whether the cluster's container may fetch Jupyter's news.
        assert "Jupyter news" not in browser.find_element(By.TAG_NAME, "body").text
        # A stranger, signed in to a history server of the same cluster, gets neither the lab nor a kernel.
        tokens = tmp_path / "tokens"
        tokens.write_text("bob bob-token-0123456789abcdef\n")
        tokens.chmod(0o600)
        serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", *on, "history", "serve", "--port",
                                  "0", "--tokens", str(tokens)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})})
        try:
            served = serve.stdout.readline().strip().split("/?")[0]
            bob = {"Authorization": "Bearer bob-token-0123456789abcdef"}
            refused = requests.get(f"{served}/jobs/{app_id}/notebook/lab", headers=bob, timeout=60)
            assert refused.status_code == 403 and "bob may not see" in refused.text
            with pytest.raises(websocket.WebSocketBadStatusException) as e:
                websocket.create_connection(f"ws{served[4:]}/jobs/{app_id}/notebook/api/kernels/x/channels",
                                            header=["Authorization: Bearer bob-token-0123456789abcdef"], timeout=30)
            assert e.value.status_code == 403
            with pytest.raises(websocket.WebSocketBadStatusException) as e:
                websocket.create_connection(f"ws{served[4:]}/jobs/{app_id}/notebook/api/kernels/x/channels", timeout=30)
            assert e.value.status_code == 403  # nobody signed in
        finally:
            assert stopped(serve) == 0
        # It is a job like the others: listed, with its status, and (its task being the chief) a TensorBoard
        # over its log directory, where its kernels' summaries go.
        running = json.loads(tony(*on, "status", app_id, "--json", env=env).stdout)
        assert running["state"] == "RUNNING" and running["notebook_url"] and running["tensorboard_url"], running
        if board_run:  # a summary a kernel wrote (see kernel_checks) shows in the notebook's TensorBoard
            wait_for(lambda: board_run in requests.get(f"{running['tensorboard_url'].rstrip('/')}/data/runs",
                                                       timeout=30).json(), timeout=120, interval=2)
        assert app_id in tony(*on, "list", env=env).stdout
        # tony kill ends it: the command that served it ends, and nothing of the job is left.
        assert tony(*on, "kill", app_id, env=env).returncode == 0
        assert proc.wait(120) == 0
        said = proc.stderr.read()
        assert "has ended" in said and "Warning" not in said and "Traceback" not in said, said[-3000:]
    finally:
        if proc.poll() is None:
            tony(*on, "kill", app_id, env=env)
            stopped(proc)
    wait_for(lambda: not app_processes(app_id), timeout=120, describe=lambda: app_processes(app_id))
    st = json.loads(tony(*on, "status", app_id, "--json", env=env).stdout)
    assert st["state"] == "KILLED"


def test_a_notebook_and_a_job_beside_it_share_the_cluster_and_each_ends_alone(tony_home, tmp_path):
    spec = tmp_path / "beside.json"
    spec.write_text(json.dumps(sleeper_job("beside")))
    submitted = run_tony("submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr[-2000:]
    job = submitted.stdout.strip().splitlines()[-1]
    proc, url, app_id = start(tmp_path, "--idle-timeout", "0")
    try:
        owner = {"Cookie": f"tony_history_token={url.split('token=')[1]}"}
        import requests
        assert requests.get(url, timeout=60).status_code == 200
        assert run_cell_over_the_kernels_websocket(url.split("/jobs/")[0], app_id, owner).split() == [app_id,
                                                                                                     "notebook:0"]
        assert json.loads(run_tony("status", job, "--json").stdout)["state"] == "RUNNING"
        # The notebook ends; the job beside it runs on, untouched, and nothing of the notebook is left.
        assert run_tony("kill", app_id).returncode == 0
        assert proc.wait(60) == 0
        wait_for(lambda: not app_processes(app_id), timeout=120, describe=lambda: app_processes(app_id))
        st = json.loads(run_tony("status", job, "--json").stdout)
        assert st["state"] == "RUNNING" and [t["state"] for t in st["tasks"]] == ["RUNNING"], st
        assert app_processes(job)
    finally:
        if proc.poll() is None:
            run_tony("kill", app_id)
            stopped(proc)
        run_tony("kill", job)
    wait_for(lambda: not app_processes(job), timeout=120, describe=lambda: app_processes(job))


def ended_by_itself(proc, app_id: str, timeout: float, then=None) -> None:
    """The notebook's job ends SUCCEEDED without being killed (``then()`` first, if given: what
    ends it), the command serving it ends with it, and no process of it is left."""
    try:
        if then is not None:
            then()
        assert proc.wait(timeout) == 0  # the job ended by itself: the command serving it ends too
    finally:
        if proc.poll() is None:
            run_tony("kill", app_id)
            stopped(proc)
    st = json.loads(run_tony("status", app_id, "--json").stdout)
    assert st["state"] == "SUCCEEDED", st
    wait_for(lambda: not app_processes(app_id), timeout=120, describe=lambda: app_processes(app_id))


def test_an_idle_notebook_shuts_itself_down_and_frees_its_container(tony_home, tmp_path):
    proc, _, app_id = start(tmp_path, "--idle-timeout", "5s")
    ended_by_itself(proc, app_id, 180)
    said = run_tony("logs", app_id).stdout
    assert "idle for" in said and "notebook-idle-timeout-ms" in said, said[-2000:]


def test_shutting_the_notebook_down_from_jupyterlab_ends_the_job_and_frees_its_container(tony_home, tmp_path):
    import requests
    proc, url, app_id = start(tmp_path, "--idle-timeout", "0")

    def shut_down():
        owner = {"Cookie": f"tony_history_token={url.split('token=')[1]}"}
        assert requests.get(url, timeout=60).status_code == 200
        # File > Shut Down: JupyterLab's own request, through the printed URL's server.
        done = requests.post(f"{url.split('/jobs/')[0]}/jobs/{app_id}/notebook/api/shutdown", headers=owner, timeout=60)
        assert done.status_code in (200, 202, 204), (done.status_code, done.text[:500])
    ended_by_itself(proc, app_id, 120, then=shut_down)


def test_the_lab_finds_jupyterlabs_pages_in_the_shipped_environment_when_its_prefix_has_none(tmp_path, monkeypatch):
    from tony_workflow.protocol import SHIPPED_DATA_DIR
    from tony_workflow.task import lab
    site = tmp_path / "site"
    (site / SHIPPED_DATA_DIR / "share" / "jupyter" / "lab" / "static").mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "bare-python"))  # a node's Python: nothing under share/
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), str(site)])
    monkeypatch.setenv("JUPYTER_PATH", "/etc/jupyter-site")
    args, env = lab.shipped_jupyter()
    data = site / SHIPPED_DATA_DIR / "share" / "jupyter"
    assert args == [f"--LabApp.app_dir={data / 'lab'}"] and env == {"JUPYTER_PATH": f"{data}{os.pathsep}/etc/jupyter-site"}
    monkeypatch.setattr(sys, "prefix", str(site / SHIPPED_DATA_DIR))  # a prefix that has them: nothing to add
    assert lab.shipped_jupyter() == ([], {})


def test_the_lab_never_asks_for_jupyters_news_and_keeps_the_installations_own_settings(tmp_path, monkeypatch):
    import json

    from tony_workflow.task import lab
    installed = tmp_path / "lab"
    (installed / "settings").mkdir(parents=True)
    (installed / "settings" / "page_config.json").write_text('{"disabledExtensions": {"x": true}}')
    (installed / "settings" / "overrides.json").write_text(
        '{"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"}}')
    into = tmp_path / "run" / "app-settings"
    assert lab.app_settings([f"--LabApp.app_dir={installed}"], into) == [f"--LabApp.app_settings_dir={into}"]
    assert json.loads((into / "overrides.json").read_text()) == {
        "@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}
    assert (into / "page_config.json").read_text() == '{"disabledExtensions": {"x": true}}'
    # A site that chose to fetch the news keeps its choice; an installation with no settings gets ours.
    (installed / "settings" / "overrides.json").write_text(
        '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "true"}}')
    lab.app_settings([f"--LabApp.app_dir={installed}"], tmp_path / "again")
    assert json.loads((tmp_path / "again" / "overrides.json").read_text())[
        "@jupyterlab/apputils-extension:notification"] == {"fetchNews": "true"}
    monkeypatch.setattr(lab.sys, "prefix", str(tmp_path / "bare"))
    lab.app_settings([], tmp_path / "bare-settings")
    assert json.loads((tmp_path / "bare-settings" / "overrides.json").read_text()) == {
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}
