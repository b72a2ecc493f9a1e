"""What YARN itself says of a TonY job, on the Hadoop mini cluster: its application type (TonY's
``TONY``, or ``tony.application.type``), listing by type through the REST API and Hadoop's own
``yarn application`` command, the tracking URL while it runs (the job's page, through the
ResourceManager's proxy) and after its end (the job's page on the history server, where the
client is configured with one), and a failed job's diagnostics. skein's driver and master are
the ones built with TonY's changes (:mod:`tony_workflow.backends.yarn.skein_jar`). The jobs are
small shell commands; the real training's progress on the ResourceManager's bar is
tests/tony_workflow/jobs/test_yarn_backend.py's."""
from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from tests.conftest import REPO, app_processes, sleeper_job, wait_for
from tony_workflow.backends.yarn.skein_jar import driver_jar, stock_jar
from tony_workflow.client import TonyClient, load_job

pytestmark = [pytest.mark.yarn]



@pytest.fixture(scope="module")
def cluster(yarn_cluster):
    return yarn_cluster


def rm_app(cluster, app_id: str) -> dict:
    return requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps/{app_id}", timeout=30).json()["app"]


def listed(cluster, app_type: str) -> set[str]:
    """The applications of ``app_type``: (REST, Hadoop's ``yarn application -list``)."""
    apps = requests.get(f"{cluster['rm_web']}/ws/v1/cluster/apps", params={"applicationTypes": app_type},
                        timeout=30).json()["apps"] or {}
    return {a["id"] for a in apps.get("app", [])}


def yarn_cli(*args: str) -> str:
    done = subprocess.run(["yarn", "application", *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def cli_status(app_id: str) -> dict[str, str]:
    """``yarn application -status``'s fields."""
    out = {}
    for line in yarn_cli("-status", app_id).splitlines():
        key, sep, value = line.strip().partition(" : ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def proxy(cluster, app_id: str) -> requests.Response:
    return requests.get(f"{cluster['rm_web']}/proxy/{app_id}/", timeout=30, allow_redirects=False)


def test_yarn_knows_a_tony_job_by_its_type_and_its_tracking_url_leads_to_its_page_then_to_the_history_server(
        cluster, tmp_path, monkeypatch):
    assert driver_jar()[1] is None, driver_jar()[1]  # the jar with TonY's changes was built here
    serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "--backend", "yarn", "history", "serve",
                              "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        link = serve.stdout.readline().strip()
        assert link.startswith("http://"), serve.stderr.read() if serve.poll() is not None else link
        history, owner = link.split("/?")[0], {"Authorization": "Bearer " + link.split("token=")[1]}
        monkeypatch.setenv("TONY_HISTORY_SERVER", history)
        run_one(cluster, tmp_path, history, owner)
    finally:
        serve.terminate()
        serve.wait(timeout=60)


def run_one(cluster, tmp_path, history: str, owner: dict[str, str]) -> None:
    release = tmp_path / "fail-now"
    spec = sleeper_job("citizen", until=release, seconds=300)
    spec["tasks"]["worker"]["command"] = spec["tasks"]["worker"]["command"].replace("exit 0", "exit 3")
    h = TonyClient("yarn").submit(load_job(spec))
    try:
        wait_for(lambda: rm_app(cluster, h.app_id)["state"] == "RUNNING", timeout=180)
        import skein
        assert skein.core._SKEIN_JAR == stock_jar()  # skein's own use elsewhere in the process keeps its jar
        app = rm_app(cluster, h.app_id)
        assert app["applicationType"] == "TONY"
        assert "yarn.application-type" not in app["applicationTags"] and "tony" in app["applicationTags"].split(",")
        assert h.app_id in listed(cluster, "TONY") and h.app_id not in listed(cluster, "skein")
        assert h.app_id in yarn_cli("-list", "-appTypes", "TONY")
        # Running: the tracking URL (the ResourceManager's proxy) serves the job's own page, its
        # TensorBoard linked from there when it has one; `yarn application -status` names it.
        page = wait_for(lambda: (r := proxy(cluster, h.app_id)).status_code == 200 and "State: <b>RUNNING" in r.text
                        and r, timeout=60, interval=0.5)
        assert f"citizen {h.app_id}" in page.text and "worker:0" in page.text
        running = cli_status(h.app_id)
        assert running["Application-Type"] == "TONY" and running["Tracking-URL"].startswith("http://")
        release.touch()
        st = h.wait(poll_interval=1, timeout=180)
        assert st.state == "FAILED"
        # Ended: the same link now leads to the job's page on the history server, where the
        # client's own link points too; the failure's cause stays in YARN's diagnostics.
        ended = wait_for(lambda: (a := rm_app(cluster, h.app_id))["state"] == "FINISHED" and a, timeout=60)
        assert ended["finalStatus"] == "FAILED" and ended["trackingUI"] == "History"
        assert "worker:0" in ended["diagnostics"] and "exit code 3" in ended["diagnostics"], ended["diagnostics"]
        final = f"{history}/jobs/{h.app_id}"
        assert cli_status(h.app_id)["Tracking-URL"] == final
        moved = proxy(cluster, h.app_id)
        assert moved.status_code == 302 and moved.headers["Location"] == final
        assert h.status().tracking_url == final
        # ... where the history server shows it (what a click in the ResourceManager's UI opens).
        page = wait_for(lambda: (r := requests.get(final, headers=owner, timeout=30)).status_code == 200 and r,
                        timeout=60, interval=1)
        assert h.app_id in page.text and "FAILED" in page.text
    finally:
        if not h.status().is_final:
            h.kill()
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_a_job_of_its_own_type_is_listed_by_it_alone_and_skeins_driver_still_reports_on_it_and_kills_it(
        cluster, monkeypatch):
    monkeypatch.delenv("TONY_HISTORY_SERVER", raising=False)
    h = TonyClient("yarn").submit(load_job(sleeper_job("research", conf={"tony.application.type": "RESEARCH"})))
    wait_for(lambda: rm_app(cluster, h.app_id)["state"] == "RUNNING", timeout=180)
    assert rm_app(cluster, h.app_id)["applicationType"] == "RESEARCH"
    assert h.app_id in listed(cluster, "RESEARCH") and h.app_id not in listed(cluster, "TONY")
    # skein's driver (skein's own refuses an application of another type than its own) reports on
    # it and kills it.
    driver = h.backend.client
    assert str(driver.application_report(h.app_id).state) == "RUNNING"
    driver.kill_application(h.app_id)
    st = h.wait(poll_interval=1, timeout=120)
    assert st.state == "KILLED"
    status = wait_for(lambda: (s := cli_status(h.app_id))["State"] in ("FINISHED", "KILLED") and s, timeout=60)
    # Killed through YARN, its master never unregistered: YARN's own page of the application.
    assert status["Final-State"] == "KILLED" and status["Tracking-URL"].endswith(f"/cluster/app/{h.app_id}")
    moved = proxy(cluster, h.app_id)
    assert moved.status_code == 302 and moved.headers["Location"].endswith(f"/cluster/app/{h.app_id}")
    wait_for(lambda: not app_processes(h.app_id), timeout=120)
