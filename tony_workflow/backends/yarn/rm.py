"""The ResourceManager's REST API: what a client needs of YARN without starting a JVM.

Following a job needs the application's state, its final status and diagnostics, and the address
of its skein ApplicationMaster (whose key-value store holds the TonY AM's address and tokens); the
ResourceManager's ``/ws/v1/cluster/apps/{id}`` answers all of that. Listing, the cluster's nodes,
an application's lifetime and priority, and a kill are REST calls too. skein's Java driver is then
needed only to submit, so a process that follows many jobs (an Airflow triggerer) starts no JVM
for them, and a process that also submits starts one (:func:`tony_workflow.backends.yarn.shared_driver`).

One :class:`ResourceManager` per web address and login per process: its HTTP session keeps
connections alive across every job it follows, and retries connection errors and 5xx answers with
backoff. Write calls name the caller with ``user.name``, which a ResourceManager with Hadoop's simple
HTTP authentication takes as the user. A Kerberized ResourceManager asks for SPNEGO instead (and
ignores ``user.name``): given a :class:`~tony_workflow.kerberos.Login`, the session negotiates with
its ticket, still without a JVM, and a refusal is a :class:`~tony_workflow.kerberos.LoginError`
that says how to log in.
"""
from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from ... import hadoop
from ...errors import ClusterError
from ...kerberos import Login, LoginError, is_secure, read_token_file
from ...process import user_name

__all__ = ["AppReport", "RMError", "ResourceManager", "amounts", "container_rm", "http_session", "node_totals", "outstanding_asks",
           "resource_manager"]

_TIMEOUT = 30


def amounts(resource: dict[str, Any] | None) -> tuple[int, int, int]:
    """(memory MB, vcores, GPUs) of one of the ResourceManager's resource objects (``{"memory",
    "vCores", "resourceInformations"}``)."""
    resource = resource or {}
    infos = (resource.get("resourceInformations") or {}).get("resourceInformation") or []
    gpus = next((int(i.get("value", 0)) for i in infos if i.get("name") == "yarn.io/gpu"), 0)
    return int(resource.get("memory", 0)), int(resource.get("vCores", 0)), gpus


def node_totals(node: dict[str, Any]) -> tuple[int, int, int]:
    """(memory MB, vcores, GPUs) a NodeManager offers in all, from its entry in the
    ResourceManager's node list (``/ws/v1/cluster/nodes``)."""
    gpus = amounts(node.get("totalResource"))[2]
    return (int(node.get("usedMemoryMB", 0)) + int(node.get("availMemoryMB", 0)),
            int(node.get("usedVirtualCores", 0)) + int(node.get("availableVirtualCores", 0)), gpus)


