"""YARN, the AM's side (:mod:`tony_workflow.backends.yarn.am`).

Its decisions first, against a stand-in for skein's application client and the ResourceManager's
report (no cluster): the containers asked for before the AM ran are adopted and given their launch
orders, a request the ResourceManager does not hold is asked for again, and the wait says what
the ResourceManager holds. Then, on the shared mini cluster, a plain skein application stands in
for a job's (no AM, no executor), and the cluster manager adds, watches and kills its containers,
publishes the AM's endpoint, reports progress and ends the application. Whole TonY jobs on YARN
are tests/tony_workflow/jobs/test_yarn_*.py; the lost request is reproduced on the mini cluster in
test_yarn_gangs.py."""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.conftest import wait_for
from tony_workflow import hadoop
from tony_workflow.backends.base import ContainerRequest
from tony_workflow.backends.yarn.am import YarnClusterManager
from tony_workflow.backends.yarn.containers import ASKED_ENV, KV_ADDRESS, KV_GATE, KV_TOKEN, service_name
from tony_workflow.backends.yarn.driver import shared_driver
from tony_workflow.backends.yarn.gang import Verdict
from tony_workflow.backends.yarn.rm import AppReport, container_rm


@dataclass
class FakeContainer:
    id: str
    service_name: str
    state: str = "REQUESTED"
    exit_message: str = ""
    yarn_node_http_address: str = ""
    yarn_container_id: str = ""
    env: dict = field(default_factory=dict)


class FakeApp:
    """skein's ApplicationClient as the cluster manager uses it: containers per service, numbered
    in the order they are asked for, and the key-value store."""

    def __init__(self, asked: dict[str, int] | None = None):
        self.containers: dict[str, FakeContainer] = {}
        self.kv: dict[str, bytes] = {}
        self.killed: list[str] = []
        self.added: list[str] = []
        self.add_container("tony-am").state = "RUNNING"
        for service, n in (asked or {}).items():
            for _ in range(n):
                self.add_container(service)
        self.added.clear()

    def add_container(self, service, env=None):
        n = sum(1 for c in self.containers.values() if c.service_name == service)
        c = self.containers[f"{service}_{n}"] = FakeContainer(f"{service}_{n}", service, env=dict(env or {}))
        self.added.append(c.id)
        return c

    def kill_container(self, cid):
        self.containers[cid].state = "KILLED"
        self.killed.append(cid)

    def get_containers(self, states=None, services=None):
        return [c for c in self.containers.values() if states is None or c.state in states]


class Events:
    def __init__(self):
        self.seen: list[tuple[str, dict]] = []

    def emit(self, event, **fields):
        self.seen.append((event, fields))


def requests(workers: int) -> list[ContainerRequest]:
    return [ContainerRequest("am", 2048, 1, 0), *(ContainerRequest(f"worker:{i}", 256, 1, 0) for i in range(workers))]


def report(running: int, asks: int) -> AppReport:
    return AppReport(id="application_1_0001", name="j", user="u", queue="root.default", state="RUNNING",
                     final_status="UNDEFINED", diagnostics="", started_at=1.0, finished_at=None,
                     am_rpc_address="h:1", priority=0, running_containers=running, asks=asks)


def manager(monkeypatch, app: FakeApp) -> YarnClusterManager:
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv(ASKED_ENV, raising=False)
    cluster = YarnClusterManager(app_client=app)
    cluster.bind(Events(), lambda: None, lambda wait: None)
    return cluster


def test_containers_asked_for_as_the_application_started_are_adopted_and_given_their_launch_orders(monkeypatch):
    app = FakeApp({"tony-worker": 2})
    cluster = manager(monkeypatch, app)
    monkeypatch.setenv(ASKED_ENV, "worker*2")
    containers = cluster.allocate(requests(2), threading.Event())
    assert [c.task_id for c in containers] == ["am", "worker:0", "worker:1"]
    for c in containers[1:]:
        cluster.launch(c, ["ignored"], {"TONY_TASK_ID": c.task_id, "SESSION_ID": 0})
    assert app.added == []  # nothing asked for again
    order = json.loads(app.kv["tony.launch.tony-worker_1"])
    assert order["TONY_TASK_ID"] == "worker:1" and order["SESSION_ID"] == "0" and order["TONY_SPEC_FILE"] == "spec.json"
    assert ("adopted", {"tasks": ["worker:0", "worker:1"]}) in cluster._events.seen
    # Later sessions ask for their containers themselves.
    [_, again] = cluster.allocate(requests(1), threading.Event())
    cluster.launch(again, ["ignored"], {"TONY_TASK_ID": "worker:0"})
    assert app.added == ["tony-worker_2"] and app.containers["tony-worker_2"].env["TONY_TASK_ID"] == "worker:0"


