"""Containers YARN takes back, on mini clusters that can: a queue with a better claim preempts a
running job's worker, and a NodeManager dies under a worker. Neither is the job's failure: with
``tony.am.retry-count=0`` the job still SUCCEEDS, relaunched for free, and the status says why.
Also on these clusters: task types on labelled nodes, an AM lost with its node, task types spread
over the nodes (NodeManagers on hosts of their own), and the application's priority.

The jobs are small commands, not TensorFlow: what is tested is YARN's and the AM's part."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from tests.conftest import REPO, START_TIMEOUT, app_processes, minicluster_missing, sleeper_job, wait_for
from tony_workflow import minicluster
from tony_workflow.backends.yarn import close_drivers
from tony_workflow.client import TonyClient, load_job

pytestmark = [pytest.mark.yarn]


def job(workers: int, seconds: int, conf: dict | None = None, memory: str = "512m", until: Path | None = None) -> dict:
    """Sleeping workers, with no session retry to spend: a reclaim that costs one fails the job."""
    return sleeper_job("reclaim", {"tony.am.memory": "256m", "tony.am.retry-count": "0", **(conf or {})},
                       seconds=seconds, workers=workers, memory=memory, until=until)


# The kinds of cluster the tests share, each started once (by the first test that asks for it).
# Queues default and urgent with preemption between them, and application priorities up to 10.
PREEMPTING = {"nm_memory_mb": 4096, "nm_vcores": 16, "preemption": True, "max_priority": 10}
# Exclusive labels: "work" on NodeManagers 1 and 2, "am" on 3 and 4; none on 0, for the rest. A
# node whose heartbeats stop is LOST after 5 s.
LABELLED = {"nodemanagers": 5, "nm_memory_mb": 2048, "nm_vcores": 8, "node_labels": {"work": [1, 2], "am": [3, 4]},
            "node_expiry_s": 5}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Starts a mini cluster of the kind a test asks for, with its client environment, after
    stopping the one before it (on two cores, idle clusters still cost the running one its CPU).
    The next test asking for the same kind gets the same cluster."""
    reason = minicluster_missing()
    if reason:
        pytest.skip(reason)
    started: list[Path] = []
    saved = dict(os.environ)
    last: dict = {}

    def use(**options) -> dict:
        if last.get("options") == options:
            return last["info"]
        for d in started:
            minicluster.stop(d)
        if last:
            close_drivers(last["info"]["rm_address"])
        d = tmp_path_factory.mktemp("reclaim-mc")
        info = minicluster.start(d, **{"timeout": START_TIMEOUT, **options})
        started.append(d)
        os.environ.clear()
        os.environ.update(saved)
        os.environ.update(minicluster.client_env(info))
        last.update(options=options, info={**info, "dir": str(d)})
        return last["info"]

    yield use
    if last:
        close_drivers(last["info"]["rm_address"])
    os.environ.clear()
    os.environ.update(saved)
    for d in started:
        minicluster.stop(d)


def reclaimed(app_id: str) -> list[str]:
    """What the job's record (the AM's while it runs, the history after) says it lost to the cluster."""
    record = TonyClient("yarn").record(app_id) or {}
    return [t["what"] for t in record.get("timeline") or [] if t["what"].startswith("the container of task")]


def rm_app(info: dict, app_id: str) -> dict:
    return requests.get(f"{info['rm_web']}/ws/v1/cluster/apps/{app_id}", timeout=30).json()["app"]


def node_of_task(info: dict, status, task_id: str) -> int:
    """The NodeManager running the task: its container's log address names the node."""
    return minicluster.nodemanager_of(info, urlsplit(status.task(task_id).log_url).netloc)


