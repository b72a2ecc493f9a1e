"""YARN through skein.

The application is a skein application whose ``tony-am`` service runs this package's
ApplicationMaster. Every task type is a service with no instances of its own; the AM adds one
container per task through skein's ApplicationClient, with the task's identity in the container's
environment, and kills them the same way. The AM's address and token travel through skein's
key-value store, TensorBoard becomes a page of skein's web UI (so the application's tracking URL,
through the ResourceManager proxy, leads to it), and the final status and diagnostics are set on
the YARN application at shutdown. Once the AM is gone, status comes from the ResourceManager.

Addresses come from ``HADOOP_CONF_DIR``; skein needs a ``yarn`` command on PATH that answers
``yarn classpath --glob`` (``tony minicluster env`` prints a suitable environment).
"""
from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import requests

from ..spec import JobSpec
from ..storage import open_storage
from ..status import JobState, JobStatus
from .base import AMEndpoint, Backend, ClusterManager, Container, ContainerRequest, NeverFits

__all__ = ["YarnBackend", "YarnClusterManager", "AM_SERVICE", "service_name"]

AM_SERVICE = "tony-am"
KV_ADDRESS, KV_TOKEN, KV_VIEW = "tony.am.address", "tony.am.token", "tony.am.view-token"
KV_STATUS = "tony.status"
_SKEIN_FINAL = {JobState.SUCCEEDED: "SUCCEEDED", JobState.FAILED: "FAILED", JobState.KILLED: "KILLED"}


def service_name(task_type: str) -> str:
    return f"tony-{task_type}"


def _conf_value(conf_dir: Path, filename: str, key: str) -> str | None:
    try:
        root = ET.parse(conf_dir / filename).getroot()
    except (OSError, ET.ParseError):
        return None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() == key:
            return (prop.findtext("value") or "").strip()
    return None


def hadoop_user() -> str:
    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def app_store(app_id: str) -> str:
    """The application's own HDFS directory: checkpoints and the final status live there."""
    return f"hdfs:///user/{hadoop_user()}/.tony/{app_id}"


