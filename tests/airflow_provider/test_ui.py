"""The links as Airflow itself serves them: a real api-server, and the Task Instance page in Chromium."""
from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from tests.airflow_provider.conftest import REPO, load_dag, write_dag, xcoms

pytestmark = pytest.mark.tf

ARTIFACTS = Path(os.environ.get("TONY_TEST_ARTIFACTS", REPO / "test-artifacts"))
LINK_NAMES = {"TensorBoard": "tensorboard_url", "TonY Application": "tracking_url", "TonY Task Logs": "logs_url"}


@pytest.fixture(scope="module")
def finished_run(airflow_db, tmp_path_factory):
    home = tmp_path_factory.mktemp("tony-home")
    old = os.environ.get("TONY_HOME")
    os.environ["TONY_HOME"] = str(home)
    try:
        # Long enough for the chief's TensorBoard to come up on a busy machine before the job ends.
        job = {"name": "ui", "command": "sleep 25", "am": {"memory": "128m"},
               "tasks": {"worker": {"instances": 1, "memory": "256m"}}}
        write_dag("tony_ui", {"job_spec": job, "poll_interval": 0.5, "tensorboard_wait": 60})
        dr = load_dag("tony_ui").test()
        assert dr.state == "success"
        yield dr.run_id, xcoms("tony_ui", dr.run_id, "train")
    finally:
        if old is None:
            os.environ.pop("TONY_HOME", None)
        else:
            os.environ["TONY_HOME"] = old


def test_links_come_back_from_the_api_server(finished_run, api_server):
    run_id, x = finished_run
    r = requests.get(f"{api_server}/api/v2/dags/tony_ui/dagRuns/{urllib.parse.quote(run_id)}"
                     f"/taskInstances/train/links", timeout=30)
    assert r.status_code == 200
    links = r.json()["extra_links"]
    assert set(links) == set(LINK_NAMES)
    for name, key in LINK_NAMES.items():
        assert links[name] == x[key] and links[name].startswith("http://127.0.0.1:")


def test_task_instance_page_shows_the_tensorboard_link(finished_run, api_server, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    run_id, x = finished_run
    browser.get(f"{api_server}/dags/tony_ui/runs/{urllib.parse.quote(run_id)}/tasks/train")
    href = None
    deadline = time.time() + 90
    # The page is a React app that re-renders as data arrives: an element found a moment ago can
    # be gone (stale) by the time it is read, so every read is retried on the next pass.
    while href is None and time.time() < deadline:
        for tab in browser.find_elements(By.XPATH, "//*[normalize-space(text())='Details']"):
            try:
                tab.click()
            except Exception:  # noqa: BLE001, S112 - the page re-renders as data arrives: tried again on the next pass
                continue
        for a in browser.find_elements(By.XPATH, "//a[normalize-space(.)='TensorBoard']"):
            try:
                href = a.get_attribute("href")
            except StaleElementReferenceException:
                continue
            if href:
                break
        if href is None:
            time.sleep(1)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "airflow-task-instance-links.png"))
    assert href is not None, "no TensorBoard link on the Task Instance page"
    assert href.rstrip("/") == x["tensorboard_url"].rstrip("/")