def test_a_preempted_worker_is_relaunched_without_spending_a_retry(clusters, tmp_path):
    info = clusters(**PREEMPTING)
    yarn = TonyClient("yarn")
    # Three 1 GB workers, the AM and skein's master fill the one 4 GB NodeManager from queue default.
    gate = tmp_path / "gate"  # the workers run till the gang has been broken and formed again
    h = yarn.submit(load_job(job(3, 600, {"tony.yarn.queue": "default"}, memory="1g", until=gate)))
    wait_for(lambda: (s := h.status()).state == "RUNNING" and len(s.tasks) == 3 and
             all(t.state == "RUNNING" for t in s.tasks), timeout=240, interval=1)
    # A job in queue urgent claims its guaranteed half: the monitor takes containers from default.
    import skein
    urgent = yarn.backend.client.submit(skein.ApplicationSpec(
        name="urgent", queue="urgent", max_attempts=1,
        services={"claim": skein.Service(resources=skein.Resources(memory=1024, vcores=1), instances=2,
                                         script="sleep 20")}))
    # The gang is broken: the next session waits for room while urgent holds its half, says so
    # with no task shown launched, and forms again once urgent is done. (The status keeps the
    # session that ended until the next one has its gang.)
    broken = wait_for(lambda: (s := h.status()).reclaims >= 1 and s.state == "ALLOCATING" and s.waiting_reason
                      and s, timeout=240, interval=0.5)
    assert broken.state == "ALLOCATING" and "blocked by" in broken.waiting_reason, broken.waiting_reason
    assert not any(t.state in ("LAUNCHED", "REGISTERED", "RUNNING") for t in broken.tasks), broken.tasks
    wait_for(lambda: (s := h.status()).session_id >= 1 and s.state == "RUNNING" and len(s.tasks) == 3
             and all(t.state == "RUNNING" for t in s.tasks), timeout=300, interval=1)
    gate.touch()
    st = h.wait(poll_interval=1, timeout=600)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.retries == 0 and st.reclaims >= 1, (st.retries, st.reclaims)
    assert int(rm_app(info, h.app_id)["numNonAMContainerPreempted"]) >= 1
    formed = [t for t in (TonyClient("yarn").record(h.app_id) or {}).get("timeline") or []
              if t["what"].startswith("all 4 containers granted after waiting")]
    assert any(t["detail"] != "session 0" for t in formed), formed
    lost = reclaimed(h.app_id)
    assert lost and lost[0].endswith("was preempted by the scheduler"), lost
    # Once its own containers were gone, default was under its share in turn: urgent may have lost
    # its containers the same way, which is YARN's business, not this job's.
    if rm_app(info, urgent)["state"] not in ("FINISHED", "FAILED", "KILLED"):
        yarn.backend.client.kill_application(urgent)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


@pytest.mark.frameworks
def test_a_preempted_worker_of_an_elastic_job_is_replaced_while_the_others_train_on(clusters):
    info = clusters(**PREEMPTING)  # the cluster of the test above
    yarn = TonyClient("yarn")
    # Three 1 GB workers of which two are enough, the AM and skein's master fill the NodeManager.
    spec = load_job(str(REPO / "examples" / "pytorch_elastic" / "pytorch_elastic.yaml"),
                    conf=["tony.am.memory=512m", "tony.worker.memory=1g", "tony.task.tensorboard.enabled=false",
                          "tony.yarn.queue=default", "tony.am.retry-count=0"],
                    task_params="--epochs 14 --save-every 5 --batch-size 96 --step-sleep 0.3")
    h = yarn.submit(spec)
    wait_for(lambda: (s := h.status()).state == "RUNNING" and (s.progress or {}).get("step", 0) >= 10
             and (s.elastic or {}).get("size") == 3, timeout=300, interval=1)
    import skein
    urgent = yarn.backend.client.submit(skein.ApplicationSpec(
        name="urgent", queue="urgent", max_attempts=1,
        services={"claim": skein.Service(resources=skein.Resources(memory=1024, vcores=1), instances=2,
                                         script="sleep 20")}))
    # The group goes on without what was taken, and the replacements join it again once urgent is
    # done, while training goes on (the job's length leaves room for a slow machine).
    def rejoined(s) -> bool:  # a round of the full size with a replacement in it
        return any((c.get("joined") or c.get("replaced")) and c["size"] == 3
                   for c in (s.elastic or {}).get("history") or [])

    regrown = wait_for(lambda: (s := h.status()).is_final and s or rejoined(s) and s, timeout=400, interval=0.5)
    assert not regrown.is_final, (regrown.state, regrown.elastic)
    st = h.wait(poll_interval=1, timeout=600)
    # Taken back, not failed: no retry spent, no membership change counted, the session kept.
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.session_id == 0 and st.retries == 0 and st.reclaims >= 1, (st.session_id, st.retries, st.reclaims)
    # (The group may end smaller: urgent's claim can take a member a second time before it ends.)
    assert st.elastic["changes"] == 0, st.elastic
    assert int(rm_app(info, h.app_id)["numNonAMContainerPreempted"]) >= 1
    lost = reclaimed(h.app_id)
    assert lost and all(w.endswith("was preempted by the scheduler") for w in lost), lost
    record = yarn.record(h.app_id) or {}
    assert any(t["what"].startswith("task worker:") and "left the elastic group" in t["what"]
               and "not counted" in t.get("detail", "") for t in record.get("timeline") or []), record.get("timeline")
    if rm_app(info, urgent)["state"] not in ("FINISHED", "FAILED", "KILLED"):
        yarn.backend.client.kill_application(urgent)
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_the_application_priority_is_asked_of_the_resource_manager(clusters):
    info = clusters(**PREEMPTING)
    h = TonyClient("yarn").submit(load_job(job(1, 600, {"tony.application.priority": "5"})))
    try:
        assert wait_for(lambda: int(rm_app(info, h.app_id)["priority"]) == 5, timeout=60)
    finally:
        st = h.kill()
    assert st.state == "KILLED"
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_workers_run_on_their_labelled_nodes_and_one_lost_with_its_node_is_relaunched(clusters, tmp_path):
    # NodeManagers 1 and 2 carry the exclusive label "work"; 0 has none, for skein's master and the AM.
    info = clusters(**LABELLED)
    yarn = TonyClient("yarn")
    gate = tmp_path / "gate"  # the worker runs till its relaunch on the other node is seen
    h = yarn.submit(load_job(job(1, 600, {"tony.worker.node-label": "work"}, until=gate)))
    st = wait_for(lambda: (s := h.status()).state == "RUNNING" and s.tasks and
                  s.tasks[0].state == "RUNNING" and s.tasks[0].log_url and s, timeout=240, interval=1)
    lost = node_of_task(info, st, "worker:0")
    assert lost in (1, 2), st.tasks[0].log_url
    am_nodes = am_node(info, h.app_id)  # a process that ends as it is looked at is passed over
    assert am_nodes == {0}, am_nodes
    before = {p.pid for p in app_processes(h.app_id) if "tony_workflow.task.executor" in _cmdline(p)}
    minicluster.stop_nodemanager(info["dir"], lost)
    # The lost node's processes are gone with it, and the worker comes back on the other labelled node.
    wait_for(lambda: not before & {p.pid for p in app_processes(h.app_id)}, timeout=60)
    again = wait_for(lambda: (s := h.status()).session_id >= 1 and s.tasks and s.tasks[0].log_url and
                     s.tasks[0].state == "RUNNING" and s, timeout=240, interval=1)
    assert node_of_task(info, again, "worker:0") == 3 - lost
    gate.touch()
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.retries == 0 and st.reclaims == 1, (st.retries, st.reclaims)
    assert reclaimed(h.app_id) == ["the container of task worker:0 was lost with its node"]
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def _cmdline(p) -> str:
    import psutil
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _env(p) -> dict:
    import psutil
    try:
        return p.environ()
    except psutil.Error:
        return {}


