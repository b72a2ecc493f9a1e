"""The TonY pages in Airflow: a real api-server serving the provider's plugin, seen in headless Chromium.

A DAG runs a TonyOperator job that reports progress (no TensorFlow needed); a second job is left
running. The api-server, started with the same TONY_HOME, must refuse the pages without Airflow's
authentication, list both jobs, show each one's page with its tasks, timeline, progress and charts,
and open the finished one from the task instance's "TonY job" view.
"""
from __future__ import annotations

import json
import os
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from tests.airflow_provider.conftest import REPO, ApiServer, _free_port, load_dag, write_dag, xcoms

pytestmark = pytest.mark.job

ARTIFACTS = Path(os.environ.get("TONY_TEST_ARTIFACTS", REPO / "test-artifacts"))
PASSWORD = "tony-plugin-test"
TRAIN = ("python -c \"from tony_workflow import report; import time\n"
         "for s in range(1, 31): report(step=s, total=30, loss=3.0/s); time.sleep(0.2)\"")


@pytest.fixture(scope="module")
def jobs(airflow_db, tmp_path_factory):
    """A finished job run by a DAG, a job still running, and an api-server that sees both."""
    home = tmp_path_factory.mktemp("tony-home")
    old = {k: os.environ.get(k) for k in ("TONY_HOME", "TONY_CONF_DIR")}
    os.environ["TONY_HOME"] = str(home)
    # A machine of 2 GB, so that a third job waits for the one still running.
    from tony_workflow.hadoop import site_xml
    (home / "conf").mkdir()
    (home / "conf" / "tony-site.xml").write_text(site_xml({"tony.local.memory": "2g"}))
    os.environ["TONY_CONF_DIR"] = str(home / "conf")
    try:
        job = {"name": "plugin-demo", "command": TRAIN, "am": {"memory": "128m"},
               "tasks": {"worker": {"instances": 2, "memory": "512m"}},
               "conf": {"tony.task.metrics-interval-ms": "300", "tony.task.tensorboard.enabled": "false"}}
        write_dag("tony_plugin", {"job_spec": job, "poll_interval": 0.5, "tensorboard_wait": 0})
        dr = load_dag("tony_plugin").test()
        assert dr.state == "success"
        finished = xcoms("tony_plugin", dr.run_id, "train")["application_id"]

        from tony_workflow.client import TonyClient, load_job
        running = TonyClient("local").submit(load_job(
            {"name": "still-running", "command": "python -c \"from tony_workflow import report; import time\n"
                                                 "report(step=3, total=100); time.sleep(600)\"",
             "am": {"memory": "128m"}, "tasks": {"worker": {"instances": 1, "memory": "256m"}},
             "conf": {"tony.task.tensorboard.enabled": "false"}}))
        waiting = TonyClient("local").submit(load_job(
            {"name": "waiting", "command": "true", "am": {"memory": "128m"},
             "tasks": {"worker": {"instances": 1, "memory": "1800m"}},
             "conf": {"tony.task.tensorboard.enabled": "false"}}))
        port = _free_port()
        # Real logins for this server: with every user an admin (the other tests' setting) Airflow
        # authenticates every request, so nothing could be refused.
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({"admin": PASSWORD}))
        server = ApiServer(port, {"TONY_HOME": str(home), "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
                                  "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                                  "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                                  "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)},
                           log_name="api-server-plugin.log")
        try:
            yield {"base": server.base, "run_id": dr.run_id, "finished": finished, "running": running,
                   "waiting": waiting}
        finally:
            waiting.kill()
            running.kill()
            server.stop()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _token(base: str) -> str:
    r = requests.post(f"{base}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=30)
    assert r.status_code in (200, 201), r.text
    return r.json()["access_token"]


def test_the_pages_require_airflows_authentication(jobs):
    base = jobs["base"]
    for path in ("/tony/", f"/tony/jobs/{jobs['finished']}",
                 f"/tony/ti/tony_plugin/{urllib.parse.quote(jobs['run_id'])}/train/-1"):
        r = requests.get(base + path, timeout=30, allow_redirects=False)
        assert r.status_code == 401, (path, r.status_code)
        bad = requests.get(base + path, timeout=30, headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code in (401, 403), (path, bad.status_code)
    ok = requests.get(base + "/tony/", timeout=60, headers={"Authorization": f"Bearer {_token(base)}"})
    assert ok.status_code == 200 and jobs["finished"] in ok.text and jobs["running"].app_id in ok.text


def test_job_pages_show_tasks_timeline_progress_and_charts(jobs):
    headers = {"Authorization": f"Bearer {_token(jobs['base'])}"}
    page = requests.get(f"{jobs['base']}/tony/jobs/{jobs['finished']}", headers=headers, timeout=60)
    assert page.status_code == 200
    text = page.text
    assert "SUCCEEDED" in text and "worker:0" in text and "worker:1" in text
    assert "step=30/30" in text and "session 0 started" in text
    assert text.count("<polyline") >= 3, "step, memory and CPU charts"
    assert "tony.task.metrics-interval-ms" in text, "the configuration"
    live = requests.get(f"{jobs['base']}/tony/jobs/{jobs['running'].app_id}", headers=headers, timeout=60)
    assert live.status_code == 200 and "RUNNING" in live.text and "step=3/100" in live.text
    assert 'http-equiv="refresh"' in live.text, "a running job's page refreshes itself"
    waits = requests.get(f"{jobs['base']}/tony/jobs/{jobs['waiting'].app_id}", headers=headers, timeout=60)
    assert waits.status_code == 200 and "ALLOCATING" in waits.text, waits.text[:2000]
    assert "Waiting for its containers</b> (1 of 2 granted" in waits.text
    assert "blocked by memory: the gang needs 1928 MB at once" in waits.text and jobs["running"].app_id in waits.text
    listed = requests.get(f"{jobs['base']}/tony/", headers=headers, timeout=60)
    assert "waiting 1/2 containers: worker: 0 of 1 containers" in listed.text
    missing = requests.get(f"{jobs['base']}/tony/jobs/application_1_0404", headers=headers, timeout=60)
    assert missing.status_code == 404
    bad = requests.get(f"{jobs['base']}/tony/jobs/..%2Fetc", headers=headers, timeout=60)
    assert bad.status_code == 404


def test_the_plugin_in_chromium_jobs_list_job_page_and_task_instance_view(jobs, browser):
    from selenium.webdriver.common.by import By

    base = jobs["base"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Logged in as the UI is after its login form: Airflow's JWT in its session cookie.
    browser.get(base + "/api/v2/version")
    browser.add_cookie({"name": "_token", "value": _token(base), "path": "/"})
    browser.get(base + "/tony/")
    deadline = time.time() + 60
    while jobs["finished"] not in browser.page_source and time.time() < deadline:
        time.sleep(0.5)
        browser.get(base + "/tony/")
    assert jobs["finished"] in browser.page_source and jobs["running"].app_id in browser.page_source
    browser.save_screenshot(str(ARTIFACTS / "airflow-tony-jobs.png"))

    browser.find_element(By.LINK_TEXT, jobs["finished"]).click()
    assert browser.find_element(By.ID, "progress").text.startswith("Progress: step=30/30")
    rows = browser.find_elements(By.CSS_SELECTOR, "#tasks tr")
    assert len(rows) == 3, "a header and two tasks"
    assert browser.find_elements(By.CSS_SELECTOR, "svg polyline")
    browser.save_screenshot(str(ARTIFACTS / "airflow-tony-job.png"))

    # The task instance's page in Airflow's own UI has the plugin's "TonY job" view.
    run = urllib.parse.quote(jobs["run_id"])
    browser.get(f"{base}/dags/tony_plugin/runs/{run}/tasks/train")
    # The page re-renders as its data arrives: a click may land on a tab replaced a moment later, so
    # the tab is clicked again until the view's frame shows.
    found, frame = False, None
    deadline = time.time() + 150
    while frame is None and time.time() < deadline:
        for tab in browser.find_elements(By.XPATH, "//*[normalize-space(text())='TonY job']"):
            try:
                tab.click()
                found = True
                break
            except Exception:  # noqa: BLE001, S112 - a tab replaced under the click: tried again on the next pass
                continue
        for _ in range(10):
            frames = browser.find_elements(By.CSS_SELECTOR, "iframe")
            frame = frames[0] if frames else None
            if frame is not None or not found:
                break
            time.sleep(0.5)
        if frame is None:
            time.sleep(1)
    assert found, "no 'TonY job' view on the task instance page"
    assert frame is not None, "the view is shown in a frame"
    assert "/tony/ti/tony_plugin/" in frame.get_attribute("src")
    browser.switch_to.frame(frame)
    deadline = time.time() + 60
    while jobs["finished"] not in browser.page_source and time.time() < deadline:
        time.sleep(0.5)
    assert jobs["finished"] in browser.page_source and "worker:1" in browser.page_source
    browser.switch_to.default_content()
    browser.save_screenshot(str(ARTIFACTS / "airflow-tony-task-instance-view.png"))