class RMError(ClusterError):
    """The ResourceManager refused a request (``status``: its HTTP status), or could not be
    reached (``status`` None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AppReport:
    """What the ResourceManager says of an application. ``state`` is YARN's (NEW, NEW_SAVING,
    SUBMITTED, ACCEPTED, RUNNING, FINISHED, FAILED, KILLED), ``final_status`` what its AM
    reported (UNDEFINED while it runs); times are epoch seconds, None when not reached."""

    id: str
    name: str
    user: str
    queue: str
    state: str
    final_status: str
    diagnostics: str
    started_at: float | None
    finished_at: float | None
    am_rpc_address: str | None
    priority: int
    tags: frozenset[str] = field(default_factory=frozenset)
    #: YARN's log aggregation of a finished application: NOT_START, RUNNING, SUCCEEDED, FAILED,
    #: TIME_OUT, DISABLED, ... (empty when the ResourceManager does not say)
    log_aggregation: str = ""
    #: its live containers, skein's master included; None when the ResourceManager does not show
    #: them (before its master runs, or to a user without the right to view the application)
    running_containers: int | None = None
    #: containers it has asked for and not been given yet, as the ResourceManager holds its asks
    #: (``resourceRequests``, each priority's request for any node): 0 when it holds none
    asks: int = 0

    @classmethod
    def from_json(cls, app: dict[str, Any]) -> AppReport:
        def seconds(key: str) -> float | None:
            ms = int(app.get(key) or 0)
            return ms / 1000.0 if ms > 0 else None

        address = app.get("amRPCAddress") or ""
        tags = frozenset(t for t in str(app.get("applicationTags") or "").split(",") if t)
        return cls(id=app["id"], name=app.get("name", ""), user=app.get("user", ""), queue=app.get("queue", ""),
                   state=app.get("state", ""), final_status=app.get("finalStatus", ""),
                   diagnostics=app.get("diagnostics") or "", started_at=seconds("startedTime"),
                   finished_at=seconds("finishedTime"),
                   am_rpc_address=address if address and not address.startswith("N/A") else None,
                   priority=int(app.get("priority") or 0), tags=tags,
                   log_aggregation=app.get("logAggregationStatus") or "",
                   running_containers=running if (running := int(app.get("runningContainers", -1))) >= 0 else None,
                   asks=outstanding_asks(app.get("resourceRequests")))


def outstanding_asks(requests_: Any) -> int:
    """How many containers an application's asks still want, from the ResourceManager's
    ``resourceRequests`` (one entry per priority and place; those for any node, ``*``, count each
    container once)."""
    if isinstance(requests_, dict):  # some versions wrap the list: {"resourceRequest": [...]}
        requests_ = requests_.get("resourceRequest")
    return sum(int(r.get("numContainers") or 0) for r in requests_ or []
               if isinstance(r, dict) and r.get("resourceName", "*") == "*")


class ResourceManager:
    """The REST API of the ResourceManager at ``url`` (``http://rm:8088``), as ``login`` on a
    Kerberized cluster (LoginError at once when it cannot log in)."""

    def __init__(self, url: str, login: Login | None = None):
        self.url = url.rstrip("/")
        self.login = login
        self.session = requests.Session()
        if login is not None:
            self.session.auth = login.http_auth()
        retry = Retry(total=4, connect=4, read=2, backoff_factor=0.3, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=None, raise_on_status=False)
        adapter = HTTPAdapter(max_retries=retry, pool_maxsize=8)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["Accept"] = "application/json"
        #: bytes of the last answer read, for callers that keep within a budget
        self.last_bytes = 0

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            r = self.session.request(method, f"{self.url}/ws/v1/cluster{path}", timeout=_TIMEOUT, **kwargs)
        except requests.RequestException as e:
            raise RMError(f"the ResourceManager at {self.url} did not answer: {e}") from e
        if r.status_code == 401:
            raise self._refused()
        return r

    def _refused(self) -> LoginError:
        """Why the ResourceManager turned this client away as unauthenticated."""
        where = f"the ResourceManager at {self.url}"
        if self.login is not None:
            return self.login.refused(where)
        return LoginError(f"{where} asks for a Kerberos login (SPNEGO), but the Hadoop configuration does not say "
                          "hadoop.security.authentication=kerberos: point HADOOP_CONF_DIR at the cluster's own "
                          "configuration")

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        r = self._call(method, path, **kwargs)
        self.last_bytes = len(r.content)
        if r.status_code >= 400:
            raise RMError(f"the ResourceManager at {self.url} refused {method} {path}: HTTP {r.status_code} "
                          f"{_message(r)}", r.status_code)
        return r.json() if r.content else {}

    # ------------------------------------------------------------------ reading
    def app(self, app_id: str) -> AppReport | None:
        """The application's report; None when the ResourceManager does not know it."""
        r = self._call("GET", f"/apps/{app_id}")
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise RMError(f"the ResourceManager at {self.url} refused GET /apps/{app_id}: HTTP {r.status_code} "
                          f"{_message(r)}", r.status_code)
        return AppReport.from_json(r.json()["app"])

    def apps(self, *, tags: tuple[str, ...] = (), states: tuple[str, ...] = (), queue: str | None = None,
             brief: bool = False) -> list[AppReport]:
        """Applications with any of ``tags`` in any of ``states`` (all when empty), of ``queue``
        (any when None), oldest first. ``brief`` leaves out what the ResourceManager can leave out
        (each application's requests, timeouts and resource figures): a third of its size."""
        params = {}
        if tags:
            params["applicationTags"] = ",".join(tags)
        if states:
            params["states"] = ",".join(states)
        if queue:
            params["queue"] = queue
        if brief:
            params["deSelects"] = "resourceRequests,timeouts,resourceInfo,appNodeLabelExpression,amNodeLabelExpression"
        apps = (self._json("GET", "/apps", params=params).get("apps") or {}).get("app") or []
        return sorted((AppReport.from_json(a) for a in apps), key=lambda a: a.id)

    def nodes(self, states: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The NodeManagers as the ResourceManager lists them (``/ws/v1/cluster/nodes``), those in
        ``states`` only when given."""
        params = {"states": ",".join(states)} if states else {}
        return (self._json("GET", "/nodes", params=params).get("nodes") or {}).get("node") or []

    def queue(self, name: str) -> dict[str, Any] | None:
        """The scheduler's entry for the leaf queue ``name`` (``root.default`` or ``default``), from
        ``/ws/v1/cluster/scheduler``; None when the scheduler has no such queue or does not list
        queues (the FIFO scheduler)."""
        info = (self._json("GET", "/scheduler").get("scheduler") or {}).get("schedulerInfo") or {}
        todo = [info]
        while todo:
            q = todo.pop()
            children = (q.get("queues") or {}).get("queue") or []
            if not children and name in (q.get("queuePath"), q.get("queueName")):
                return q
            todo.extend(children)
        return None

    # ------------------------------------------------------------------ changing
    def _put(self, app_id: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("PUT", f"/apps/{app_id}/{what}", json=body, params={"user.name": user_name()})

    def set_lifetime(self, app_id: str, seconds: float) -> str:
        """Ends the application ``seconds`` from now, whatever its AM does; returns the expiry time."""
        at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
        expiry = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}+0000"
        reply = self._put(app_id, "timeout", {"timeout": {"type": "LIFETIME", "expiryTime": expiry}})
        return str((reply.get("timeout") or {}).get("expiryTime", expiry))

    def set_priority(self, app_id: str, priority: int) -> int:
        """Asks for ``priority``; returns what the ResourceManager granted (the cluster caps it at
        ``yarn.cluster.max-application-priority``, and at the queue's own limit)."""
        return int(self._put(app_id, "priority", {"priority": priority}).get("priority", 0))

    def kill(self, app_id: str) -> None:
        self._put(app_id, "state", {"state": "KILLED"})


def _message(r: requests.Response) -> str:
    try:
        exc = r.json().get("RemoteException") or {}
        return exc.get("message") or r.text[:300]
    except ValueError:
        return r.text[:300]


_RMS: dict[tuple[str, Login | None], ResourceManager] = {}
_RMS_LOCK = threading.Lock()


def http_session(login: Login | None = None) -> requests.Session:
    """A requests session of its own for a server of the cluster (a NodeManager's REST API): as
    ``login`` with SPNEGO on a Kerberized cluster."""
    session = requests.Session()
    if login is not None:
        session.auth = login.http_auth()
    return session


def resource_manager(url: str, login: Login | None = None) -> ResourceManager:
    """The process's one :class:`ResourceManager` for ``url`` and ``login`` (None: a cluster
    without Kerberos)."""
    with _RMS_LOCK:
        rm = _RMS.get((url, login))
        if rm is None:
            rm = _RMS[(url, login)] = ResourceManager(url, login)
        return rm


#: The kind of the ResourceManager delegation token in a container's token file, and the header
#: the ResourceManager's web endpoints take it in.
RM_TOKEN_KIND = "RM_DELEGATION_TOKEN"
_RM_TOKEN_HEADER = "Hadoop-YARN-RM-Delegation-Token"


def container_rm(conf_dir: str | None = None) -> ResourceManager | None:
    """The REST API as a YARN container reaches it: the ResourceManager of the configuration the
    job was submitted with (``HADOOP_CONF_DIR``), and on a Kerberized cluster the ResourceManager
    delegation token YARN gave the container, since it has no ticket. None when the configuration
    names no web address, or the cluster is secure and the container holds no such token."""
    import os

    conf = hadoop.read_conf(conf_dir or os.environ.get("HADOOP_CONF_DIR"))
    url = hadoop.rm_web_url(conf)
    if not url:
        return None
    rm = ResourceManager(url)
    if is_secure(conf):
        path = os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
        tokens = [t for t in read_token_file(path) if t.kind == RM_TOKEN_KIND] if path else []
        if not tokens:
            return None
        rm.session.headers[_RM_TOKEN_HEADER] = tokens[0].url_string()
    return rm