def am_node(info: dict, app_id: str) -> set[int]:
    """The NodeManagers whose containers run the job's supervisor (its AM container). A process
    that ends while it is looked at (the lost attempt's) is passed over."""
    import psutil
    nodes = set()
    for p in app_processes(app_id):
        try:
            if "tony_workflow.am.supervisor" in " ".join(p.cmdline()):
                env = p.environ()
                nodes.add(minicluster.nodemanager_of(info, f"{env['NM_HOST']}:{env['NM_HTTP_PORT']}"))
        except (psutil.Error, KeyError):
            continue
    return nodes


def test_an_am_lost_with_its_node_starts_again_on_another_without_spending_an_attempt(clusters, tmp_path):
    # The AM on the labelled NodeManagers 3 and 4, the worker and skein's master on 0. With
    # tony.am.max-attempts=1 a lost AM container that counted would fail the job. The worker
    # runs until the test has seen the second attempt's session.
    info = clusters(**LABELLED)
    yarn = TonyClient("yarn")
    gate = tmp_path / "gate"
    h = yarn.submit(load_job(job(1, 600, {"tony.am.node-label": "am", "tony.am.max-attempts": "1"}, until=gate)))
    st = wait_for(lambda: (s := h.status()).state == "RUNNING" and s.tasks and s.tasks[0].state == "RUNNING" and s,
                  timeout=240, interval=1)
    first_tracking = st.tracking_url
    [lost] = wait_for(lambda: am_node(info, h.app_id), timeout=120)
    assert lost in (3, 4)
    # The AM copies its events to HDFS on a thread as a session starts, and the executors may run
    # before that copy lands: the node goes once it has (a node lost sooner loses that history).
    wait_for(lambda: "session_started" in events_copy(yarn, h.app_id), timeout=120)
    # The worker's processes (skein's own master, on node 0, lives as long as the application).
    worker = st.tasks[0].container_id
    before = {p.pid for p in app_processes(h.app_id) if _env(p).get("TONY_CONTAINER_ID") == worker}
    assert before
    minicluster.stop_nodemanager(info["dir"], lost)
    # YARN declares the node lost, skein starts the AM's service on the other labelled node, and
    # the new attempt kills the old worker and starts the next session.
    again = wait_for(lambda: (s := h.status()).am_attempt == 2 and s.state == "RUNNING" and s.tasks
                     and s.tasks[0].state == "RUNNING" and s, timeout=300, interval=1)
    assert again.session_id >= 1 and again.retries == 0, (again.session_id, again.retries)
    assert "lost with its node" in again.diagnostics, again.diagnostics
    assert am_node(info, h.app_id) == {7 - lost}
    assert again.tracking_url == first_tracking  # the ResourceManager's proxy, whichever node serves it
    wait_for(lambda: not before & {p.pid for p in app_processes(h.app_id)}, timeout=120)  # the old worker too
    gate.touch()
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED", st.diagnostics
    assert st.am_attempt == 2 and st.retries == 0
    # The record keeps the lost container's sessions (its events were copied to HDFS) and says why.
    def read_timeline():
        return [t["what"] for t in (TonyClient("yarn").record(h.app_id) or {}).get("timeline") or []]
    try:
        timeline = wait_for(lambda: (t := read_timeline()) and "ApplicationMaster attempt 2 started" in t and t,
                            timeout=60)
    except AssertionError:
        timeline = read_timeline()
    assert "session 0 started" in timeline and "ApplicationMaster attempt 2 started" in timeline, timeline
    assert "ApplicationMaster attempt 1 failed (not counted against tony.am.max-attempts)" in timeline, timeline
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def events_copy(yarn: TonyClient, app_id: str) -> str:
    """The copy of the job's events the AM keeps in the application's HDFS directory ("" till one is)."""
    import tempfile

    from tony_workflow.backends.yarn.attempts import EVENTS_COPY
    from tony_workflow.backends.yarn.containers import app_store
    from tony_workflow.storage import open_storage
    store = open_storage(app_store(app_id), **yarn.backend.store_options())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            store.get(EVENTS_COPY, Path(tmp) / "events.jsonl")
        except Exception:  # noqa: BLE001 - not there yet
            return ""
        return (Path(tmp) / "events.jsonl").read_text()