def _zip_dir(src: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, dirs, files in os.walk(src, followlinks=True):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git", ".venv")]
            for name in files:
                path = Path(root) / name
                zf.write(path, path.relative_to(src).as_posix())
    return dest


class YarnBackend(Backend):
    """Client side: submit to YARN, find the AM, fall back to the ResourceManager's report."""

    name = "yarn"

    def __init__(self, hadoop_conf_dir: str | None = None, python: str | None = None,
                 principal: str | None = None, keytab: str | None = None, **_: Any):
        conf_dir = hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR")
        if not conf_dir or not Path(conf_dir, "yarn-site.xml").is_file():
            raise ValueError("backend 'yarn' needs HADOOP_CONF_DIR pointing at a directory with yarn-site.xml "
                             f"(got {conf_dir!r})")
        self.conf_dir = Path(conf_dir)
        os.environ["HADOOP_CONF_DIR"] = str(self.conf_dir)  # skein's driver reads it from the environment
        self.python = python or sys.executable
        self.principal, self.keytab = principal, keytab
        self._client = None
        self._apps: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self):
        import skein
        with self._lock:
            if self._client is None:
                kwargs = {"principal": self.principal, "keytab": self.keytab} if self.keytab else {}
                self._client = skein.Client(**kwargs)
            return self._client

    @property
    def rm_web(self) -> str:
        address = _conf_value(self.conf_dir, "yarn-site.xml", "yarn.resourcemanager.webapp.address")
        if not address:
            raise ValueError(f"yarn.resourcemanager.webapp.address is not set in {self.conf_dir}/yarn-site.xml")
        return address if address.startswith("http") else f"http://{address}"

    def _app_client(self, app_id: str):
        app = self._apps.get(app_id)
        if app is None:
            app = self.client.connect(app_id, wait=False)
            self._apps[app_id] = app
        return app

    def inventory(self) -> tuple[dict, dict]:
        """(largest node, cluster total) of memory MB, vcores and GPUs, from the ResourceManager."""
        nodes = requests.get(f"{self.rm_web}/ws/v1/cluster/nodes", timeout=30).json()
        biggest = {"memory_mb": 0, "vcores": 0, "gpus": 0}
        total = dict(biggest)
        for node in (nodes.get("nodes") or {}).get("node", []):
            if node.get("state") not in ("RUNNING", "NEW"):
                continue
            gpus = 0
            for info in (node.get("totalResource") or {}).get("resourceInformations", {}).get(
                    "resourceInformation", []):
                if info.get("name") == "yarn.io/gpu":
                    gpus = int(info.get("value", 0))
            mem = int(node.get("usedMemoryMB", 0)) + int(node.get("availMemoryMB", 0))
            vcores = int(node.get("usedVirtualCores", 0)) + int(node.get("availableVirtualCores", 0))
            for key, value in (("memory_mb", mem), ("vcores", vcores), ("gpus", gpus)):
                biggest[key] = max(biggest[key], value)
                total[key] += value
        return biggest, total

    def check_fits(self, requests_: list[ContainerRequest]) -> None:
        biggest, total = self.inventory()
        for r in requests_:
            key = "tony.am" if r.task_id == "am" else f"tony.{r.task_id.split(':')[0]}"
            for attr, what in (("memory_mb", "memory"), ("vcores", "vcores"), ("gpus", "gpus")):
                if getattr(r, attr) > biggest[attr]:
                    raise NeverFits(f"{key}.{what}", f"{r.task_id} asks for {getattr(r, attr)} {what} but the largest "
                                    f"NodeManager offers {biggest[attr]}")
        for attr, what in (("gpus", "GPUs"), ("memory_mb", "MB of memory"), ("vcores", "vcores")):
            need = sum(getattr(r, attr) for r in requests_)
            if need > total[attr]:
                by_type: dict[str, int] = {}
                for r in requests_:
                    t = "tony.am" if r.task_id == "am" else f"tony.{r.task_id.split(':')[0]}"
                    by_type[t] = by_type.get(t, 0) + getattr(r, attr)
                key = max(by_type, key=by_type.__getitem__)
                raise NeverFits(f"{key}.{'memory' if attr == 'memory_mb' else attr}",
                                f"the job needs {need} {what} at once but the cluster has {total[attr]}")

    # ------------------------------------------------------------------ Backend
    def submit(self, spec: JobSpec) -> str:
        import skein
        from ..am import am_requests
        self.check_fits(am_requests(spec))
        staging = Path(tempfile.mkdtemp(prefix="tony-yarn-"))
        (staging / "spec.json").write_text(json.dumps(spec.to_dict()))
        task_files: dict[str, Any] = {}
        if spec.src_dir:
            task_files["src"] = skein.File(str(_zip_dir(Path(spec.src_dir), staging / "src.zip")), type="archive")
        if spec.python_venv:
            venv = Path(spec.python_venv)
            archive = venv if venv.is_file() else _zip_dir(venv, staging / "venv.zip")
            task_files["venv"] = skein.File(str(archive), type="archive")
        spec_file = skein.File(str(staging / "spec.json"), type="file")
        python = spec.yarn_python or self.python
        base_env = {"TONY_BACKEND": "yarn", "PYTHONUNBUFFERED": "1", "HADOOP_CONF_DIR": str(self.conf_dir)}
        services = {
            AM_SERVICE: skein.Service(
                resources=skein.Resources(memory=spec.am.memory_mb, vcores=spec.am.vcores, gpus=spec.am.gpus),
                script=f"exec {python} -m tony_workflow.am --backend yarn --app-dir .",
                files={"spec.json": spec_file}, env=base_env, max_restarts=0),
        }
        for ttype, task in spec.tasks.items():
            services[service_name(ttype)] = skein.Service(
                resources=skein.Resources(memory=task.resources.memory_mb, vcores=task.resources.vcores,
                                          gpus=task.resources.gpus),
                script=f"exec {python} -m tony_workflow.executor",
                files={"spec.json": spec_file, **task_files},
                env={**base_env, "TONY_WORKDIR": "src" if spec.src_dir else "."},
                instances=0, max_restarts=0,
                # The AM decides what a failed task means; skein must not fail the application.
                allow_failures=True,
                node_label=task.node_label or "")
        app = skein.ApplicationSpec(name=spec.name, queue=spec.queue or "default", services=services,
                                    tags=set(spec.tags) | {"tony"}, max_attempts=1,
                                    node_label=spec.node_label or "")
        app_id = self.client.submit(app)
        shutil.rmtree(staging, ignore_errors=True)
        return app_id

    def endpoint(self, app_id: str) -> AMEndpoint | None:
        try:
            report = self.client.application_report(app_id)
            if str(report.state) not in ("RUNNING",):
                return None
            kv = self._app_client(app_id).kv
            address = kv.get(KV_ADDRESS)
            if address is None:
                return None
            return AMEndpoint(address.decode(), kv.get(KV_TOKEN).decode(), kv.get(KV_VIEW).decode())
        except Exception:  # the app or its AM is gone or not up yet: fall back to the RM report
            self._apps.pop(app_id, None)
            return None

    def stored_status(self, app_id: str) -> JobStatus:
        try:
            report = self.client.application_report(app_id)
        except Exception as e:
            raise KeyError(app_id) from e
        state = str(report.state)
        final = str(report.final_status)
        if state in ("FINISHED", "FAILED", "KILLED"):
            saved = self._saved_status(app_id)
            if saved is not None:
                return saved
        status = JobStatus(application_id=app_id, name=report.name, backend=self.name,
                           tracking_url=f"{self.rm_web}/cluster/app/{app_id}",
                           diagnostics=report.diagnostics or "",
                           started_at=report.start_time.timestamp() if report.start_time else None,
                           finished_at=report.finish_time.timestamp() if report.finish_time else None)
        if state in ("NEW", "NEW_SAVING", "SUBMITTED"):
            status.state = JobState.SUBMITTED
        elif state == "ACCEPTED":
            status.state = JobState.ALLOCATING
        elif state == "RUNNING":
            status.state = JobState.RUNNING
        elif state == "KILLED" or final == "KILLED":
            status.state = JobState.KILLED
        elif final == "SUCCEEDED":
            status.state = JobState.SUCCEEDED
        else:
            status.state = JobState.FAILED
        return status

    def _saved_status(self, app_id: str) -> JobStatus | None:
        try:
            store = open_storage(app_store(app_id), hadoop_conf_dir=str(self.conf_dir))
            with tempfile.TemporaryDirectory() as tmp:
                store.get("status.json", Path(tmp) / "status.json")
                return JobStatus.from_dict(json.loads((Path(tmp) / "status.json").read_text()))
        except (OSError, ValueError):
            return None

    def force_kill(self, app_id: str) -> None:
        self.client.kill_application(app_id)

    def logs(self, app_id: str, task: str | None = None) -> dict[str, Path]:
        out_dir = Path(tempfile.mkdtemp(prefix=f"tony-logs-{app_id}-"))
        done = subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True, text=True,
                              timeout=300)
        path = out_dir / "yarn-logs.txt"
        path.write_text(done.stdout + done.stderr)
        return {"yarn/logs": path}

    def list_applications(self) -> list[str]:
        apps = self.client.get_applications(states=["SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED", "FAILED",
                                                    "KILLED"])
        return sorted(a.id for a in apps if "tony" in (a.tags or set()))


