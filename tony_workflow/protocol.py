"""The ApplicationMaster's HTTP/JSON protocol, defined once for both ends.

The AM's server (:mod:`tony_workflow.am.server`) dispatches on these routes and the client
(:class:`tony_workflow.rpc.AMClient`) builds its requests from them, so a route's path, method
or fields cannot drift apart between the two. A POST carries its fields as a JSON body, a GET as
query parameters (which arrive as text, hence each field's type and the default the AM assumes
when it is absent).

Each route declares its request as a frozen dataclass (its fields, their types, which are
required) and its reply as a typed dict. The AM checks every request against that declaration
before a handler sees it (:meth:`Route.decode`): a missing field, one of the wrong type or one the
route does not have is answered 400, naming the field, and the handler gets the typed object.

Every request carries the job's token in :data:`TOKEN_HEADER`. Executors and clients use the full
token; a route marked ``view`` also accepts the read-only view token, which a tracking page can
carry without handing out the executors' secret.

This module is imported by every executor: standard library only, nothing at import time.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, TypedDict
from urllib.parse import parse_qs

__all__ = [
    "ATTEMPT_ENV",
    "BOARD_STORE_ENV",
    "CLUSTER_SPEC",
    "COUNTED_ENV",
    "ENVIRONMENT_ENV",
    "EXCEEDED_MEMORY_EXIT",
    "HEARTBEAT",
    "HOROVOD_DRIVER",
    "KILL",
    "NOTEBOOK_STORE_ENV",
    "OWNER_ENV",
    "RDZV_GROUP",
    "RDZV_ROUND",
    "RDZV_SET_STATE",
    "RDZV_STATE",
    "RDZV_STORE",
    "RECORD",
    "REGISTER",
    "RESOURCES_ENV",
    "RESULT",
    "RESULT_FILE",
    "ROUTES",
    "RUNTIME_ENV",
    "STARTED",
    "STATUS",
    "TENSORBOARD",
    "TOKEN_HEADER",
    "Ack",
    "BadRequest",
    "ClusterSpecQuery",
    "ClusterSpecReply",
    "Field",
    "Go",
    "GroupReply",
    "GroupRequest",
    "Heartbeat",
    "Kill",
    "NoFields",
    "Notebook",
    "Problem",
    "Registration",
    "RendezvousRound",
    "RendezvousServer",
    "RendezvousState",
    "Result",
    "Route",
    "SetState",
    "Started",
    "StateQuery",
    "Stop",
    "StoreOp",
    "StoreReply",
    "TensorBoard",
    "group_token",
    "notebook_token",
    "route_for",
]

TOKEN_HEADER = "X-Tony-Token"

# ---------------------------------------------------------------- beside the wire
#: What an executor writes in its container when its user process ended by itself, before it tells
#: the AM: an attempt that dies before hearing it finds the outcome there.
RESULT_FILE = "result.json"
#: The attempt number the supervisor gives each AM it starts (1 first).
ATTEMPT_ENV = "TONY_AM_ATTEMPT"
#: How many earlier attempts count against tony.am.max-attempts (one whose container the cluster
#: took back does not).
COUNTED_ENV = "TONY_AM_COUNTED"
#: ``pid:start time`` of the process that holds the job's resources across attempts.
OWNER_ENV = "TONY_AM_OWNER"
#: A container's variables for what its job shipped (YARN, where nodes have nothing installed):
#: the runtime's directory (``tony/`` holds this package, ``lib/`` what it imports), and the job's
#: packed environment (a site-packages directory). A task's own processes get the environment and
#: the runtime's ``tony/`` on their path, never its ``lib/``.
RUNTIME_ENV, ENVIRONMENT_ENV = "TONY_RUNTIME", "TONY_ENVIRONMENT"
#: Where a shipped distribution's data files (those its wheel puts under the environment's
#: ``share/``: JupyterLab's pages, Jupyter's extensions) are, inside its site directory:
#: ``<site>/_tony_data/share/...``.
SHIPPED_DATA_DIR = "_tony_data"
#: The exit status a cluster gives a container it killed for using more memory than it was given
#: (YARN's ContainerExitStatus.KILLED_EXCEEDED_PMEM).
EXCEEDED_MEMORY_EXIT = -104
#: The names of the resources YARN gave a container (comma-separated; see task/workdir.py).
RESOURCES_ENV = "TONY_RESOURCES"
#: Where a chief whose TensorBoard directory is its own (YARN: no directory is shared across nodes)
#: copies its event files as it ends, for the job's history record (a store URI).
BOARD_STORE_ENV = "TONY_BOARD_STORE"
#: Where a task whose program is a notebook (``executes: train.ipynb``) keeps its executed copy
#: as it ends, in a folder named after the task (``worker-0/train.executed.ipynb``), for the job's
#: history record: where the tasks share no directory (YARN), the folder ``notebooks`` beside the
#: TensorBoard store.
NOTEBOOK_STORE_ENV = "TONY_NOTEBOOK_STORE"


# ---------------------------------------------------------------- requests
@dataclass(frozen=True)
class Registration:
    """An executor's address, once its port is reserved."""

    task_id: str
    session_id: int
    host: str
    port: int
    pid: int | None = None
    container_id: str | None = None


