"""The history server (:mod:`tony_workflow.web.server`): in process over a history written as the
AM writes it (who gets in, what each user sees, the filters and pages, bad input named), and for
real: ``tony history serve`` over a job that ran on the embedded cluster, its page and its
TensorBoard opened through the server in headless Chromium, nothing left running once it stops."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import REPO, TENSORBOARD_EVENTS, run_tony, stopped, wait_for
from tests.tony_workflow.web.test_index import airflow, record
from tony_workflow.history import JobHistory
from tony_workflow.storage import LocalStorage

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
OWNER = "owner-token-0123456789"
ARTIFACTS = REPO / "docs" / "images"


@pytest.fixture
def server(tony_home, tmp_path):
    """An in-process server for owner ``svc`` (alice and bob from a tokens file) over a history of
    alice's jobs (one that bob may see), bob's, and one that anyone may see."""
    from starlette.testclient import TestClient

    from tony_workflow.client import TonyClient
    from tony_workflow.web.access import TokenBook
    from tony_workflow.web.server import create_server

    history = JobHistory(LocalStorage(tony_home / "history"), retention_s=0)
    for n in range(1, 26):
        history.write(record(n, user="alice", context=airflow("nightly" if n % 2 else "hourly"),
                             state="FAILED" if n == 25 else "SUCCEEDED"))
    history.write(record(26, user="alice", acls="bob"))
    history.write(record(27, user="bob"))
    history.write(record(28, user="carol", acls="*"))
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    tokens.chmod(0o600)
    app = create_server(TonyClient("local"), TokenBook("svc", tokens, owner_token=OWNER), index_ttl=0)
    with TestClient(app) as c:
        yield c
    app.state.pages.keeper.stop()


def listed(page: str) -> list[str]:
    table = page.split('id="ended"', 1)[1] if 'id="ended"' in page else ""
    return re.findall(r">(application_1_\d{4})</a>", table)


def test_nobody_gets_a_page_without_a_token(server):
    page = server.get("/", headers={"accept": "text/html"})
    assert page.status_code == 401 and "Sign in with the token" in page.text and "application_1_" not in page.text
    api = server.get("/jobs/application_1_0001", headers={"accept": "application/json"})
    assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Bearer")
    wrong = server.get("/", headers={"authorization": "Bearer " + "x" * 20})
    assert wrong.status_code == 401
    assert server.get("/jobs/application_1_0001/tensorboard/", headers={"accept": "*/*"}).status_code == 401


def test_a_link_with_the_token_signs_in_and_drops_it_from_the_address(server):
    first = server.get(f"/?dag=nightly&token={OWNER}", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/?dag=nightly"
    assert "tony_history_token" in first.headers["set-cookie"] and "HttpOnly" in first.headers["set-cookie"]
    after = server.get("/?dag=nightly")  # the cookie now
    assert after.status_code == 200 and "signed in as svc (administrator)" in after.text


def test_the_login_form_signs_in_and_refuses_a_wrong_token(server):
    bad = server.post("/login", data={"token": "nope" * 5, "next": "/"})
    assert bad.status_code == 401 and "nobody's here" in bad.text
    good = server.post("/login", data={"token": ALICE, "next": "//elsewhere.example.com/"}, follow_redirects=False)
    assert good.status_code == 303 and good.headers["location"] == "/"  # never sent off the server
    assert "signed in as alice" in server.get("/").text
    server.get("/logout")
    assert server.get("/", headers={"accept": "text/html"}).status_code == 401


def test_each_user_sees_their_own_jobs_those_shared_with_them_and_the_admin_sees_all(server):
    as_bob = {"authorization": f"Bearer {BOB}"}
    bobs = server.get("/?limit=100", headers=as_bob).text
    assert sorted(listed(bobs)) == ["application_1_0026", "application_1_0027", "application_1_0028"]
    assert server.get("/jobs/application_1_0026", headers=as_bob).status_code == 200  # view-acls names bob
    refused = server.get("/jobs/application_1_0001", headers=as_bob)
    assert refused.status_code == 403 and "tony.application.view-acls" in refused.text and "alice's" in refused.text
    assert server.get("/jobs/application_1_0001/events", headers=as_bob).status_code == 403
    assert server.get("/jobs/application_1_0001/tensorboard/", headers=as_bob).status_code == 403
    alices = listed(server.get("/?limit=100", headers={"authorization": f"Bearer {ALICE}"}).text)
    assert len(alices) == 27 and "application_1_0027" not in alices
    everything = listed(server.get("/?limit=100", headers={"authorization": f"Bearer {OWNER}"}).text)
    assert len(everything) == 28


def test_filters_and_pages(server):
    h = {"authorization": f"Bearer {OWNER}"}
    first = server.get("/?limit=10", headers=h).text
    assert listed(first) == [f"application_1_{n:04d}" for n in range(28, 18, -1)] and "1 to 10 of 28" in first
    older = re.search(r'id="older" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = server.get(older, headers=h).text
    assert listed(second)[0] == "application_1_0018" and 'id="newer"' in second and "11 to 20 of 28" in second
    nightly = listed(server.get("/?dag=nightly&limit=100", headers=h).text)
    assert len(nightly) == 13 and all(int(a[-4:]) % 2 for a in nightly)
    assert listed(server.get("/?state=failed", headers=h).text) == ["application_1_0025"]
    assert listed(server.get("/?user=bob", headers=h).text) == ["application_1_0027"]
    day = time.strftime("%Y-%m-%d", time.localtime(record(1)["started_at"]))
    assert "application_1_0001" in listed(server.get(f"/?since={day}&until={day}&limit=100", headers=h).text)
    nothing = server.get("/?dag=none-such", headers=h).text
    assert "No ended job that the filters admit" in nothing
    for query, message in [("state=DONE", "state must be one of SUCCEEDED, FAILED, KILLED, got 'DONE'"),
                           ("since=yesterday", "since must be a day as YYYY-MM-DD, got 'yesterday'"),
                           ("limit=0", "limit must be from 1 to 500, got 0")]:
        bad = server.get(f"/?{query}", headers=h)
        assert bad.status_code == 400 and message in bad.json()["detail"], (query, bad.text)


def test_a_job_page_its_advice_and_its_event_log(server):
    h = {"authorization": f"Bearer {ALICE}"}
    page = server.get("/jobs/application_1_0003", headers=h)
    assert page.status_code == 200 and "job-3" in page.text and "Airflow DAG nightly" in page.text
    assert "Next run (" in page.text and "tony.worker.memory=" in page.text  # 2 GiB asked, nothing used
    assert 'id="events"' in page.text
    events = server.get("/jobs/application_1_0003/events", headers=h)
    assert events.status_code == 200 and events.text == "# application_1_0003 kept no event log\n"
    assert server.get("/jobs/application_1_9999", headers=h).status_code == 404
    assert server.get("/jobs/not-an-app", headers=h).status_code == 404
    gone = server.get("/jobs/application_1_0003/tensorboard/", headers=h)
    assert gone.status_code == 404 and "kept no TensorBoard event files" in gone.text


def shoot(browser, tmp_path, name: str) -> None:
    """A screenshot: kept with the test's files, and in docs/images with TONY_UPDATE_SCREENSHOTS=1."""
    assert browser.save_screenshot(str(tmp_path / name))
    if os.environ.get("TONY_UPDATE_SCREENSHOTS"):
        browser.save_screenshot(str(ARTIFACTS / name))


