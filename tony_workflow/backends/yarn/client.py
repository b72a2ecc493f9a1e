"""YARN through skein: the client's side (the AM's is :mod:`.am`).

The application is a skein application whose ``tony-am`` service runs this package's
ApplicationMaster. Every task type is a service with no instances of its own (a spread type also
has one per node it may use, :mod:`.spread`); the AM adds one container per task through
skein's ApplicationClient, with the task's identity in the container's environment, and kills
them the same way. The AM's address and token travel through skein's
key-value store, TensorBoard becomes a page of skein's web UI (so the application's tracking URL,
through the ResourceManager proxy, leads to it), and the final status and diagnostics are set on
the YARN application at shutdown. Once the AM is gone, status comes from the ResourceManager.

Only submission needs skein's Java driver, and a process starts one driver per cluster and
login (:mod:`tony_workflow.backends.yarn.driver`), however many backends, hooks or triggers it makes.
Following a job needs no JVM: the ResourceManager's REST API (:mod:`tony_workflow.backends.yarn.rm`)
gives the application's state and its skein AM's address, and the key-value store is read from that
AM directly over gRPC.

On a Kerberized cluster (``hadoop.security.authentication=kerberos``) the client logs in as the
job's ``tony.keytab.user`` with its ``tony.keytab.location``, else as the backend's ``principal``
and ``keytab`` (an Airflow connection's), else with the ticket ``kinit`` left; the driver submits as
that login, and the REST API and WebHDFS are reached with SPNEGO. A missing or wrong login is a
:class:`~tony_workflow.kerberos.LoginError` before anything is submitted. Containers reach HDFS
with the delegation token YARN gives them (see :mod:`tony_workflow.storage`); no keytab is shipped.

The cluster's addresses come from a Hadoop conf directory (``hadoop_conf_dir``, else
``HADOOP_CONF_DIR``) or are given directly (``rm_address``, ``rm_web_address``, ``webhdfs``: an
Airflow connection's fields); given addresses win, and are written with the directory's files into a
private conf directory (:mod:`tony_workflow.hadoop`), since skein's Java driver can only read them
from files. skein needs a ``yarn`` command on PATH that answers ``yarn classpath --glob`` with
``HADOOP_CONF_DIR`` first, as Hadoop's own does (``tony minicluster env`` prints a suitable
environment).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ... import hadoop
from ...context import application_tags, from_tags
from ...errors import ConfigError, UnknownApplication
from ...kerberos import KEYTAB_LOCATION, KEYTAB_USER, Login, LoginError, is_secure
from ...spec import JobSpec, SpecError
from ...spec.site import tony_home
from ...status import JobState, JobStatus
from ...storage import open_storage, qualified
from .. import history_server
from ..base import AMEndpoint, Backend, ContainerRequest, gang_requests, label_key, raised_to_minimum
from .access import act_as, kill_refused, proxied_by, refused_by_yarn, submitting_user, view_refused
from .app import Shipment, application
from .containers import (
    KV_ADDRESS,
    KV_GATE,
    KV_TOKEN,
    KV_VIEW,
    app_store,
    decode_asked,
    master_request,
)
from .driver import close_drivers, driver_running, shared_driver, submit_application
from .environment import ship_environment
from .gang import (
    LIVE_STATES,
    Node,
    Shape,
    asked_at_start,
    gang_tag,
    minimum_allocation,
    nodes_from,
    parse_gang_tag,
    shape_of,
)
from .gate import asked_first
from .line import line_store
from .logins import job_login, site_keytab
from .logs import job_logs
from .never_fits import refuse_never_fits
from .output import NodeOutput
from .rm import AppReport, ResourceManager, RMError, http_session, node_totals, resource_manager
from .runtime import RUNTIME_DIR, base_python, runtime
from .ship import deterministic_zip, open_cache, ship_resources, ship_venv, shipped, skein_security, spec_env
from .skein_jar import driver_jar, type_tag
from .spread import spread_hosts
from .start import StartPlan, plan_start

__all__ = ["YarnBackend", "app_store", "close_drivers", "docker_env", "job_login", "yarn_lifetime_s"]

log = logging.getLogger("tony.yarn")


def yarn_lifetime_s(timeout_ms: int) -> float:
    """The YARN lifetime of a job with tony.application.timeout ``timeout_ms``: a tenth longer (10 s
    to a minute), so the AM's own timeout ends the job first, with its diagnostics and history, and
    YARN's only ends what cannot end itself (a hung AM and its supervisor)."""
    timeout_s = timeout_ms / 1000.0
    return timeout_s + min(60.0, max(10.0, timeout_s / 10))