def test_the_gates_word_names_what_it_asked_for_and_the_rest_is_asked_by_the_am(monkeypatch):
    app = FakeApp({"tony-worker": 1})
    app.kv[KV_GATE] = json.dumps({"since": 1.0, "admitted": 2.0, "asked": "worker*1"}).encode()
    cluster = manager(monkeypatch, app)
    containers = cluster.allocate(requests(2), threading.Event())
    for c in containers[1:]:
        cluster.launch(c, ["ignored"], {"TONY_TASK_ID": c.task_id})
    assert "tony.launch.tony-worker_0" in app.kv and app.added == ["tony-worker_1"]


def test_an_am_attempt_after_the_first_adopts_nothing(monkeypatch):
    app = FakeApp({"tony-worker": 1})
    cluster = manager(monkeypatch, app)
    monkeypatch.setenv(ASKED_ENV, "worker*1")
    cluster.recover()
    assert app.killed == ["tony-worker_0"]
    [_, c] = cluster.allocate(requests(1), threading.Event())
    cluster.launch(c, ["ignored"], {"TONY_TASK_ID": "worker:0"})
    assert app.added == ["tony-worker_1"]


def launched(monkeypatch, workers: int):
    app = FakeApp()
    cluster = manager(monkeypatch, app)
    containers = cluster.allocate(requests(workers), threading.Event())[1:]
    for c in containers:
        cluster.launch(c, ["ignored"], {"TONY_TASK_ID": c.task_id})
    return app, cluster, containers


def asked_ago(cluster, seconds: float) -> None:
    for cid in cluster._asked:
        cluster._asked[cid] = time.monotonic() - seconds


def test_a_request_the_resource_manager_does_not_hold_is_asked_for_again(monkeypatch):
    app, cluster, pending = launched(monkeypatch, 2)
    # skein's master and the AM run; two requests asked, the ResourceManager holds one: they
    # were sent together, so the other is lost as soon as the ResourceManager should show it.
    rm = report(running=2, asks=1)
    assert cluster._lost(pending, rm) == []  # just asked: skein may not have sent them yet
    asked_ago(cluster, 4)
    [lost] = cluster._lost(pending, rm)
    assert lost.task_id == "worker:0" and app.killed == ["tony-worker_0"]  # the earliest asked
    assert app.added[-1] == "tony-worker_2" and app.containers["tony-worker_2"].env["TONY_TASK_ID"] == "worker:0"
    assert cluster._events.seen[-1] == ("requests_lost", {"tasks": ["worker:0"], "asks_held": 1, "requested": 2})
    assert cluster._lost(pending, rm) == []  # just asked again: it waits for the ResourceManager again


def test_requests_none_of_which_arrived_wait_for_skeins_next_heartbeat_before_they_count_as_lost(monkeypatch):
    app, cluster, pending = launched(monkeypatch, 2)
    rm = report(running=2, asks=0)  # nothing of the job's seen: perhaps not sent yet
    asked_ago(cluster, 4)
    assert cluster._lost(pending, rm) == [] and app.killed == []
    asked_ago(cluster, cluster.idle_heartbeat_s + 3)
    assert [c.task_id for c in cluster._lost(pending, rm)] == ["worker:0", "worker:1"]


def test_a_request_sent_with_one_that_was_granted_is_lost_at_once(monkeypatch):
    app, cluster, pending = launched(monkeypatch, 2)
    app.containers["tony-worker_1"].state = "RUNNING"  # granted, and skein has heard of it
    asked_ago(cluster, 4)
    [lost] = cluster._lost(pending[:1], report(running=3, asks=0))
    assert lost.task_id == "worker:0"


def test_a_container_granted_but_not_yet_seen_by_skein_is_not_lost(monkeypatch):
    app, cluster, pending = launched(monkeypatch, 2)
    asked_ago(cluster, 60)
    # One request held, one granted by the ResourceManager (3 running: master, AM, it) that skein
    # still calls REQUESTED.
    for _ in range(3):
        assert cluster._lost(pending, report(running=3, asks=1)) == []
    assert app.killed == []


