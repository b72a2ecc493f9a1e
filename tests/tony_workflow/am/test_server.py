"""The AM's HTTP transport on a real socket: what its own request reading must get right that the
standard handler did for it (keep-alive, pipelining, malformed requests, closing rules), and the
tokens. The handlers are a test's: the transport is tested alone."""
from __future__ import annotations

import dataclasses
import json
import socket
import threading

import pytest

from tony_workflow import protocol
from tony_workflow.am.server import AMHttpServer
from tony_workflow.rpc import AMClient, AMError

TOKEN, VIEW = "secret-token", "view-token"


@pytest.fixture
def server():
    seen: list[tuple[str, object]] = []
    gang = threading.Event()

    def record(name):
        def handler(request):
            seen.append((name, request))
            return 200, {"route": name, "echo": dataclasses.asdict(request)}
        return handler

    def cluster_spec(q):
        seen.append(("cluster_spec", q))
        return (200, {"cluster": {"worker": ["h:1"]}, "session_id": 0, "chief": ["worker", 0]}) \
            if gang.wait(q.wait) else (204, None)

    handlers = {r.name: record(r.name) for r in protocol.ROUTES}
    handlers[protocol.CLUSTER_SPEC.name] = cluster_spec
    handlers[protocol.STATUS.name] = lambda _: (200, {"state": "RUNNING", "name": "<b>x</b>"})
    handlers[protocol.KILL.name] = lambda _: 1 / 0  # a handler's own bug
    srv = AMHttpServer("127.0.0.1", token=TOKEN, view_token=VIEW, handlers=handlers,
                       status=lambda: {"application_id": "application_1_0001", "state": "RUNNING", "tasks": []},
                       task_logs=dict)
    address = srv.start()
    host, port = address.split(":")
    yield {"address": address, "host": host, "port": int(port), "seen": seen, "gang": gang}
    srv.shutdown()


def raw(server, data: bytes, read_until_close: bool = True) -> bytes:
    """Sends ``data`` as is and returns what comes back until the server closes (or 2 s pass)."""
    with socket.create_connection((server["host"], server["port"]), timeout=2) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            if read_until_close:
                raise AssertionError(f"the server kept the connection open after {out!r}")
        return out