@dataclass(frozen=True)
class ClusterSpecQuery:
    """Long-poll for the cluster spec: 200 once every task of the session registered, 204 until
    then, after ``wait`` seconds at most."""

    task_id: str = ""
    session_id: int = -1
    wait: float = 0.0


@dataclass(frozen=True)
class Heartbeat:
    """``metrics``: the task's resource figures; ``progress``: what user code last reported (with
    its age in seconds); ``store``: ``{"error": why}`` while the checkpoint store fails,
    ``{"ok": true}`` once a sync succeeded."""

    task_id: str
    session_id: int
    metrics: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None
    store: dict[str, Any] | None = None
    #: the container whose executor beats (see :class:`Result`): an earlier one's is told to stop
    container_id: str | None = None


@dataclass(frozen=True)
class Started:
    """The user's process runs; ``restored`` says which checkpoint it was given, ``at`` when it
    was started, by the task's host's clock (the moment before it was spawned)."""

    task_id: str
    session_id: int
    pid: int | None = None
    restored: dict[str, Any] | None = None
    container_id: str | None = None
    at: float | None = None


@dataclass(frozen=True)
class Result:
    task_id: str
    session_id: int
    exit_code: int
    diagnostics: str = ""
    #: the container whose executor reports: a task's earlier container (replaced while its
    #: executor still ran) is not the task's now
    container_id: str | None = None
    #: when the process was seen ended, by the task's host's clock
    at: float | None = None


@dataclass(frozen=True)
class RendezvousServer:
    """A Horovod job's driver task found where its rendezvous server listens (the port its
    driver wrote) and the server's plan of slots (Horovod's host assignments)."""

    task_id: str
    session_id: int
    host: str
    port: int
    slots: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class TensorBoard:
    url: str


@dataclass(frozen=True)
class Notebook:
    """Where a notebook job's JupyterLab answers (its base URL, no token in it)."""

    url: str


@dataclass(frozen=True)
class Kill:
    reason: str | None = None


# The rendezvous of an elastic job's agents (torch's dynamic rendezvous, whose state the AM keeps):
# ``run_id`` names the session's rendezvous, and the AM answers only its current session's. Bytes
# travel as base64 text.
@dataclass(frozen=True)
class StateQuery:
    run_id: str


@dataclass(frozen=True)
class SetState:
    """Compare-and-set of the rendezvous state: written only if ``token`` is the current one (None:
    only if there is no state yet)."""

    run_id: str
    state: str
    token: int | None = None


@dataclass(frozen=True)
class StoreOp:
    """One operation on the rendezvous's key-value store (torch's ``Store``): ``op`` is set, get,
    add, compare_set, check, delete or count; ``get`` and ``check`` wait up to ``wait`` seconds for
    every key (30 at most)."""

    run_id: str
    op: str
    keys: list[str] = dataclasses.field(default_factory=list)
    values: list[str] = dataclasses.field(default_factory=list)
    amount: int = 0
    wait: float = 0.0


@dataclass(frozen=True)
class RendezvousRound:
    """An agent joined round ``round`` of the rendezvous as node ``rank`` of ``world_size``;
    ``node`` is its node's name in torch's rendezvous (``addr_pid_localid``)."""

    task_id: str
    session_id: int
    run_id: str
    round: int
    rank: int
    world_size: int
    node: str = ""


@dataclass(frozen=True)
class GroupRequest:
    """A trainer regrouping in place (``tony.elastic.regroup=in-place``): ``op`` ``join`` asks for
    its place in the first generation after ``generation`` (waiting up to ``wait`` seconds);
    ``watch`` waits up to ``wait`` seconds for generation ``generation`` to need re-forming;
    ``suspect`` says a collective of ``generation`` failed (the AM looks for a lost member at
    once). ``node`` names the trainer (task id, host and process)."""

    task_id: str
    session_id: int
    run_id: str
    node: str
    op: str = "join"
    generation: int = -1
    wait: float = 0.0


