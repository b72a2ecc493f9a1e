"""The AM's route handlers on its declared state (:mod:`tony_workflow.am.routes`,
:mod:`tony_workflow.am.state`): what each records, what each refuses, and that none decides. The
state holds the embedded cluster's real cluster manager, which launches nothing here; the last
test puts the handlers behind the AM's real server and client."""
from __future__ import annotations

import json

import pytest

from tony_workflow import protocol
from tony_workflow.am.routes import AMRoutes
from tony_workflow.am.server import AMHttpServer
from tony_workflow.am.state import AMState, Task
from tony_workflow.backends import Container
from tony_workflow.backends.local import LocalClusterManager
from tony_workflow.backends.local.ledger import Inventory
from tony_workflow.protocol import (
    ClusterSpecQuery,
    Heartbeat,
    Kill,
    Notebook,
    Registration,
    Result,
    Started,
    TensorBoard,
)
from tony_workflow.rpc import AMClient, AMError
from tony_workflow.spec import load_job
from tony_workflow.status import JobState, TaskState, TaskStatus


def make_state(tmp_path, conf: dict | None = None) -> AMState:
    spec = load_job({"name": "routes", "command": "true", "tasks": {"chief": {"instances": 1},
                                                                      "worker": {"instances": 2}},
                     "conf": conf or {}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(8192, 8, []))
    state = AMState(spec, "application_1_0001", tmp_path, cluster)
    for task_id in ("worker:1", "chief:0", "worker:0"):  # not in the spec's order: the spec is sorted
        ttype, index = task_id.split(":")
        container = Container(id=f"c-{task_id}", task_id=task_id, memory_mb=256, vcores=1)
        status = TaskStatus(type=ttype, index=int(index), state=TaskState.LAUNCHED, container_id=container.id)
        state.tasks[task_id] = Task(status=status, container=container, session_id=0)
    return state


def events(state: AMState) -> list[dict]:
    return [json.loads(line) for line in (state.app_dir / "events.jsonl").read_text().splitlines()]


def register(routes: AMRoutes, task_id: str, port: int, **kw):
    return routes.register(Registration(task_id=task_id, session_id=kw.pop("session_id", 0), host="h", port=port,
                                        container_id=kw.pop("container_id", f"c-{task_id}"), **kw))


def test_the_last_registration_makes_the_cluster_spec_in_the_spec_order(tmp_path):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    assert routes.cluster_spec(ClusterSpecQuery("worker:0", 0, wait=0)) == (204, None)
    assert register(routes, "worker:1", 2001, pid=11) == (200, {"ok": True})
    assert register(routes, "worker:0", 2000) == (200, {"ok": True})
    assert state.cluster_spec is None and not state.gang_ready.is_set()
    assert state.tasks["worker:1"].status.state == TaskState.REGISTERED and state.tasks["worker:1"].status.pid == 11
    assert register(routes, "chief:0", 3000) == (200, {"ok": True})
    assert state.gang_ready.is_set()
    code, reply = routes.cluster_spec(ClusterSpecQuery("worker:1", 0, wait=5))
    assert code == 200 and reply == {"cluster": {"chief": ["h:3000"], "worker": ["h:2000", "h:2001"]},
                                     "session_id": 0, "chief": ["chief", 0]}
    [ready] = [e for e in events(state) if e["event"] == "cluster_spec_ready"]
    assert ready["cluster"] == reply["cluster"]
    assert state.status.state == JobState.ALLOCATING  # registering decides nothing about the job


@pytest.mark.parametrize("change, code, says", [
    ({"task_id": "ps:0"}, 404, "unknown task 'ps:0'"),
    ({"session_id": 1}, 409, "stale session"),
    ({"container_id": "c-other"}, 409, "stale container"),
])
def test_a_request_from_a_task_the_am_no_longer_runs_stops_its_executor(tmp_path, change, code, says):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    task_id = change.pop("task_id", "worker:0")
    got_code, reply = register(routes, task_id, 2000, **change)
    assert (got_code, reply["action"]) == (code, "stop") and says in reply["error"]
    assert state.tasks["worker:0"].registered_at is None
    if task_id == "worker:0" and "session_id" in change:
        assert routes.heartbeat(Heartbeat("worker:0", 1))[0] == 409
        assert routes.result(Result("worker:0", 1, exit_code=1))[0] == 409
        assert state.tasks["worker:0"].reported is None


def test_the_exit_of_a_tasks_earlier_container_is_not_taken_for_its_replacements(tmp_path):
    # A replaced container's executor may outlive it (YARN's preemption) and report its trainer's
    # end just as the replacement registers: that report is the old container's, not the task's.
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    assert register(routes, "worker:0", 2000)[0] == 200
    code, reply = routes.result(Result("worker:0", 0, exit_code=75, container_id="c-earlier"))
    assert code == 409 and "stale container" in reply["error"]
    assert state.tasks["worker:0"].reported is None
    assert routes.result(Result("worker:0", 0, exit_code=0, container_id="c-worker:0"))[0] == 200
    assert state.tasks["worker:0"].reported is not None


def test_an_earlier_containers_executor_is_told_to_stop_at_its_next_beat_or_start(tmp_path):
    # Its heartbeats must not keep the task alive in the AM's eyes, nor its start be the task's.
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    assert register(routes, "worker:0", 2000)[0] == 200
    code, reply = routes.heartbeat(Heartbeat("worker:0", 0, container_id="c-earlier"))
    assert (code, reply["action"]) == (409, "stop") and "stale container" in reply["error"]
    code, reply = routes.started(Started("worker:0", 0, pid=4242, container_id="c-earlier"))
    assert code == 409 and state.tasks["worker:0"].status.pid != 4242
    assert routes.heartbeat(Heartbeat("worker:0", 0, container_id="c-worker:0")) == (200, {"action": "continue"})
    assert routes.started(Started("worker:0", 0, pid=4243, container_id="c-worker:0"))[0] == 200
    assert state.tasks["worker:0"].status.pid == 4243


def test_a_relaunched_task_must_keep_its_port(tmp_path):
    state = make_state(tmp_path)
    state.tasks["worker:0"].fixed_port = 2000
    routes = AMRoutes(state)
    code, reply = register(routes, "worker:0", 2999)
    assert code == 409 and "must keep port 2000" in reply["error"]
    assert register(routes, "worker:0", 2000)[0] == 200


def test_heartbeats_record_figures_progress_and_the_store_and_decide_nothing(tmp_path):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    assert routes.heartbeat(Heartbeat("chief:0", 0, metrics={"rss_mb": 12.5},
                                      progress={"reports": 1, "step": 5, "total": 10, "age": 0})) == (200, {"action": "continue"})
    chief = state.tasks["chief:0"]
    assert chief.status.metrics == {"rss_mb": 12.5} and chief.status.progress["step"] == 5
    assert state.progressed_types == {"chief"}  # a later chief killed before its first step is no "every time"
    routes.heartbeat(Heartbeat("chief:0", 0, store={"error": "HDFS unreachable"}))
    assert state.status.warnings == ["chief:0: HDFS unreachable"] and state.store_failure is None
    routes.heartbeat(Heartbeat("chief:0", 0, store={"ok": True}))
    assert state.status.warnings == []
    assert [e["event"] for e in events(state)] == ["checkpoint_store_failed", "checkpoint_store_recovered"]


def test_store_trouble_fails_the_job_when_the_spec_says_so(tmp_path):
    state = make_state(tmp_path, {"tony.checkpoint.on-store-failure": "fail"})
    AMRoutes(state).heartbeat(Heartbeat("worker:1", 0, store={"error": "quota exceeded"}))
    assert "worker:1 quota exceeded" in (state.store_failure or "")
    assert "tony.checkpoint.on-store-failure=fail" in (state.store_failure or "")


def test_started_and_result_are_recorded_for_the_monitor(tmp_path):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    assert routes.started(Started("worker:0", 0, pid=42)) == (200, {"ok": True})
    assert state.tasks["worker:0"].status.state == TaskState.RUNNING and state.tasks["worker:0"].status.pid == 42
    assert routes.result(Result("worker:0", 0, exit_code=3, diagnostics="boom")) == (200, {"ok": True})
    # Recorded, not applied: the task's state and the job's are the monitor's to change.
    assert state.tasks["worker:0"].reported == (3, "boom")
    assert state.tasks["worker:0"].status.state == TaskState.RUNNING and state.status.state == JobState.ALLOCATING


def test_only_a_web_address_becomes_the_tensorboard_link(tmp_path):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    code, reply = routes.tensorboard(TensorBoard("javascript:alert(1)"))
    assert code == 400 and "http(s) address" in reply["error"] and state.status.tensorboard_url is None
    assert routes.tensorboard(TensorBoard("http://h:6006/")) == (200, {"ok": True})
    assert state.status.tensorboard_url == "http://h:6006/"


def test_a_notebooks_address_is_a_web_address_kept_in_the_status_and_set_only_with_the_executors_token(tmp_path):
    state = make_state(tmp_path)
    routes = AMRoutes(state)
    code, reply = routes.notebook(Notebook("file:///etc/passwd"))
    assert code == 400 and "http(s) address" in reply["error"] and state.status.notebook_url is None
    assert routes.notebook(Notebook("http://h:8888/jobs/a/notebook/")) == (200, {"ok": True})
    assert state.status.notebook_url == "http://h:8888/jobs/a/notebook/"
    assert protocol.NOTEBOOK.view is False and protocol.NOTEBOOK.group is False  # the executors' token only


def test_kill_is_recorded_with_its_reason_and_cancels_a_wait(tmp_path):
    state = make_state(tmp_path)
    AMRoutes(state).kill(Kill())
    assert state.kill_requested == "killed by user" and state.cancel.is_set()
    AMRoutes(state).kill(Kill("preempted by the nightly run"))
    assert state.kill_requested == "preempted by the nightly run"


SAMPLES = {"register": {"task_id": "worker:0", "session_id": 0, "host": "h", "port": 2000},
           "cluster_spec": {"task_id": "worker:0", "session_id": 0},
           "heartbeat": {"task_id": "worker:0", "session_id": 0}, "started": {"task_id": "worker:0", "session_id": 0},
           "result": {"task_id": "worker:0", "session_id": 0, "exit_code": 0},
           "tensorboard": {"url": "http://h:6006"}, "notebook": {"url": "http://h:8888/jobs/a/notebook/"}, "status": {}, "record": {}, "kill": {},
           "horovod_driver": {"task_id": "driver:0", "session_id": 0, "host": "h", "port": 9999},
           "rdzv_state": {"run_id": "r-0"}, "rdzv_set_state": {"run_id": "r-0", "state": "AAE="},
           "rdzv_store": {"run_id": "r-0", "op": "set", "keys": ["k"], "values": ["AAE="]},
           "rdzv_round": {"task_id": "worker:0", "session_id": 0, "run_id": "r-0", "round": 0, "rank": 0,
                          "world_size": 1},
           "rdzv_group": {"task_id": "worker:0", "session_id": 0, "run_id": "r-0", "node": "worker:0@h:1",
                          "op": "join"}}


@pytest.mark.parametrize("route", protocol.ROUTES, ids=lambda r: r.name)
def test_every_route_has_a_handler_that_answers_its_declared_request(tmp_path, route):
    # A handler that reads a field its route does not declare fails here (the objects have no such attribute).
    state = elastic_state(tmp_path, "r-0") if route.name.startswith("rdzv_") else make_state(tmp_path)
    if route.name == "horovod_driver":
        state = horovod_state(tmp_path)
    code, reply = AMRoutes(state).handlers()[route.name](route.decode(SAMPLES[route.name]))
    assert code in (200, 204) and json.loads(json.dumps(reply)) == reply


def horovod_state(tmp_path) -> AMState:
    """A Horovod job's state (its driver task added by TonY's rule), every task registered."""
    state = make_state(tmp_path, {"tony.application.framework": "horovod", "tony.horovod.mode.test": "true"})
    container = Container(id="c-driver:0", task_id="driver:0", memory_mb=256, vcores=1)
    state.tasks["driver:0"] = Task(status=TaskStatus(type="driver", index=0, state=TaskState.LAUNCHED),
                                   container=container, session_id=0)
    routes = AMRoutes(state)
    for port, task_id in enumerate(("chief:0", "worker:0", "worker:1", "driver:0"), start=2000):
        routes.register(protocol.Registration(task_id=task_id, session_id=0, host="h", port=port))
    return state


def test_a_horovod_jobs_workers_wait_for_the_drivers_server_and_are_told_where_it_is(tmp_path):
    state = horovod_state(tmp_path)
    routes = AMRoutes(state)
    # The driver has its cluster spec at once; the workers' is held until it announces its server.
    assert routes.cluster_spec(protocol.ClusterSpecQuery(task_id="driver:0", session_id=0, wait=0))[0] == 200
    assert routes.cluster_spec(protocol.ClusterSpecQuery(task_id="worker:0", session_id=0, wait=0)) == (204, None)
    assert routes.horovod_driver(protocol.RendezvousServer(task_id="worker:1", session_id=0, host="h",
                                                           port=1))[0] == 409  # only the driver says so
    assert routes.horovod_driver(protocol.RendezvousServer(task_id="driver:0", session_id=0, host="hd",
                                                           port=9999))[0] == 200
    code, reply = routes.cluster_spec(protocol.ClusterSpecQuery(task_id="worker:0", session_id=0, wait=0))
    assert code == 200 and reply["cluster"]["driver"] == ["hd:9999"]
    assert [e["port"] for e in events(state) if e["event"] == "horovod_rendezvous"] == [9999]


def test_a_fixed_job_has_no_rendezvous_and_its_agents_are_told_to_stop(tmp_path):
    routes = AMRoutes(make_state(tmp_path))
    for name in ("rdzv_state", "rdzv_group"):
        route = next(r for r in protocol.ROUTES if r.name == name)
        code, reply = routes.handlers()[name](route.decode(SAMPLES[name]))
        assert code == 409 and reply["action"] == "stop" and "not elastic" in reply["error"], (name, reply)


def test_behind_the_real_server_a_malformed_registration_changes_nothing(tmp_path):
    state = make_state(tmp_path)
    server = AMHttpServer("127.0.0.1", token="t", view_token="v", handlers=AMRoutes(state).handlers(),
                          status=state.status_dict, task_logs=state.task_logs)
    address = server.start()
    try:
        am = AMClient(address, "t", timeout=5)
        with pytest.raises(AMError) as e:
            am._call(protocol.REGISTER, task_id="worker:0", session_id=0, host="h")  # no port
        assert e.value.status == 400 and "field 'port' is missing" in str(e.value)
        assert state.tasks["worker:0"].status.state == TaskState.LAUNCHED
        assert am.register("worker:0", 0, "h", 2000, container_id="c-worker:0") == {"ok": True}
        assert state.tasks["worker:0"].status.state == TaskState.REGISTERED
        assert am.status()["application_id"] == "application_1_0001"
    finally:
        server.shutdown()


def elastic_state(tmp_path, run: str = "application_1_0001-0") -> AMState:
    spec = load_job({"name": "elastic", "framework": "pytorch", "command": "true",
                     "tasks": {"worker": {"instances": 2, "min_instances": 1}}})
    cluster = LocalClusterManager("application_1_0001", tmp_path, Inventory(8192, 8, []))
    state = AMState(spec, "application_1_0001", tmp_path, cluster)
    for index in (0, 1):
        container = Container(id=f"c-worker:{index}", task_id=f"worker:{index}", memory_mb=256, vcores=1)
        status = TaskStatus(type="worker", index=index, state=TaskState.RUNNING, container_id=container.id)
        state.tasks[f"worker:{index}"] = Task(status=status, container=container, session_id=0)
    state.elastic.begin(0, 0.0)
    state.elastic.rendezvous.open(run)
    return state


def test_the_rendezvous_routes_answer_the_open_run_only_and_refuse_what_is_not_base64(tmp_path):
    state = elastic_state(tmp_path)
    routes = AMRoutes(state)
    run = "application_1_0001-0"
    assert routes.rdzv_set_state(protocol.SetState(run, "c3RhdGU=")) == (
        200, {"state": "c3RhdGU=", "token": 1, "written": True, "dead": []})
    state.elastic.rendezvous.departed("h_123_0")
    assert routes.rdzv_state(protocol.StateQuery(run)) == (
        200, {"state": "c3RhdGU=", "token": 1, "written": False, "dead": ["h_123_0"]})
    code, reply = routes.rdzv_state(protocol.StateQuery("application_1_0001-7"))
    assert code == 409 and reply["action"] == "stop"   # an agent of another session is told to stop
    code, reply = routes.rdzv_store(protocol.StoreOp(run, "set", ["k"], ["not base64!"]))
    assert code == 400 and "not base64" in reply["error"]
    code, reply = routes.rdzv_store(protocol.StoreOp(run, "rename", ["k"]))
    assert code == 400 and "unknown store operation" in reply["error"]
    assert routes.rdzv_store(protocol.StoreOp(run, "add", ["n"], amount=2)) == (200, {"values": [], "count": 2,
                                                                                         "ok": True,
                                                                                         "dead": ["h_123_0"]})


def test_a_formed_round_shows_the_groups_size_and_who_waits_to_join(tmp_path):
    state = elastic_state(tmp_path)
    routes = AMRoutes(state)
    run = "application_1_0001-0"
    assert routes.rdzv_round(protocol.RendezvousRound("worker:1", 0, run, 0, 0, 2, "h_11_0")) == (200, {"ok": True})
    assert state.elastic.joined == {"c-worker:1": "h_11_0"}
    assert state.status.elastic["size"] == 0 and state.status.elastic["waiting"] == ["worker:0"]
    routes.rdzv_round(protocol.RendezvousRound("worker:0", 0, run, 0, 1, 2))
    assert state.status.elastic["size"] == 2 and state.status.elastic["waiting"] == []
    [formed] = [e for e in events(state) if e["event"] == "elastic_group"]
    assert formed["what"] == "group formed" and formed["members"] == ["worker:1", "worker:0"] and formed["target"] == 2
    # A report from a task of an ended session changes nothing.
    code, _ = routes.rdzv_round(protocol.RendezvousRound("worker:0", 3, run, 1, 0, 1))
    assert code == 409 and state.status.elastic["round"] == 0


def test_the_group_route_gives_places_records_each_generation_and_stops_the_dead(tmp_path):
    state = elastic_state(tmp_path)  # worker:0 and worker:1, min-instances 1
    state.elastic.rendezvous.open("application_1_0001-0", minimum=1, target=2)
    routes = AMRoutes(state)
    run = "application_1_0001-0"

    def ask(task_id, node, op="join", generation=-1, wait=0.0):
        return routes.rdzv_group(protocol.GroupRequest(task_id, 0, run, node, op, generation, wait))

    assert ask("worker:0", "w0") == (200, {"formed": False})
    code, place = ask("worker:1", "w1")
    assert code == 200 and place == {"formed": True, "generation": 0, "rank": 1, "world_size": 2,
                                     "members": ["w0", "w1"]}
    assert state.status.elastic["size"] == 2 and state.status.elastic["waiting"] == []
    assert ask("worker:0", "w0")[1]["rank"] == 0  # its place, asked again
    assert ask("worker:0", "w0", "watch", 0)[1] == {"changed": False, "generation": 0, "joining": [], "dead": []}
    # worker:1's task is lost: the AM names its trainer's node, which it learned from its request.
    assert state.elastic.trainers == {"c-worker:0": "w0", "c-worker:1": "w1"}
    state.elastic.rendezvous.departed(state.elastic.trainers["c-worker:1"])
    assert ask("worker:0", "w0", "watch", 0)[1]["dead"] == ["w1"]
    assert ask("worker:0", "w0", generation=0)[1]["world_size"] == 1
    assert [h["event"] for h in state.status.elastic["history"] if "round" in h] == ["group formed", "group shrank"]
    code, reply = ask("worker:1", "w1", generation=0)
    assert code == 409 and reply["action"] == "stop" and "named gone" in reply["error"]
    assert ask("worker:0", "w0", "leave")[0] == 400
    code, reply = routes.rdzv_group(protocol.GroupRequest("worker:0", 0, "application_1_0001-9", "w0"))
    assert code == 409 and reply["action"] == "stop"