def boards() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if "--logdir" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def child_of(p: psutil.Process, pid: int) -> bool:
    try:
        return p.ppid() == pid
    except psutil.Error:
        return False


@pytest.mark.job
def test_tony_history_serve_shows_a_finished_job_and_its_tensorboard(tony_home, tmp_path, browser):
    from selenium.webdriver.common.by import By

    from tests.tony_workflow.jobs.test_runtime import submit

    (tmp_path / "writer.py").write_text(TENSORBOARD_EVENTS)
    h = submit(tmp_path, f"python {tmp_path}/writer.py $JOB_NAME$TASK_INDEX", {"worker": {"instances": 2, "memory": "1g"}},
               conf={"tony.task.tensorboard.enabled": "false"})
    assert h.wait(poll_interval=0.2, timeout=120).state == "SUCCEEDED"
    before = {p.pid for p in boards()}
    serve = subprocess.Popen([sys.executable, "-m", "tony_workflow.client.cli", "history", "serve", "--port", "0",
                              "--board-idle", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        link = serve.stdout.readline().strip()
        assert re.fullmatch(r"http://localhost:\d+/\?token=\S{24,}", link), serve.stderr.read() if serve.poll() else link
        base = link.split("/?")[0]
        owner = {"Authorization": "Bearer " + link.split("token=")[1]}
        import requests
        # With the server configured, the ended job's link is its page there; its logs are served too.
        st = json.loads(run_tony("status", h.app_id, "--json", env={"TONY_HISTORY_SERVER": base + "/"}).stdout)
        assert st["tracking_url"] == f"{base}/jobs/{h.app_id}"
        assert h.app_id in requests.get(st["tracking_url"], headers=owner, timeout=30).text
        logs = requests.get(f"{base}/jobs/{h.app_id}/logs", headers=owner, timeout=60)
        assert logs.status_code == 200 and "==> worker:1/stdout <==" in logs.text, logs.text[:500]
        assert run_tony("clean", h.app_id).returncode == 0  # the job's own directory is gone: the history serves
        gone = requests.get(f"{base}/jobs/{h.app_id}/logs", headers=owner, timeout=60)
        assert gone.status_code == 404 and h.app_id in gone.text
        browser.get(link)  # signs in, and the address loses the token
        assert browser.current_url == base + "/" and "TonY job history" in browser.title
        shoot(browser, tmp_path, "history-server-jobs.png")
        browser.find_element(By.LINK_TEXT, h.app_id).click()
        assert "SUCCEEDED" in browser.find_element(By.TAG_NAME, "body").text
        browser.find_element(By.ID, "tensorboard").click()
        assert browser.current_url.startswith(f"{base}/jobs/{h.app_id}/tensorboard/")  # (#timeseries after)
        # TensorBoard's own page, through the server: its runs, and the loss chart's points.
        wait_for(lambda: "worker0" in browser.find_element(By.TAG_NAME, "body").text, timeout=120, interval=1)
        cookie = {"Cookie": f"tony_history_token={browser.get_cookie('tony_history_token')['value']}"}
        runs = requests.get(f"{base}/jobs/{h.app_id}/tensorboard/data/runs", headers=cookie, timeout=30).json()
        assert sorted(runs) == ["worker0", "worker1"]
        points = requests.get(f"{base}/jobs/{h.app_id}/tensorboard/data/plugin/scalars/scalars",
                              params={"tag": "loss", "run": "worker1"}, headers=cookie, timeout=30).json()
        assert [p[1] for p in points] == [1, 2, 3, 4, 5]
        shoot(browser, tmp_path, "history-server-tensorboard.png")
        # One, shared, started by the server (other tests' jobs start TensorBoards of their own beside it).
        [board] = [p for p in boards() if p.pid not in before and child_of(p, serve.pid)]
        # Without a token, the board is out of reach as the pages are.
        assert requests.get(f"{base}/jobs/{h.app_id}/tensorboard/data/runs", timeout=30).status_code == 401
    finally:
        assert stopped(serve) == 0
    wait_for(lambda: not board.is_running() or board.status() == psutil.STATUS_ZOMBIE, timeout=30)
    assert not list(tmp_path.glob("tony-board-*"))  # its copy of the event files went with it
    assert json.loads(run_tony("history", h.app_id, "--json").stdout)["tensorboard_logs"]["files"] == 2


def test_with_the_cluster_away_the_list_still_shows_the_history_and_says_so(tony_home):
    from starlette.testclient import TestClient

    from tony_workflow.client import TonyClient
    from tony_workflow.errors import ClusterError
    from tony_workflow.web.access import TokenBook
    from tony_workflow.web.server import create_server

    class Away(TonyClient):  # a cluster whose ResourceManager does not answer (the history is a directory)
        def list(self, context=None, tags=()):
            raise ClusterError("the ResourceManager at rm:8032 did not answer")

    JobHistory(LocalStorage(tony_home / "history"), retention_s=0).write(record(1))
    app = create_server(Away("local"), TokenBook("svc", None, owner_token=OWNER), index_ttl=0)
    with TestClient(app) as c:
        page = c.get("/", headers={"authorization": f"Bearer {OWNER}"})
    app.state.pages.keeper.stop()
    assert page.status_code == 200 and "cannot be read now: the ResourceManager at rm:8032 did not answer" in page.text
    assert listed(page.text) == ["application_1_0001"]


@pytest.mark.job
def test_ctrl_c_stops_the_server_as_done(tony_home):
    # A server is stopped by Ctrl-C as much as by SIGTERM: it ends 0 either way, as tony tensorboard does.
    import signal
    # A test worker ignores SIGINT, and so would its children: the command is given Python's own handler.
    tony = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.argv = ['tony', 'history', 'serve', '--port', '0']; "
            "runpy.run_module('tony_workflow.client.cli', run_name='__main__')")
    serve = subprocess.Popen([sys.executable, "-c", tony], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO)
    try:
        assert serve.stdout.readline().startswith("http://localhost:")
        serve.send_signal(signal.SIGINT)
        assert serve.wait(30) == 0
        assert "Traceback" not in serve.stderr.read()
    finally:
        serve.kill()


def test_a_job_pages_configuration_shows_what_the_job_set_not_tonys_placeholders(tony_home, tmp_path):
    from starlette.testclient import TestClient

    from tony_workflow.client import TonyClient
    from tony_workflow.web.access import TokenBook
    from tony_workflow.web.server import create_server

    history = JobHistory(LocalStorage(tony_home / "history"), retention_s=0)
    r = record(1, user="svc")
    # As a job's record keeps it: what it set, over TonY's defaults, placeholders among them.
    r["conf"] = {"tony.worker.memory": "4g", "tony.worker.instances": "2", "tony.history.location": "/path/to/tony-history",
                 "tony.keytab.user": "user1", "tony.am.memory": "2g"}
    history.write(r)
    (tmp_path / "tokens").write_text("")
    (tmp_path / "tokens").chmod(0o600)
    app = create_server(TonyClient("local"), TokenBook("svc", tmp_path / "tokens", owner_token=OWNER), index_ttl=0)
    with TestClient(app) as c:
        page = c.get("/jobs/application_1_0001", headers={"authorization": f"Bearer {OWNER}"}).text
    app.state.pages.keeper.stop()
    table = page.split('id="configuration"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<td>(tony\.[^<]+)</td>", table) == ["tony.worker.instances", "tony.worker.memory"], table
    assert "/path/to/tony-history" not in page and "user1" not in page
    assert "3 keys at their default left out" in page