def test_the_wait_says_how_many_requests_the_resource_manager_holds(monkeypatch):
    _, cluster, pending = launched(monkeypatch, 2)

    class Line:
        """The line's verdict, and the ResourceManager's report of the application."""
        look_every_s = 0.0
        unreadable = None

        def __init__(self, v, me):
            self.v, self.rm = v, self
            self.app = lambda app_id: me

        def look(self, asked, counts, may_lead=True):
            assert not may_lead  # a forming job never looks for the others
            return self.v

    cluster.line = Line(Verdict(True), report(running=2, asks=2))
    assert cluster.forming(pending, []).reason == ("worker: 0 of 2 containers granted; the ResourceManager holds "
                                                   "2 requests of the job's, and the room is free: YARN is placing them")
    cluster.line = Line(Verdict(True), report(running=2, asks=0))
    assert "holds no request of the job's yet" in cluster.forming(pending, []).reason
    cluster.line = Line(Verdict(False, "worker: 0 of 2 containers; blocked by room on the nodes"),
                        report(running=2, asks=2))
    assert cluster.forming(pending, []).reason.endswith("; the ResourceManager holds 2 requests of the job's")
    # The queue is read every couple of seconds; the counts shown beside the tasks' states are now's.
    cluster.line = Line(Verdict(True), report(running=2, asks=2))
    cluster.line.look_every_s = 3600.0
    cluster._looked = (float('-inf'), None)  # read at the first look, then not again
    assert cluster.forming(pending, []).reason.startswith("worker: 0 of 2 containers granted;")
    assert cluster.forming(pending[1:], pending[:1]).reason.startswith("worker: 1 of 2 containers granted;")


@pytest.fixture
def app(yarn_cluster):
    """A running skein application with a worker service of no instances, as a job's would be."""
    import skein

    conf_dir = os.environ["HADOOP_CONF_DIR"]
    client = shared_driver(hadoop.read_conf(conf_dir), conf_dir)
    worker = skein.Service(resources=skein.Resources(memory=256, vcores=1),
                           script='echo "task $TONY_TASK_ID"; exec sleep 300', instances=0, max_restarts=0,
                           allow_failures=True)
    spec = skein.ApplicationSpec(name="yarn-am-unit", queue="default", tags={"tony-unit"},
                                 services={service_name("worker"): worker},
                                 master=skein.Master(resources=skein.Resources(memory=256, vcores=1),
                                                     script="exec sleep 600"))
    app_id = client.submit(spec)
    app = client.connect(app_id, wait=True)
    yield app_id, app
    with contextlib.suppress(Exception):  # already ended by the test
        client.kill_application(app_id)


@pytest.mark.yarn
def test_task_containers_are_added_watched_and_killed(app):
    _, client = app
    cluster = YarnClusterManager(app_client=client)
    [c] = cluster.allocate([ContainerRequest("worker:0", 256, 1, 0)], threading.Event())
    assert c.task_id == "worker:0" and not cluster.granted(c)
    cluster.launch(c, ["ignored"], {"TONY_TASK_ID": "worker:0"})
    wait_for(lambda: cluster.granted(c) and cluster.log_url(c), timeout=120, interval=1)
    assert cluster.poll(c) is None and "/node/containerlogs/" in cluster.log_url(c)
    cluster.kill(c)
    assert wait_for(lambda: cluster.poll(c), timeout=60, interval=1) == 137
    assert cluster.reclaimed(c) is None  # killed by its AM, not taken back by YARN


@pytest.mark.yarn
def test_the_endpoint_is_published_progress_reported_and_the_application_ended(app):
    app_id, client = app
    cluster = YarnClusterManager(app_client=client)
    tracking = cluster.publish_endpoint("10.0.0.5:4321", "secret", "view", "http://10.0.0.5:4321/ui/view")
    assert client.kv[KV_ADDRESS] == b"10.0.0.5:4321" and client.kv[KV_TOKEN] == b"secret"
    assert tracking.startswith("http") and app_id.split("_", 1)[1] in tracking  # behind the RM's proxy
    cluster.report_progress(0.25)
    rm = container_rm()
    wait_for(lambda: float(rm._json("GET", f"/apps/{app_id}")["app"]["progress"]) >= 25.0, timeout=60, interval=1)
    cluster.finish("SUCCEEDED", "done")
    report = wait_for(lambda: (r := rm.app(app_id)) and r.state == "FINISHED" and r, timeout=120, interval=1)
    assert report.final_status == "SUCCEEDED"


@pytest.mark.yarn
def test_a_container_whose_processes_died_is_seen_ended_at_its_node_before_the_resource_manager_says_so(app):
    import psutil
    _, client = app
    cluster = YarnClusterManager(app_client=client)
    [c] = cluster.allocate([ContainerRequest("worker:0", 256, 1, 0)], threading.Event())
    cluster.launch(c, ["ignored"], {"TONY_TASK_ID": "worker:0"})
    wait_for(lambda: cluster.granted(c) and cluster.log_url(c), timeout=120, interval=1)
    yarn_id = cluster._states()[cluster._containers[c.id]].yarn_container_id
    procs = wait_for(lambda: [p for p in psutil.process_iter() if _in(p, yarn_id)], timeout=60)
    assert cluster.ended_now(c) is None  # it runs
    for p in procs:  # as when its machine dies: every process of it, at once
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert wait_for(lambda: cluster.ended_now(c), timeout=30, interval=0.2) == 137


def _in(p, yarn_id: str) -> bool:
    import psutil
    try:
        return yarn_id in p.cwd() and "sleep" in " ".join(p.cmdline())
    except psutil.Error:
        return False