@dataclass(frozen=True)
class NoFields:
    """A route that takes nothing."""


# ---------------------------------------------------------------- replies
class Ack(TypedDict):
    ok: bool


class Go(TypedDict):
    """A heartbeat's answer: carry on."""

    action: Literal["continue"]


class Stop(TypedDict):
    """The request comes from a task the AM no longer runs (an older session, a replaced
    container): its executor stops."""

    error: str
    action: Literal["stop"]


class Problem(TypedDict):
    """A request refused (a malformed body, a bad value)."""

    error: str


class RendezvousState(TypedDict):
    """The rendezvous state and its token (state None: none yet); after a set, whether it was
    written; ``dead``: the nodes whose task the AM knows is gone (torch's names)."""

    state: str | None
    token: int
    written: bool
    dead: list[str]


class StoreReply(TypedDict):
    """A store operation's answer: the values asked for (None for a key absent after the wait), or
    the counter's new value, or the number of keys; ``ok``: every key was there; ``dead``: the
    nodes known to be gone (a get that waits ends early when one more is)."""

    values: list[str | None]
    count: int
    ok: bool
    dead: list[str]


class GroupReply(TypedDict, total=False):
    """``join``: ``formed`` (False: none yet, ask again) and the trainer's place: ``generation``,
    ``rank``, ``world_size``, ``members`` (nodes in rank order). ``watch``: ``changed``, the newest
    ``generation``, newcomers ``joining``, the generation's members named ``dead``."""

    formed: bool
    generation: int
    rank: int
    world_size: int
    members: list[str]
    changed: bool
    joining: list[str]
    dead: list[str]


class ClusterSpecReply(TypedDict):
    cluster: dict[str, list[str]]
    session_id: int
    chief: list[Any]


# ---------------------------------------------------------------- routes
class BadRequest(ValueError):
    """A request that does not match its route's declaration; ``field`` names the culprit (None:
    the body as a whole)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


_KINDS = {str: "text", int: "an integer", float: "a number", bool: "true or false", dict: "a JSON object",
          list: "a JSON list"}


@dataclass(frozen=True)
class Field:
    name: str
    type: type = str
    #: what the AM assumes when it is absent (required fields have none)
    default: Any = None
    required: bool = False
    nullable: bool = True

    def check(self, value: Any) -> Any:
        """``value`` as this field's type; raises BadRequest when it is not one."""
        if value is None:
            if self.nullable:
                return None
        elif self.type is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif self.type is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif isinstance(value, self.type):
            return value
        raise BadRequest(f"field {self.name!r} must be {_KINDS.get(self.type, self.type.__name__)}, "
                         f"got {_shown(value)}", self.name)

    def parse(self, text: str) -> Any:
        """A query parameter's text as this field's type."""
        try:
            return self.type(text)
        except ValueError:
            raise BadRequest(f"field {self.name!r} must be {_KINDS.get(self.type, self.type.__name__)}, "
                             f"got {_shown(text)}", self.name) from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fields(request: type) -> tuple[Field, ...]:
    hints = typing.get_type_hints(request)
    out = []
    for f in dataclasses.fields(request):
        tp, nullable = hints[f.name], False
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            nullable, tp = len(args) < len(typing.get_args(tp)), args[0]
        base = typing.get_origin(tp) or tp
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(Field(f.name, base, None if required else f.default, required, nullable))
    return tuple(out)


@dataclass(frozen=True)
class Route:
    name: str
    method: str               # "GET" or "POST"
    path: str
    #: the request's declaration (a frozen dataclass) and the reply's (a typed dict, or several)
    request: type = NoFields
    reply: Any = dict
    #: also answers the read-only view token
    view: bool = False
    #: also answers the group token an in-place elastic job's trainers hold (:func:`group_token`)
    group: bool = False

    @cached_property
    def fields(self) -> tuple[Field, ...]:
        return _fields(self.request)

    @cached_property
    def _by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def request_fields(self, **values: Any) -> dict[str, Any]:
        """The request's fields (the JSON body of a POST, the query of a GET). A name the route does
        not define is refused here, on the sending side, instead of being refused by the AM."""
        unknown = sorted(set(values) - set(self.field_names))
        if unknown:
            raise TypeError(f"{self.method} {self.path} has no field(s) {', '.join(unknown)}")
        return values

    def decode(self, body: Any) -> Any:
        """A POST's JSON body as the route's request object. Raises BadRequest naming the field
        that is missing, of the wrong type, or not the route's."""
        if not isinstance(body, Mapping):
            raise BadRequest(f"{self.method} {self.path} takes a JSON object, got {type(body).__name__}")
        by_name = self._by_name
        unknown = sorted(k for k in body if k not in by_name)
        if unknown:
            raise BadRequest(f"{self.method} {self.path} has no field {unknown[0]!r} "
                             f"(it takes {', '.join(self.field_names) or 'none'})", unknown[0])
        values = {}
        for f in self.fields:
            if f.name in body:
                values[f.name] = f.check(body[f.name])
            elif f.required:
                raise BadRequest(f"field {f.name!r} is missing ({self.method} {self.path} needs "
                                 f"{', '.join(g.name for g in self.fields if g.required)})", f.name)
        return self.request(**values)

    def decode_query(self, query: str) -> Any:
        """A GET's query string as the route's request object, with defaults for absent fields."""
        given = {k: v[0] for k, v in parse_qs(query).items()}
        return self.decode({k: self._by_name[k].parse(v) if k in self._by_name else v for k, v in given.items()})


