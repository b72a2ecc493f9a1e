"""The AM's client (:mod:`tony_workflow.rpc`) against servers on real sockets: what it retries
(a refused connection, a kept-alive connection the server had closed) and what it never retries
(an answer, a timeout), and how each answer reaches the caller."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tony_workflow import protocol
from tony_workflow.am.server import AMHttpServer
from tony_workflow.rpc import AMClient, AMError, AMUnreachable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RawServer:
    """Answers each request with the next canned reply, then closes the connection when told to."""

    def __init__(self, replies: list[tuple[bytes, bool]]):
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed by the test: the replies left are not wanted
                return
            with conn:
                pending = b""
                while self.replies:
                    request, pending = self._read_request(conn, pending)
                    if request is None:
                        break
                    self.requests.append(request)
                    reply, close = self.replies.pop(0)
                    conn.sendall(reply)
                    if close:
                        break

    @staticmethod
    def _read_request(conn: socket.socket, data: bytes) -> tuple[bytes | None, bytes]:
        """One whole request (head and body, however the client split its sends), and what follows it."""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += conn.recv(65536)
        return head + b"\r\n\r\n" + rest[:length], rest[length:]

    def close(self) -> None:
        self.sock.close()


def reply(status: int, body: bytes = b"", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_a_refused_connection_is_retried_then_reported_as_unreachable():
    port = free_port()
    am = AMClient(f"127.0.0.1:{port}", "t", timeout=2, retries=2)
    started = time.monotonic()
    with pytest.raises(AMUnreachable) as e:
        am.status()
    assert f"127.0.0.1:{port} unreachable" in str(e.value)
    assert time.monotonic() - started >= 0.2 + 0.4  # two back-offs: it did retry


def test_an_am_that_comes_up_during_the_retries_is_reached():
    port = free_port()
    am = AMClient(f"127.0.0.1:{port}", "t", timeout=2, retries=3)
    server = AMHttpServer("127.0.0.1", token="t", view_token="v",
                          handlers={r.name: (lambda _: (200, {"ok": True})) for r in protocol.ROUTES},
                          status=dict, task_logs=dict)
    threading.Timer(0.3, lambda: server.start(port)).start()
    try:
        assert am.kill("x") == {"ok": True}
    finally:
        server.shutdown()


def test_a_kept_alive_connection_the_server_closed_is_sent_again_once_without_counting():
    raw = RawServer([(reply(200, b'{"n": 1}'), True), (reply(200, b'{"n": 2}'), False)])
    try:
        am = AMClient(f"127.0.0.1:{raw.port}", "t", timeout=2, retries=0)
        assert am.status() == {"n": 1}
        time.sleep(0.1)  # the server has closed the first connection by now
        assert am.status() == {"n": 2}  # retries=0: the resend of a stale connection is not a retry
        assert len(raw.requests) == 2
    finally:
        raw.close()


@pytest.mark.parametrize("answer, expected", [
    (reply(204), None),
    (reply(200, b'{"cluster": {}}'), {"cluster": {}}),
])
def test_answers_reach_the_caller(answer, expected):
    raw = RawServer([(answer, True)])
    try:
        assert AMClient(f"127.0.0.1:{raw.port}", "t", timeout=2).status() == expected
    finally:
        raw.close()


@pytest.mark.parametrize("answer, status, says", [
    (reply(409, json.dumps({"error": "stale session", "action": "stop"}).encode()), 409, "stale session"),
    (reply(500, b"<html>proxy error</html>"), 500, "<html>proxy error</html>"),
    (reply(200, b"not json"), 200, "not JSON"),
])
def test_an_error_answer_is_an_am_error_and_is_not_sent_again(answer, status, says):
    raw = RawServer([(answer, True), (reply(200, b"{}"), True)])
    try:
        with pytest.raises(AMError) as e:
            AMClient(f"127.0.0.1:{raw.port}", "t", timeout=2, retries=3).status()
        assert e.value.status == status and says in str(e.value)
        assert len(raw.requests) == 1
    finally:
        raw.close()


def test_a_silent_am_times_out_without_a_retry():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the backlog), never answers
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(AMUnreachable):
            AMClient(f"127.0.0.1:{port}", "t", timeout=0.5, retries=3).status()
        assert time.monotonic() - started < 3  # one timeout, not four


def test_a_field_the_route_does_not_have_is_refused_before_sending():
    raw = RawServer([(reply(200, b"{}"), True)])
    try:
        with pytest.raises(TypeError, match="has no field"):
            AMClient(f"127.0.0.1:{raw.port}", "t")._call(protocol.KILL, reason="x", colour="red")
        assert raw.requests == []
    finally:
        raw.close()


def test_each_request_carries_the_token_and_a_post_its_json_body():
    raw = RawServer([(reply(200, b'{"ok": true}'), True)])
    try:
        AMClient(f"127.0.0.1:{raw.port}", "secret").result("worker:0", 2, 3, "boom")
        head, _, body = raw.requests[0].partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/result HTTP/1.1") and b"X-Tony-Token: secret" in head
        assert json.loads(body) == {"task_id": "worker:0", "session_id": 2, "exit_code": 3, "diagnostics": "boom"}
    finally:
        raw.close()
