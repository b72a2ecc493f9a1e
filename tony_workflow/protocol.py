"""The ApplicationMaster's HTTP/JSON protocol, defined once for both ends.

The AM's server (:mod:`tony_workflow.am_http`) dispatches on these routes and the client
(:class:`tony_workflow.rpc.AMClient`) builds its requests from them, so a route's path, method
or fields cannot drift apart between the two. A POST carries its fields as a JSON body, a GET as
query parameters (which arrive as text, hence each field's type and the default the AM assumes
when it is absent).

Every request carries the job's token in :data:`TOKEN_HEADER`. Executors and clients use the full
token; a route marked ``view`` also accepts the read-only view token, which a tracking page can
carry without handing out the executors' secret.

This module is imported by every executor: standard library only, nothing at import time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "CLUSTER_SPEC",
    "HEARTBEAT",
    "KILL",
    "RECORD",
    "REGISTER",
    "RESULT",
    "ROUTES",
    "STARTED",
    "STATUS",
    "TENSORBOARD",
    "TOKEN_HEADER",
    "Field",
    "Route",
    "route_for",
]

TOKEN_HEADER = "X-Tony-Token"


@dataclass(frozen=True)
class Field:
    name: str
    type: type = str
    #: what the AM assumes when a query parameter is absent
    default: Any = None


@dataclass(frozen=True)
class Route:
    name: str
    method: str               # "GET" or "POST"
    path: str
    fields: tuple[Field, ...] = ()
    #: also answers the read-only view token
    view: bool = False

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def request(self, **values: Any) -> dict[str, Any]:
        """The request's fields (the JSON body of a POST, the query of a GET). A name the route does
        not define is refused here, on the sending side, instead of being ignored by the AM."""
        unknown = sorted(set(values) - set(self.field_names))
        if unknown:
            raise TypeError(f"{self.method} {self.path} has no field(s) {', '.join(unknown)}")
        return values

    def decode_query(self, query: str) -> dict[str, Any]:
        """A GET's fields from its query string, typed, with defaults for absent ones. Raises
        ValueError for a value of the wrong type."""
        given = {k: v[0] for k, v in parse_qs(query).items()}
        return {f.name: f.type(given[f.name]) if f.name in given else f.default for f in self.fields}


REGISTER = Route("register", "POST", "/v1/register", (
    Field("task_id"), Field("session_id", int), Field("host"), Field("port", int),
    Field("pid", int), Field("container_id")))
# Long-poll: 200 with the cluster once every task of the session registered, 204 until then.
CLUSTER_SPEC = Route("cluster_spec", "GET", "/v1/cluster-spec", (
    Field("task_id", str, ""), Field("session_id", int, -1), Field("wait", float, 0.0)))
# metrics: the task's resource figures; progress: what user code last reported (with its age in
# seconds); store: {"error": why} while the checkpoint store fails, {"ok": true} once a sync succeeded.
HEARTBEAT = Route("heartbeat", "POST", "/v1/heartbeat", (
    Field("task_id"), Field("session_id", int), Field("metrics", dict), Field("progress", dict),
    Field("store", dict)))
STARTED = Route("started", "POST", "/v1/started", (
    Field("task_id"), Field("session_id", int), Field("pid", int), Field("restored", dict)))
RESULT = Route("result", "POST", "/v1/result", (
    Field("task_id"), Field("session_id", int), Field("exit_code", int), Field("diagnostics")))
TENSORBOARD = Route("tensorboard", "POST", "/v1/tensorboard", (Field("url"),))
STATUS = Route("status", "GET", "/v1/status", view=True)
# The job's record as the history keeps it, as it stands: timeline, tasks, figures over time.
RECORD = Route("record", "GET", "/v1/record", view=True)
KILL = Route("kill", "POST", "/v1/kill", (Field("reason"),))

ROUTES: tuple[Route, ...] = (REGISTER, CLUSTER_SPEC, HEARTBEAT, STARTED, RESULT, TENSORBOARD, STATUS, RECORD, KILL)
_BY_REQUEST = {(r.method, r.path): r for r in ROUTES}


def route_for(method: str, path: str) -> Route | None:
    return _BY_REQUEST.get((method, path))