REGISTER = Route("register", "POST", "/v1/register", Registration, Ack | Stop)
CLUSTER_SPEC = Route("cluster_spec", "GET", "/v1/cluster-spec", ClusterSpecQuery, ClusterSpecReply | Stop)
HEARTBEAT = Route("heartbeat", "POST", "/v1/heartbeat", Heartbeat, Go | Stop)
STARTED = Route("started", "POST", "/v1/started", Started, Ack | Stop)
RESULT = Route("result", "POST", "/v1/result", Result, Ack | Stop)
TENSORBOARD = Route("tensorboard", "POST", "/v1/tensorboard", TensorBoard, Ack | Problem)
NOTEBOOK = Route("notebook", "POST", "/v1/notebook", Notebook, Ack | Problem)
# A Horovod job's driver: its rendezvous server's address, which the workers' cluster spec waits for.
HOROVOD_DRIVER = Route("horovod_driver", "POST", "/v1/horovod-driver", RendezvousServer, Ack | Stop)
# The job's status (status.JobStatus as a dict) and its record as the history keeps it, as it
# stands: timeline, tasks, figures over time.
STATUS = Route("status", "GET", "/v1/status", view=True)
RECORD = Route("record", "GET", "/v1/record", view=True)
KILL = Route("kill", "POST", "/v1/kill", Kill, Ack)
# An elastic job's rendezvous (the executors' token only).
RDZV_STATE = Route("rdzv_state", "GET", "/v1/rendezvous/state", StateQuery, RendezvousState | Stop)
RDZV_SET_STATE = Route("rdzv_set_state", "POST", "/v1/rendezvous/state", SetState, RendezvousState | Stop)
RDZV_STORE = Route("rdzv_store", "POST", "/v1/rendezvous/store", StoreOp, StoreReply | Problem | Stop, group=True)
RDZV_ROUND = Route("rdzv_round", "POST", "/v1/rendezvous/round", RendezvousRound, Ack | Stop)
# An in-place elastic job's generations: its trainers' own route, with the store's.
RDZV_GROUP = Route("rdzv_group", "POST", "/v1/rendezvous/group", GroupRequest, GroupReply | Problem | Stop,
                   group=True)

ROUTES: tuple[Route, ...] = (REGISTER, CLUSTER_SPEC, HEARTBEAT, STARTED, RESULT, TENSORBOARD, NOTEBOOK, HOROVOD_DRIVER,
                             STATUS, RECORD, KILL, RDZV_STATE, RDZV_SET_STATE, RDZV_STORE, RDZV_ROUND, RDZV_GROUP)


def group_token(token: str) -> str:
    """The token an in-place elastic job's trainers hold: derived from the job's, it opens only
    the routes marked ``group`` (the generations and the store of the job's open rendezvous), so
    user code never holds the executors' secret."""
    return hmac.new(token.encode(), b"tony-elastic-group", hashlib.sha256).hexdigest()


def notebook_token(token: str) -> str:
    """The token a notebook job's JupyterLab asks of every request: derived from the job's, so that
    only what holds the job's secret (its executor, its owner's client, a history server that may
    see the job) reaches it, and the view token never does."""
    return hmac.new(token.encode(), b"tony-notebook", hashlib.sha256).hexdigest()

_BY_REQUEST = {(r.method, r.path): r for r in ROUTES}

#: A route's handler: its request object in, (HTTP status, reply or None) out.
Handler = Callable[[Any], tuple[int, Any]]


def route_for(method: str, path: str) -> Route | None:
    return _BY_REQUEST.get((method, path))