class YarnClusterManager(ClusterManager):
    """AM side: containers are skein containers added to the task type's service."""

    def __init__(self, app_client=None):
        import skein
        self.app = app_client or skein.ApplicationClient.from_current()
        self.app_id = skein.properties.application_id
        self._containers: dict[str, Any] = {}   # our container id -> skein container id
        self._seq = 0
        self._cache: tuple[float, dict[str, Any]] = (0.0, {})
        self._lock = threading.Lock()

    def allocate(self, requests_: list[ContainerRequest], cancel: threading.Event) -> list[Container]:
        # YARN grants containers as they are added; registration is where the gang forms.
        return [self._make(r.task_id, r.memory_mb, r.vcores, r.gpus) for r in requests_]

    def _make(self, task_id: str, memory_mb: int, vcores: int, gpus: int) -> Container:
        with self._lock:
            self._seq += 1
            cid = f"{task_id}#{self._seq}"
        return Container(id=cid, task_id=task_id, memory_mb=memory_mb, vcores=vcores,
                         gpu_indices=list(range(gpus)), host="")

    def new_container(self, like: Container) -> Container:
        return self._make(like.task_id, like.memory_mb, like.vcores, len(like.gpu_indices))

    def launch(self, container: Container, argv: list[str], env: dict[str, str]) -> None:
        ttype = container.task_id.split(":")[0]
        skein_container = self.app.add_container(service_name(ttype), env={k: str(v) for k, v in env.items()})
        self._containers[container.id] = skein_container.id
        self._cache = (0.0, {})

    def _states(self) -> dict[str, Any]:
        # One RPC per monitor pass at most, not one per container.
        at, states = self._cache
        if time.time() - at > 1.0:
            states = {c.id: c for c in self.app.get_containers(
                states=["WAITING", "REQUESTED", "RUNNING", "SUCCEEDED", "FAILED", "KILLED"])}
            self._cache = (time.time(), states)
        return states

    def poll(self, container: Container) -> int | None:
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None:
            return None
        state = str(c.state)
        if state == "SUCCEEDED":
            return 0
        if state == "FAILED":
            return 1
        if state == "KILLED":
            return 137
        return None

    def kill(self, container: Container, grace: float = 5.0) -> None:
        sid = self._containers.get(container.id)
        if sid:
            try:
                self.app.kill_container(sid)
            except Exception:
                pass  # already gone
            self._cache = (0.0, {})

    def release(self) -> None:
        for sid in list(self._containers.values()):
            try:
                self.app.kill_container(sid)
            except Exception:
                pass

    def log_url(self, container: Container) -> str | None:
        sid = self._containers.get(container.id)
        c = self._states().get(sid) if sid else None
        if c is None or not c.yarn_node_http_address:
            return None
        user = os.environ.get("USER") or os.environ.get("HADOOP_USER_NAME") or ""
        return f"http://{c.yarn_node_http_address}/node/containerlogs/{c.yarn_container_id}/{user}"

    def checkpoint_location(self, app_dir: Path) -> str:
        return f"{app_store(self.app_id)}/checkpoints"

    def log_dir(self, app_dir: Path) -> str | None:
        return None  # no directory is shared across nodes: the chief serves its own

    def publish_endpoint(self, address: str, token: str, view_token: str, tracking_url: str) -> str:
        self.app.kv[KV_TOKEN] = token.encode()
        self.app.kv[KV_VIEW] = view_token.encode()
        self.app.kv[KV_ADDRESS] = address.encode()  # last: clients look for the address first
        try:
            return self.app.ui.add_page("tony", tracking_url, link_name="TonY").address
        except Exception:
            return tracking_url

    def expose_tensorboard(self, url: str) -> str | None:
        try:
            return self.app.ui.add_page("tensorboard", url, link_name="TensorBoard").address
        except Exception:
            return None

    def finish(self, state: str, diagnostics: str, status: dict | None = None) -> None:
        if status is not None:
            # The whole final status outlives the AM in HDFS; the ResourceManager keeps only a line.
            try:
                store = open_storage(app_store(self.app_id))
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                    json.dump(status, fh)
                store.put(Path(fh.name), "status.json")
                os.unlink(fh.name)
            except (OSError, ValueError):
                pass
        self.app.shutdown(_SKEIN_FINAL.get(state, "FAILED"),
                          (diagnostics or f"TonY application {state}")[-4000:])
