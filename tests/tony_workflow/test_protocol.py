"""The AM's protocol (:mod:`tony_workflow.protocol`): each route's fields come from its request's
declaration, and a request is decoded into that declaration or refused naming the field."""
from __future__ import annotations

import pytest

from tony_workflow import protocol
from tony_workflow.protocol import BadRequest, Registration


def test_a_routes_fields_are_its_request_declaration():
    fields = {f.name: (f.type, f.required, f.nullable) for f in protocol.REGISTER.fields}
    assert fields == {"task_id": (str, True, False), "session_id": (int, True, False), "host": (str, True, False),
                      "port": (int, True, False), "pid": (int, False, True), "container_id": (str, False, True)}
    assert {f.name: f.type for f in protocol.HEARTBEAT.fields}["metrics"] is dict
    assert protocol.STATUS.fields == () and protocol.STATUS.view and not protocol.KILL.view


def test_every_route_is_found_by_its_method_and_path():
    for route in protocol.ROUTES:
        assert protocol.route_for(route.method, route.path) is route
    assert protocol.route_for("GET", "/v1/register") is None


def test_a_body_is_decoded_into_the_declaration_with_its_defaults():
    req = protocol.REGISTER.decode({"task_id": "worker:0", "session_id": 2, "host": "h", "port": 80})
    assert req == Registration("worker:0", 2, "h", 80, None, None)
    assert protocol.RESULT.decode({"task_id": "w:0", "session_id": 0, "exit_code": 1}).diagnostics == ""
    assert protocol.CLUSTER_SPEC.decode_query("task_id=w:0&session_id=1&wait=2.5").wait == 2.5
    assert protocol.CLUSTER_SPEC.decode_query("").session_id == -1
    assert protocol.KILL.decode({}).reason is None


@pytest.mark.parametrize("route, body, field", [
    (protocol.RESULT, {"task_id": "w:0", "session_id": 0}, "exit_code"),
    (protocol.RESULT, {"task_id": "w:0", "session_id": 0, "exit_code": 1.5}, "exit_code"),
    (protocol.HEARTBEAT, {"task_id": "w:0", "session_id": 0, "metrics": [1]}, "metrics"),
    (protocol.TENSORBOARD, {"url": None}, "url"),
    (protocol.KILL, {"reason": "x", "force": True}, "force"),
    (protocol.STATUS, {"verbose": 1}, "verbose"),
])
def test_a_body_that_does_not_match_is_refused_naming_the_field(route, body, field):
    with pytest.raises(BadRequest) as e:
        route.decode(body)
    assert e.value.field == field and repr(field) in str(e.value)


def test_a_number_where_a_float_is_declared_is_taken_and_a_boolean_is_no_integer():
    assert protocol.CLUSTER_SPEC.decode({"wait": 3}).wait == 3.0
    with pytest.raises(BadRequest, match="must be an integer"):
        protocol.STARTED.decode({"task_id": "w:0", "session_id": False})


def test_the_sending_side_refuses_a_field_the_route_does_not_have():
    assert protocol.KILL.request_fields(reason="x") == {"reason": "x"}
    with pytest.raises(TypeError, match="POST /v1/kill has no field"):
        protocol.KILL.request_fields(reason="x", force=True)