_YARN_RUNNING = ("RUNNING",)
_YARN_ENDED = ("FINISHED", "FAILED", "KILLED")
_YARN_ACTIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
#: how long a read of the skein master's keys may take (skein itself sets no deadline)
KV_DEADLINE_S = 15.0


def docker_env(image: str | None, mounts: list[str]) -> dict[str, str]:
    """The variables that make YARN's NodeManager run a container in ``image`` (none without one)."""
    if not image:
        return {}
    env = {"YARN_CONTAINER_RUNTIME_TYPE": "docker", "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": image}
    if mounts:
        env["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] = ",".join(mounts)
    return env


@dataclass(frozen=True)
class _Gang:
    """A job's gang as YARN will grant it (skein's master, then each container's task type and
    shape), and what the ResourceManager said of its queue (its name there, its scheduler entry)
    and of the nodes (running ones, and the list as given)."""

    master: Shape
    shapes: list[tuple[str, Shape]]
    queue: str
    queue_info: dict[str, Any] | None
    nodes: list[Node]
    listed: list[dict[str, Any]]


class YarnBackend(Backend):
    """Client side: submit to YARN, find the AM, fall back to the ResourceManager's report.

    :param hadoop_conf_dir: a Hadoop conf directory (default ``$HADOOP_CONF_DIR``).
    :param rm_address: the ResourceManager's RPC address ``host[:port]``.
    :param rm_web_address: its web address ``http(s)://host[:port]`` (default port 8088 on
        ``rm_address``'s host).
    :param webhdfs: the NameNode's WebHDFS address ``http(s)://host[:port]``: where checkpoints and
        final statuses go.
    :param principal: with ``keytab``, the Kerberos login on a Kerberized cluster (default: the
        ticket cache); a job's own tony.keytab.user and tony.keytab.location win for submitting it.

    The addresses win over the conf directory's; see :func:`tony_workflow.hadoop.address_conf`.
    ``conf_dir`` is the directory in use, ``conf`` its properties.
    """

    name = "yarn"

    def __init__(self, hadoop_conf_dir: str | None = None, python: str | None = None,
                 principal: str | None = None, keytab: str | None = None, *, rm_address: str | None = None,
                 rm_web_address: str | None = None, webhdfs: str | None = None):
        base = hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR") or None
        if base and not Path(base).is_dir():
            raise ConfigError(f"the Hadoop conf directory {base!r} does not exist")
        if not rm_address and not (base and Path(base, "yarn-site.xml").is_file()):
            raise ConfigError("backend 'yarn' needs the ResourceManager's address: rm_address, or HADOOP_CONF_DIR "
                             f"pointing at a directory with yarn-site.xml (got {base!r})")
        base_conf = hadoop.read_conf(base)
        # Without the NameNode's RPC address (a connection gives its web address), ask the NameNode:
        # the runtime and the job's files are copied to HDFS and localized from there by RPC.
        default_fs = urlsplit(base_conf.get("fs.defaultFS", ""))
        guess = bool(webhdfs) and not (default_fs.scheme == "hdfs" and default_fs.netloc)
        port = hadoop.namenode_rpc_port(webhdfs) if webhdfs and guess else None
        if guess and port is None:
            log.warning("the NameNode at %s did not say its RPC port: fs.defaultFS takes Hadoop's default, %d; "
                        "give a Hadoop conf directory with fs.defaultFS if that is wrong", webhdfs, hadoop.NAMENODE_PORT)
        overrides = hadoop.address_conf(rm_address=rm_address, rm_web_address=rm_web_address, webhdfs=webhdfs,
                                        base=base_conf, namenode_port=port)
        self.conf_dir = Path(hadoop.write_conf_dir(overrides, base) if overrides else (base or ""))
        self.conf = hadoop.read_conf(self.conf_dir)
        # An interpreter the nodes have this project installed in (given, or said by the cluster's own
        # configuration, as the mini cluster does); None: the runtime goes with each job.
        self.python = python or self.conf.get("tony.yarn.python") or None
        keys = ("principal", "keytab")
        if principal is None and keytab is None:  # tony-site.xml's, as every job submitted here gets them
            principal, keytab = site_keytab()
            keys = (KEYTAB_USER, KEYTAB_LOCATION)
        self.principal, self.keytab = principal, keytab
        # Who this backend is on a Kerberized cluster, for following and killing jobs and for
        # submitting those that name no keytab of their own; None on a cluster without Kerberos.
        self.login = (Login(principal, keytab, keys=keys) if is_secure(self.conf) else None)
        self._logins: dict[str, Login] = {}   # app id -> the login of a job submitted here
        self._output: NodeOutput | None = None  # what containers print, for followers
        self._apps: dict[str, tuple[str | None, Any]] = {}   # app id -> (skein AM address, its ApplicationClient)
        # Re-entrant: Airflow calls on_kill from a signal handler, possibly while this thread holds it.
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self) -> Any:
        """skein's client: the process's one driver for this cluster and login, started on first use."""
        return shared_driver(self.conf, self.conf_dir, self.principal, self.keytab)

    @property
    def driver_started(self) -> bool:
        """Whether this process already runs the driver :attr:`client` would use."""
        return driver_running(self.conf, self.principal, self.keytab)

    @property
    def rm(self) -> ResourceManager:
        """The ResourceManager's REST API, shared by the process (as :attr:`login`)."""
        return resource_manager(self.rm_web, self.login)

    def _rm(self, app_id: str) -> ResourceManager:
        """The REST API as the login ``app_id`` was submitted with here, else as :attr:`login`."""
        return resource_manager(self.rm_web, self._logins.get(app_id, self.login))

    @property
    def rm_web(self) -> str:
        """The ResourceManager's web address (REST API, application pages), e.g. ``http://rm:8088``."""
        url = hadoop.rm_web_url(self.conf)
        if not url:
            raise ConfigError(f"yarn.resourcemanager.webapp.address is not set in {self.conf_dir}/yarn-site.xml")
        return url

    def _app_client(self, report: AppReport) -> Any:
        """The skein ApplicationMaster's client, connected straight to the address the
        ResourceManager reports, with the credentials skein keeps for this user (no driver)."""
        import skein
        with self._lock:
            known = self._apps.get(report.id)
            if known is None or known[0] != report.am_rpc_address:
                known = (report.am_rpc_address, skein.ApplicationClient(report.am_rpc_address, report.id,
                                                                        security=skein.Security.from_default()))
                self._apps[report.id] = known
            return known[1]

    def _kv_prefix(self, report: AppReport, prefix: str) -> dict[str, bytes]:
        """The skein AM's keys under ``prefix``, within :data:`KV_DEADLINE_S`: skein asks with no
        deadline, and a master that accepted the connection and does not answer (busy, or not up
        yet) would hold a status read, and whatever follows the job, for good."""
        import skein.kv  # type: ignore[import-untyped]
        found: dict[str, bytes] = self._app_client(report).kv._apply_op(skein.kv.get_prefix(prefix),
                                                                         timeout=KV_DEADLINE_S)
        return found

    def _report(self, app_id: str) -> AppReport:
        """The ResourceManager's report; UnknownApplication for an application it does not know."""
        try:
            report = self._rm(app_id).app(app_id)
        except RMError as e:
            raise UnknownApplication(app_id, f"the ResourceManager: {e}") from e
        if report is None:
            raise UnknownApplication(app_id, "the ResourceManager does not know it")
        return report

    def inventory(self, rm: ResourceManager | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """(largest node, cluster total) of memory MB, vcores and GPUs, from the ResourceManager
        (``rm``: as another login than the backend's)."""
        biggest = {"memory_mb": 0, "vcores": 0, "gpus": 0}
        total = dict(biggest)
        for node in (rm or self.rm).nodes():
            if node.get("state") not in ("RUNNING", "NEW"):
                continue
            mem, vcores, gpus = node_totals(node)
            for key, value in (("memory_mb", mem), ("vcores", vcores), ("gpus", gpus)):
                biggest[key] = max(biggest[key], value)
                total[key] += value
        return biggest, total

    def check_fits(self, spec: JobSpec, rm: ResourceManager | None = None) -> _Gang:
        """Raises NeverFits when the job's gang can never be placed (YARN would keep it waiting
        forever): see :func:`.never_fits.refuse_never_fits`. Returns the gang as YARN will grant
        it, with what the ResourceManager said of the queue and the nodes."""
        rm = rm or self.rm
        queue_name = spec.queue or "default"
        queue = rm.queue(queue_name)
        requests_ = gang_requests(spec)
        master = master_request(spec)
        listed = rm.nodes()
        nodes = nodes_from(listed)
        refuse_never_fits(requests_, master, nodes, queue, queue_name,
                          lambda task_id: label_key(spec, task_id))
        minimum = minimum_allocation(queue)
        shape: Callable[[ContainerRequest], Shape] = lambda r: shape_of(r.memory_mb, r.vcores, r.gpus, r.node_label, minimum)
        return _Gang(shape(master), [(r.task_id.split(":")[0], shape(r)) for r in requests_],
                     str((queue or {}).get("queuePath") or queue_name), queue, nodes, listed)

    def _start_plan(self, spec: JobSpec, rm: ResourceManager, gang: _Gang, login: Login | None) -> StartPlan:
        """Whether skein's master asks for the whole gang as the application starts (:mod:`.start`)."""
        tasks = [] if any(t.spread for t in spec.tasks.values()) else asked_first(spec, gang_requests(spec))
        store = line_store(spec.gang_line_dir, str(self.conf_dir), login) if tasks else None
        # Read once the intents are listed: a job submitted in between is then in the list.
        return plan_start(tasks, gang.shapes, gang.master, spec.priority, gang.queue, gang.queue_info, gang.nodes,
                          lambda: rm.apps(tags=("tony",), states=LIVE_STATES), store,
                          room_now=lambda: (nodes_from(rm.nodes()), rm.queue(spec.queue or "default")))

    # ------------------------------------------------------------------ Backend
    def submit(self, spec: JobSpec) -> str:
        own = job_login(spec)  # its keys are checked on any cluster, and used on a Kerberized one
        login = (own or self.login) if self.login is not None else None
        try:
            rm = resource_manager(self.rm_web, login)  # logs in: LoginError when it cannot
        except LoginError as e:
            raise LoginError(f"{e}; nothing was submitted") from None
        if spec.proxy_user:
            spec = act_as(spec, self.submitting_user(), str(self.conf_dir), login)
        gang = self.check_fits(spec, rm)
        spec = raised_to_minimum(spec, minimum_allocation(gang.queue_info)[0], "yarn.scheduler.minimum-allocation-mb")
        plan = self._start_plan(spec, rm, gang, login)
        try:
            return plan.asked(self._submit(spec, rm, gang, plan, login))
        finally:
            plan.done()

    def _submit(self, spec: JobSpec, rm: ResourceManager, gang: _Gang, plan: StartPlan, login: Login | None) -> str:
        staging = Path(tempfile.mkdtemp(prefix="tony-yarn-"))
        cache = open_cache(self.conf_dir, login, spec.proxy_user)
        remote = (partial(open_storage, hadoop_conf_dir=self.conf_dir, login=login, doas=spec.proxy_user),
                  partial(qualified, hadoop_conf_dir=self.conf_dir))  # a cluster file's store, its full URI
        try:
            shipment = self._ship(spec, staging, cache)
            if spec.python_venv:
                shipment.files["venv"] = ship_venv(spec.python_venv, staging, *remote)
            shipment.resources = ship_resources(spec.conf, staging, cache, *remote)
        except SpecError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        # The tasks skein's master asks for as the application starts, with the AM: the whole gang
        # when the queue has room for it now (yarn/start.py); else none, and the gate asks in turn.
        log.debug("%s: %s%s", spec.name, plan.why,
                  f" (held {plan.looked['held_s']} s for the gangs asked at start)" if plan.looked.get("held_s") else "")
        spread = {}
        for ttype, task in spec.tasks.items():
            if task.spread:  # one service per node the type may use (yarn/spread.py)
                r = task.resources
                spread[ttype] = spread_hosts(gang.listed, task.node_label or spec.node_label or "", r.memory_mb,
                                             r.vcores, r.gpus, task.instances)
        # TonY's tags, the user's, then where the job came from, as many as YARN takes.
        tags, _ = application_tags(["tony", gang_tag(gang.master, [s for _, s in gang.shapes], bool(plan.tasks))],
                                   spec.tags, spec.context, spec.identity)
        if driver_jar()[1] is None:  # skein's driver with TonY's changes: the type travels as a tag it takes off
            tags.append(type_tag(spec.application_type.strip() or "TONY"))
        app = application(spec, shipment, tags=tags, at_start=plan.tasks, spread=spread,
                          docker_env=lambda image: docker_env(image, spec.docker_mounts), secure=is_secure(self.conf),
                          submitter=self.submitting_user(), history=history_server())
        principal, keytab = (login.principal, login.keytab) if login else (self.principal, self.keytab)
        app_id = self._driver_submit(app, spec, principal, keytab)
        shutil.rmtree(staging, ignore_errors=True)
        if login is not None:
            self._logins[app_id] = login
        self._apply_limits(app_id, spec)
        return str(app_id)

    def _driver_submit(self, app: Any, spec: JobSpec, principal: str | None, keytab: str | None) -> str:
        """Gives ``app`` to skein's driver (:func:`.driver.submit_application`); a proxy user the
        ResourceManager refuses is said as such."""
        def refused(cause: str) -> Exception:
            return LoginError(f"tony.application.proxy-user={spec.proxy_user}: the ResourceManager does not let "
                              f"{self.submitting_user()} act as {spec.proxy_user} ({cause}); nothing was submitted")
        return submit_application(lambda: shared_driver(self.conf, self.conf_dir, principal, keytab), app,
                                  refused if spec.proxy_user else None)

    def _ship(self, spec: JobSpec, staging: Path, cache: Any) -> Shipment:
        """What the job's containers get (see :mod:`.runtime`): the runtime, unless the job
        names an interpreter its nodes have this project in (``tony.yarn.python``); the job's
        environment; its source; the Hadoop configuration this client used (it may have been
        written from a connection's addresses and exist only on this machine); the spec, in the
        containers' environment unless it is too large for it."""
        import skein
        python = spec.yarn_python or self.python
        shipment = Shipment(python or spec.yarn_base_python or base_python(), security=skein_security(cache))
        if not python:
            pack = runtime()
            shipment.files[RUNTIME_DIR] = shipped(cache, pack.path, "archive", digest=pack.key)
        # The job's environment goes with it, unless the nodes have this project's interpreter
        # (and so, the cluster says, what its jobs import) or the job says they have what it needs.
        if (spec.yarn_environment or ("nodes" if python else "client")) == "client" and not spec.python_venv:
            ship_environment(spec, shipment, cache)
        if spec.src_dir:
            shipment.files["src"] = skein.File(str(deterministic_zip(Path(spec.src_dir), staging / "src.zip")),
                                               type="archive")
        shipment.files["hadoop-conf"] = shipped(cache, deterministic_zip(self.conf_dir, staging / "hadoop-conf.zip"),
                                                "archive")
        shipment.spec_env = spec_env(spec.to_dict())
        if shipment.spec_env is None:
            (staging / "spec.json").write_text(json.dumps(spec.to_dict()))
            shipment.files["spec.json"] = skein.File(str(staging / "spec.json"), type="file")
        return shipment

    def _apply_limits(self, app_id: str, spec: JobSpec) -> None:
        """What skein's application spec cannot say, set through the ResourceManager as soon as the
        application exists: its lifetime (tony.application.timeout, so that YARN ends a job whose
        AM hangs) and its priority. A refusal is logged, not raised: the job is already submitted."""
        try:
            if spec.application_timeout_ms > 0:
                self._rm(app_id).set_lifetime(app_id, yarn_lifetime_s(spec.application_timeout_ms))
            if spec.priority > 0:
                self._rm(app_id).set_priority(app_id, spec.priority)
        except RMError as e:
            log.warning("%s: %s", app_id, e)

    def endpoint(self, app_id: str) -> AMEndpoint | None:
        try:
            report = self._rm(app_id).app(app_id)
        except RMError:
            return None
        if report is not None:
            self._may_view(report)  # before anything of the job is read: YARN's ACLs decide
        try:
            if report is None or report.state not in _YARN_RUNNING or not report.am_rpc_address:
                return None
            kv = self._kv_prefix(report, "tony.am.")
            if KV_ADDRESS not in kv:
                return None
            return AMEndpoint(kv[KV_ADDRESS].decode(), kv[KV_TOKEN].decode(), kv[KV_VIEW].decode())
        except Exception:  # noqa: BLE001 - the app or its AM is gone or not up yet: fall back to the RM report
            with self._lock:
                self._apps.pop(app_id, None)
            return None

    def _may_view(self, report: AppReport) -> AppReport:
        refused = view_refused(report, is_secure(self.conf), self.submitting_user())
        if refused is not None:
            raise refused
        return report

    def check_exists(self, app_id: str) -> None:
        self._may_view(self._report(app_id))  # one ResourceManager call

    def stored_status(self, app_id: str) -> JobStatus:
        report = self._may_view(self._report(app_id))
        state, final = report.state, report.final_status
        if state in _YARN_ENDED:
            saved = self._saved_status(app_id, report.user)
            if saved is not None:
                return saved
        status = JobStatus(application_id=app_id, name=report.name, backend=self.name,
                           tracking_url=f"{self.rm_web}/cluster/app/{app_id}",
                           diagnostics=report.diagnostics, started_at=report.started_at,
                           finished_at=report.finished_at, context=from_tags(report.tags) or None)
        if state in ("NEW", "NEW_SAVING", "SUBMITTED"):
            status.state = JobState.SUBMITTED
        elif state == "ACCEPTED":
            status.state = JobState.ALLOCATING
        elif state == "RUNNING":
            self._before_the_am(report, status)
        elif state == "KILLED" or final == "KILLED":
            status.state = JobState.KILLED
        elif final == "SUCCEEDED":
            status.state = JobState.SUCCEEDED
        else:
            status.state = JobState.FAILED
        return status

    def _before_the_am(self, report: AppReport, status: JobStatus) -> None:
        """The status of a job YARN runs whose AM does not answer: RUNNING once its AM has started
        (it is ending, or between attempts), else ALLOCATING with the gate's word on its wait."""
        try:
            kv = self._kv_prefix(report, "tony.")
        except Exception:  # noqa: BLE001 - skein's AM not reachable (yet): what YARN says
            kv = {}
        if KV_ADDRESS in kv:
            status.state = JobState.RUNNING
            return
        status.state = JobState.ALLOCATING
        gate = json.loads(kv[KV_GATE]) if KV_GATE in kv else {}
        status.waiting_since = gate.get("since") or report.started_at
        tagged = parse_gang_tag(report.tags)
        status.containers_wanted = int(gate.get("wanted") or (len(tagged[1]) if tagged else 0))
        status.jobs_ahead = list(gate.get("ahead") or [])
        asked = len(decode_asked(str(gate.get("asked") or "")))
        status.waiting_reason = gate.get("reason") or (
            f"its turn has come: the ApplicationMaster's container{f' and {asked} task containers are' if asked else ' is'}"
            " asked for" if gate.get("admitted")
            else f"{gate.get('place') or 'first'} in line: its ApplicationMaster starts, to wait for its turn"
            if gate.get("early")
            else "skein's master asks for the whole gang as the application starts" if asked_at_start(report.tags)
            else "waiting for its turn in the queue")

    def _saved_status(self, app_id: str, user: str | None = None) -> JobStatus | None:
        """The final status the AM wrote in the application's directory (in the home of ``user``,
        whom it ran as)."""
        try:
            store = open_storage(app_store(app_id, user), hadoop_conf_dir=str(self.conf_dir),
                                 login=self._logins.get(app_id, self.login))
            with tempfile.TemporaryDirectory() as tmp:
                store.get("status.json", Path(tmp) / "status.json")
                return JobStatus.from_dict(json.loads((Path(tmp) / "status.json").read_text()))
        except (OSError, ValueError):
            return None

    def force_kill(self, app_id: str, timeout: float = 60.0) -> None:
        """Kills the application through the ResourceManager and returns once it has ended there (the
        REST call only asks; the driver's kill waits the same way)."""
        rm = self._rm(app_id)
        try:
            rm.kill(app_id)
        except RMError as e:
            # On a secure cluster the REST API knows who asks; elsewhere it may take the caller
            # for its static web user, and the driver's word (the user's own) decides.
            if e.status == 403 and is_secure(self.conf):
                raise kill_refused(app_id, self.submitting_user()) from None
            try:
                self.client.kill_application(app_id)
            except Exception as driver_error:  # noqa: BLE001 - raised again, as AccessDenied if YARN refused
                raise (kill_refused(app_id, self.submitting_user()) if refused_by_yarn(driver_error)
                       else driver_error) from None
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RMError):
                report = rm.app(app_id)
                if report is None or report.state in _YARN_ENDED:
                    return
            time.sleep(0.2)

    def logs(self, app_id: str, task: str | None = None, *, status: JobStatus | None = None,
             into: Path | None = None) -> dict[str, Path]:
        report = self._may_view(self._report(app_id))
        ended = report.state in _YARN_ENDED
        # Hadoop's default is not to aggregate, but a client's configuration may not say what the
        # NodeManagers do: only an explicit false spares the look on HDFS.
        aggregated = self.conf.get("yarn.log-aggregation-enable", "").strip().lower() != "false"
        if ended and aggregated:
            self._await_log_aggregation(app_id)
        login = self._logins.get(app_id, self.login)
        return job_logs(app_id, status or self.stored_status(app_id), task, ended=ended, aggregated=aggregated,
                        into=into or tony_home() / "logs" / app_id, session=partial(http_session, login),
                        conf_dir=self.conf_dir, login=login)

    def read_output(self, app_id: str, container: str, stream: str, where: str | None, offset: int,
                    limit: int) -> tuple[bytes, int | None] | None:
        if self._output is None:
            sessions: dict[tuple[str, Any], Any] = {}

            def session(app: str, node: str) -> Any:  # one per NodeManager and login: SPNEGO's cookie is the server's
                login = self._logins.get(app, self.login)
                return sessions.setdefault((node, login), http_session(login))

            self._output = NodeOutput(session, lambda app: self._report(app).state in _YARN_ENDED, self.conf_dir,
                                      lambda app: self._logins.get(app, self.login))
        return self._output.read(app_id, container, stream, where, offset, limit)

    def _await_log_aggregation(self, app_id: str, timeout: float = 60.0) -> None:
        """Waits (a few seconds, usually) while the NodeManagers of an application that just ended
        still upload its logs: `yarn logs` finds nothing before they are done."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                report = self._rm(app_id).app(app_id)
            except RMError:
                return
            if report is None or report.state not in _YARN_ENDED or report.log_aggregation not in (
                    "NOT_START", "RUNNING", "RUNNING_WITH_FAILURE"):
                return
            time.sleep(0.5)

    def store_options(self) -> dict[str, Any]:
        """HDFS as this backend reaches it: its Hadoop configuration, and on a secure cluster its
        login (a connection's keytab as well as a ticket)."""
        return {"hadoop_conf_dir": str(self.conf_dir), "login": self.login}

    def list_applications(self) -> list[str]:
        return [a.id for a in self.rm.apps(tags=("tony",)) if "tony" in a.tags]

    def tags(self, app_id: str) -> list[str]:
        return sorted(self._report(app_id).tags)

    def running_with(self, identity_tag: str, spec: JobSpec | None = None) -> list[str]:
        # The ResourceManager knows the tag from the submission on: no gap before the AM runs. Its
        # word on the application's user decides whose it is: a tag can be copied by anyone.
        tag = identity_tag.lower()
        user = self.submitting_user(spec)
        return [a.id for a in self.rm.apps(tags=(tag,), states=_YARN_ACTIVE)
                if tag in a.tags and "tony" in a.tags and a.user == user] if user else []

    def kills_through_cluster(self, app_id: str) -> bool:
        # Another user's job: the ResourceManager decides whether they may (tony.application.modify-acls),
        # unless this user submitted it to run as them (its ACLs name this user): its AM ends it whole.
        user, owner = self.submitting_user(), self._report(app_id).user
        return user is None or (owner != user and not proxied_by(user, owner, self.store_options()))

    def submitted_as_me(self, app_id: str, spec: JobSpec | None = None) -> bool:
        user = self.submitting_user(spec)
        return user is not None and self._report(app_id).user == user

    def submitting_user(self, spec: JobSpec | None = None) -> str | None:
        """The user the ResourceManager names as the owner of ``spec`` submitted from here
        (:func:`.access.submitting_user`)."""
        login = self.login
        if spec is not None:
            with contextlib.suppress(SpecError, LoginError):
                login = job_login(spec) or login
        return submitting_user(spec.proxy_user if spec is not None else None, login, is_secure(self.conf))