def replies(data: bytes) -> list[tuple[int, dict, bytes]]:
    """Splits a byte stream into (status, headers, body) replies by their Content-Length."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", 0))
        out.append((int(lines[0].split(" ")[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def post(path: str, body: dict, token: str = TOKEN, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Tony-Token: {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n{extra}\r\n").encode() + data


def test_the_real_client_is_answered_request_after_request(server):
    am = AMClient(server["address"], TOKEN, timeout=5)
    for i in range(50):
        reply = am.heartbeat("worker:0", 0, metrics={"rss_mb": float(i)})
        assert reply["route"] == "heartbeat" and reply["echo"]["metrics"] == {"rss_mb": float(i)}
    assert am.status()["state"] == "RUNNING"
    server["gang"].set()
    assert am.cluster_spec("worker:0", 0, wait=1.0)["cluster"] == {"worker": ["h:1"]}
    assert len([s for s in server["seen"] if s[0] == "heartbeat"]) == 50


def test_pipelined_requests_are_answered_in_order_on_one_connection(server):
    data = (post("/v1/heartbeat", {"task_id": "a", "session_id": 0})
            + post("/v1/started", {"task_id": "b", "session_id": 0, "pid": 7})
            + post("/v1/result", {"task_id": "c", "session_id": 0, "exit_code": 0}, extra="Connection: close\r\n"))
    got = replies(raw(server, data))
    assert [(code, json.loads(body)["route"]) for code, _, body in got] == [
        (200, "heartbeat"), (200, "started"), (200, "result")]
    assert got[-1][1].get("connection") == "close" and "connection" not in got[0][1]
    assert all(h["content-type"] == "application/json" and h.get("date") for _, h, _ in got)


def test_headers_are_matched_without_regard_to_case(server):
    data = post("/v1/heartbeat", {"task_id": "a", "session_id": 0}).replace(b"X-Tony-Token", b"x-TONY-token")
    [(code, _, body)] = replies(raw(server, data.replace(b"Host: x", b"Connection: close")))
    assert code == 200 and json.loads(body)["route"] == "heartbeat"


@pytest.mark.parametrize("request_bytes, code", [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /v1/status\r\n\r\n", 400),                                   # no version
    (b"GET /v1/status HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"GET /v1/status HTTP/1.1\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(101)) + b"\r\n", 431),
    (b"GET /v1/status HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n", 431),
    (b"POST /v1/heartbeat HTTP/1.1\r\nX-Tony-Token: secret-token\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
    (b"DELETE /v1/status HTTP/1.1\r\nX-Tony-Token: secret-token\r\n\r\n", 501),
])
def test_a_malformed_request_is_refused_and_the_connection_closed(server, request_bytes, code):
    got = replies(raw(server, request_bytes))
    assert [c for c, _, _ in got] == [code], got
    assert got[0][1].get("connection") == "close"
    assert "error" in json.loads(got[0][2])
    assert not [s for s in server["seen"] if s[0] != "status"]  # no handler ran


@pytest.mark.parametrize("body, field, says", [
    ({"task_id": "worker:0", "session_id": 0, "host": "h"}, "port", "field 'port' is missing"),
    ({"task_id": "worker:0", "session_id": 0, "host": "h", "port": "80"}, "port", "must be an integer, got '80'"),
    ({"task_id": "worker:0", "session_id": True, "host": "h", "port": 80}, "session_id", "must be an integer"),
    ({"task_id": "worker:0", "session_id": 0, "host": "h", "port": 80, "colour": "red"}, "colour", "no field 'colour'"),
    ([1, 2], None, "takes a JSON object, got list"),
    (b"{not json", None, "the body is not JSON"),
])
def test_a_body_that_does_not_match_its_route_is_answered_400_naming_the_field(server, body, field, says):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = (f"POST /v1/register HTTP/1.1\r\nX-Tony-Token: {TOKEN}\r\nContent-Length: {len(data)}\r\n"
               f"\r\n").encode() + data
    # Refused on a connection that stays open: a well-formed request after it is answered.
    got = replies(raw(server, request + post("/v1/heartbeat", {"task_id": "a", "session_id": 0},
                                             extra="Connection: close\r\n")))
    assert [c for c, _, _ in got] == [400, 200], got
    reply = json.loads(got[0][2])
    assert reply["field"] == field and says in reply["error"], reply
    assert [name for name, _ in server["seen"]] == ["heartbeat"]  # the register handler never ran


def test_the_real_client_reports_a_refused_request_without_retrying_it(server):
    with pytest.raises(AMError) as e:
        AMClient(server["address"], TOKEN, timeout=5, retries=3).register("worker:0", 0, "h", "80")
    assert e.value.status == 400 and "'port'" in str(e.value)
    assert not server["seen"]


def test_a_handler_that_fails_is_answered_500_and_the_server_serves_on(server):
    with pytest.raises(AMError) as e:
        AMClient(server["address"], TOKEN, timeout=5).kill("stop")
    assert e.value.status == 500 and "ZeroDivisionError" in str(e.value)
    assert AMClient(server["address"], TOKEN, timeout=5).heartbeat("worker:0", 0)["route"] == "heartbeat"


def test_a_get_with_a_bad_query_is_answered_400_naming_the_field(server):
    got = replies(raw(server, f"GET /v1/cluster-spec?task_id=w:0&session_id=x HTTP/1.1\r\nX-Tony-Token: {TOKEN}"
                              f"\r\nConnection: close\r\n\r\n".encode()))
    assert got[0][0] == 400 and json.loads(got[0][2])["field"] == "session_id"


def test_an_http_1_0_request_gets_its_reply_and_the_connection_closes(server):
    got = replies(raw(server, b"GET /v1/status HTTP/1.0\r\nX-Tony-Token: view-token\r\n\r\n"))
    assert [c for c, _, _ in got] == [200] and json.loads(got[0][2])["state"] == "RUNNING"


def test_expect_100_continue_is_answered_before_the_body(server):
    body = json.dumps({"task_id": "a", "session_id": 0}).encode()
    head = (f"POST /v1/heartbeat HTTP/1.1\r\nX-Tony-Token: {TOKEN}\r\nExpect: 100-continue\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((server["host"], server["port"]), timeout=2) as s:
        s.sendall(head)
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    [(code, _, reply)] = replies(out)
    assert code == 200 and json.loads(reply)["route"] == "heartbeat"


def test_tokens_open_only_their_routes(server):
    assert AMClient(server["address"], VIEW, timeout=5).status()["state"] == "RUNNING"
    with pytest.raises(AMError) as e:
        AMClient(server["address"], VIEW, timeout=5).heartbeat("worker:0", 0)
    assert e.value.status == 401
    with pytest.raises(AMError) as e:
        AMClient(server["address"], "wrong", timeout=5).status()
    assert e.value.status == 401
    got = replies(raw(server, b"GET /nowhere HTTP/1.1\r\nX-Tony-Token: secret-token\r\nConnection: close\r\n\r\n"))
    assert got[0][0] == 404


def test_the_group_token_opens_only_the_generations_and_the_store(server):
    # What an in-place elastic job's trainers hold: derived from the job's token, not the token.
    group = protocol.group_token(TOKEN)
    assert group not in (TOKEN, VIEW) and group == protocol.group_token(TOKEN)
    trainer = AMClient(server["address"], group, timeout=5)
    join = trainer._call(protocol.RDZV_GROUP, task_id="worker:0", session_id=0, run_id="r", node="n", op="join")
    assert join["route"] == "rdzv_group"
    assert trainer._call(protocol.RDZV_STORE, run_id="r", op="count")["route"] == "rdzv_store"
    refused = [lambda: trainer.heartbeat("worker:0", 0), trainer.status, lambda: trainer.kill("no"),
               lambda: trainer._call(protocol.RDZV_STATE, run_id="r")]
    for call in refused:
        with pytest.raises(AMError) as e:
            call()
        assert e.value.status == 401
    # The view token opens neither.
    with pytest.raises(AMError) as e:
        AMClient(server["address"], VIEW, timeout=5)._call(protocol.RDZV_STORE, run_id="r", op="count")
    assert e.value.status == 401


def test_the_tracking_page_escapes_what_the_job_says(server):
    got = replies(raw(server, f"GET /ui/{VIEW} HTTP/1.1\r\nConnection: close\r\n\r\n".encode()))
    assert got[0][0] == 200 and got[0][1]["content-type"].startswith("text/html")
    assert b"application_1_0001" in got[0][2]
    assert replies(raw(server, b"GET /ui/guess HTTP/1.1\r\n\r\n"))[0][0] == 401


def test_the_tracking_page_shows_an_elastic_group_with_its_changes_and_escapes_them():
    from tony_workflow.am.server import render_status_page
    from tony_workflow.status import JobStatus

    st = JobStatus("application_1_0002", state="RUNNING", name="<b>el</b>")
    st.elastic = {"size": 2, "target": 3, "min": 2, "round": 1, "changes": 1, "max_changes": 10,
                  "waiting": ["worker:1"], "below_min_since": None,
                  "history": [{"at": 1.0, "size": 3, "event": "group formed", "joined": ["worker:0", "worker:1"]},
                              {"at": 2.0, "size": 2, "event": "group shrank", "left": ["worker:1"],
                               "causes": {"worker:1": "exit code 137 (SIGKILL)"}}]}
    page = render_status_page(st.to_dict())
    assert "Elastic group: 2 of 3 nodes (at least 2), membership changes 1 of 10; waiting to join: worker:1" in page
    assert "group formed; joined: worker:0, worker:1" in page
    assert "group shrank; left: worker:1" in page and "worker:1: exit code 137 (SIGKILL)" in page
    assert "&lt;b&gt;el&lt;/b&gt;" in page
    assert "Elastic group" not in render_status_page(JobStatus("application_1_0003").to_dict())


def test_the_tracking_page_says_where_the_job_came_from():
    from tony_workflow.am.server import render_status_page
    from tony_workflow.status import JobStatus

    st = JobStatus("application_1_0004", state="RUNNING",
                   context={"source": "airflow", "dag_id": "nightly", "dag_run_id": "manual__1", "task_id": "train",
                            "try_number": "2", "url": "http://airflow/dags/nightly/runs/manual__1/tasks/train"})
    page = render_status_page(st.to_dict())
    assert "Started by Airflow DAG nightly, run manual__1, task train, try 2" in page
    assert '<a href="http://airflow/dags/nightly/runs/manual__1/tasks/train">' in page
    assert "Started by" not in render_status_page(JobStatus("application_1_0005").to_dict())