def task_nodes(info: dict, status) -> dict[str, int]:
    return {t.task_id: node_of_task(info, status, t.task_id) for t in status.tasks}


def test_spread_workers_go_to_distinct_nodes_and_share_them_evenly_when_more(clusters, tmp_path):
    info = clusters(nodemanagers=3, nm_memory_mb=4096, nm_vcores=16, distinct_hosts=True)
    assert len({n["node_id"].split(":")[0] for n in info["nodes"]}) == 3
    yarn = TonyClient("yarn")
    gate = tmp_path / "gate"  # the workers run till all six are seen running
    h = yarn.submit(load_job(job(6, 600, {"tony.worker.spread": "true"}, memory="256m", until=gate)))
    st = wait_for(lambda: (s := h.status()).state == "RUNNING" and len(s.tasks) == 6 and
                  all(t.state == "RUNNING" and t.log_url for t in s.tasks) and s, timeout=240, interval=1)
    # Six workers on three nodes: two each. Left to itself, YARN gives one node's heartbeat all the
    # containers that fit on it (all six here).
    assert Counter(task_nodes(info, st).values()) == {0: 2, 1: 2, 2: 2}, task_nodes(info, st)
    gate.touch()
    assert h.wait(poll_interval=1, timeout=300).state == "SUCCEEDED"
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def test_a_spread_worker_whose_node_gives_no_container_is_asked_anywhere(clusters, tmp_path):
    # NodeManager 2 dies before the job is submitted, and YARN takes ten minutes to notice: the
    # ResourceManager still lists it, so the client gives it a service, whose request never ends.
    info = clusters(nodemanagers=3, nm_memory_mb=4096, nm_vcores=16, distinct_hosts=True)
    minicluster.stop_nodemanager(info["dir"], 2)
    gate = tmp_path / "gate"  # the workers run till all three are seen running
    h = TonyClient("yarn").submit(load_job(job(3, 600, {"tony.worker.spread": "true"}, memory="256m", until=gate)))
    st = wait_for(lambda: (s := h.status()).state == "RUNNING" and len(s.tasks) == 3 and
                  all(t.state == "RUNNING" and t.log_url for t in s.tasks) and s, timeout=240, interval=1,
                  describe=lambda: told(h))
    nodes = task_nodes(info, st)
    assert set(nodes.values()) == {0, 1}, nodes  # two on their own nodes, the third where there was room
    gate.touch()
    st = h.wait(poll_interval=1, timeout=300)
    assert st.state == "SUCCEEDED" and st.retries == 0, st.diagnostics
    timeline = [t["what"] for t in (TonyClient("yarn").record(h.app_id) or {}).get("timeline") or []]
    [placed] = [w for w in timeline if "placed anywhere" in w]
    assert placed.endswith(f"node {info['nodes'][2]['node_id'].split(':')[0]} gave no container in 20 s"), placed
    wait_for(lambda: not app_processes(h.app_id), timeout=120)


def told(h) -> str:
    """What the job says of itself, and its timeline: for a wait that ran out."""
    s = h.status()
    timeline = [(t["what"], t.get("detail")) for t in (TonyClient("yarn").record(h.app_id) or {}).get("timeline") or []]
    return (f"{s.state} {s.waiting_reason!r} {s.diagnostics!r} "
            f"{[(t.task_id, t.state, bool(t.log_url)) for t in s.tasks]} {timeline}")
