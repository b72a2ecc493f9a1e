"""TonyHook: owns the cluster connection, submission, status, kill and reattach.

The hook translates a ``tony`` connection into a :class:`~tony_workflow.client.TonyClient` and
holds that one client for its lifetime: on YARN a client starts a skein driver (a JVM), so the
operator and the trigger each keep one hook rather than building one per call.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from tony_workflow.client import JobHandle, TonyClient
from tony_workflow.client.follow import JobUpdate
from tony_workflow.client.saying import saying
from tony_workflow.spec import JobSpec
from tony_workflow.status import JobStatus
from tony_workflow.storage import qualified

__all__ = ["TonyHook"]

#: connection field -> the tony.* key it sets on every job submitted through the connection
_CONN_TO_CONF = {
    "queue": "tony.yarn.queue",
    "node_label": "tony.application.node-label",
    "proxy_user": "tony.application.proxy-user",
}

#: connection fields that configure the YARN backend (see tony_workflow.backends.yarn.YarnBackend)
_YARN_FIELDS = ("hadoop_conf_dir", "rm_address", "rm_web_address", "webhdfs", "principal", "keytab")


class TonyHook(BaseHook):
    """Talks to one cluster described by a ``tony`` connection.

    :param tony_conn_id: the connection. ``tony_default`` with no connection defined means the
        embedded local cluster, so DAGs run with no configuration at all.
    """

    conn_name_attr = "tony_conn_id"
    default_conn_name = "tony_default"
    conn_type = "tony"
    hook_name = "TonY"

    def __init__(self, tony_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tony_conn_id = tony_conn_id
        self._fields: dict[str, Any] | None = None
        self._client: TonyClient | None = None
        # Re-entrant: Airflow calls on_kill from a signal handler, possibly while this thread holds it.
        self._lock = threading.RLock()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_provider.get_provider_info import get_provider_info
        ui = get_provider_info()["connection-types"][0]["ui-field-behaviour"]
        return {"hidden_fields": ui["hidden-fields"], "relabeling": ui["relabeling"],
                "placeholders": ui["placeholders"]}

    @property
    def fields(self) -> dict[str, Any]:
        """The connection's settings; the embedded cluster when ``tony_default`` is not defined."""
        if self._fields is None:
            try:
                conn = self.get_connection(self.tony_conn_id)
            except AirflowNotFoundException:
                if self.tony_conn_id != self.default_conn_name:
                    raise
                self._fields = {"backend": "local"}
            else:
                extra = conn.extra_dejson or {}
                # The UI stores custom fields both bare and as extra__tony__<name>.
                fields = {k.removeprefix(f"extra__{self.conn_type}__"): v for k, v in extra.items()}
                fields.setdefault("backend", "local")
                self._fields = fields
        return self._fields

    @property
    def backend(self) -> str:
        return str(self.fields.get("backend") or "local")

    def get_conn(self) -> TonyClient:
        """The connection's client, created on first use and kept."""
        with self._lock:
            if self._client is None:
                kwargs = {}
                if self.backend == "yarn":
                    kwargs = {k: str(self.fields[k]) for k in _YARN_FIELDS if self.fields.get(k)}
                self._client = TonyClient(self.backend, **kwargs)
            return self._client

    def qualify(self, location: str) -> str:
        """``location`` as a full URI on this connection's cluster (``hdfs:///p`` gets the
        NameNode of its ``fs.defaultFS``, a local path becomes ``file:///…``)."""
        conf_dir = getattr(self.get_conn().backend, "conf_dir", None) if self.backend == "yarn" else None
        return qualified(location, conf_dir)

    def stage_data(self, local: str | Path, name: str) -> str:
        """Where this connection's jobs read the local directory ``local`` from: the directory
        itself on the embedded cluster, a copy in the user's HDFS home on YARN (its URI)."""
        from tony_workflow.client.data import stage_input
        return stage_input(local, self.get_conn().backend, name)

    def deployment(self) -> tuple[bytes | None, str]:
        """(key, server): what names this deployment's task runs in the identity of their jobs
        (:func:`tony_workflow.context.identity`). The key is the connection's ``reattach_key``, else
        Airflow's ``[tony] reattach_key``, else its ``[core] fernet_key`` (every part of a deployment
        holds the same one), else a key file made on first use, ``$AIRFLOW_HOME/tony/reattach.key``
        (one machine's). The server is Airflow's ``[api] base_url``. None for the key, with a
        warning, when none can be had: a later try then does not look for this try's job."""
        from airflow.configuration import AIRFLOW_HOME, conf

        from tony_workflow.context import deployment_key
        server = str(conf.get("api", "base_url", fallback="") or "")
        for text in (self.fields.get("reattach_key"), conf.get("tony", "reattach_key", fallback=None),
                     conf.get("core", "fernet_key", fallback=None)):
            if text and str(text).strip():
                return str(text).strip().encode(), server
        try:
            return deployment_key(Path(AIRFLOW_HOME) / "tony" / "reattach.key"), server
        except OSError as e:
            self.log.warning("No key to name this task run's job by (%s): a later try will not find it", e)
            return None, server

    def connection_conf(self) -> dict[str, str]:
        """tony.* keys this connection sets on every job (queue, node label, proxy user)."""
        return {key: str(self.fields[f]) for f, key in _CONN_TO_CONF.items() if self.fields.get(f)}

    def submit(self, spec: JobSpec, checked: bool = False) -> JobHandle:
        """Validates and submits; raises SpecError / SubmissionRefused with nothing submitted on bad input
        (``checked``: the spec came through the client's preflight already). What the submission
        says as it ships the job (its environment's packing and upload) goes to the task's log."""
        with saying(self.log.info):
            return self.get_conn().submit(spec, checked=checked)

    def attach(self, application_id: str) -> JobHandle:
        return self.get_conn().attach(application_id)

    def get_status(self, application_id: str) -> JobStatus:
        return self.attach(application_id).status()

    def kill(self, application_id: str, reason: str = "killed from Airflow") -> JobStatus:
        return self.attach(application_id).kill(reason)

    def follow(self, application_id: str, *, poll_interval: float, timeout: float | None = None,
               stop: Callable[[], bool] | None = None) -> Iterator[JobUpdate]:
        """What changes in the application until it ends: see
        :meth:`tony_workflow.client.JobHandle.follow`."""
        return self.attach(application_id).follow(poll_interval=poll_interval, timeout=timeout, stop=stop)

    def wait(self, application_id: str, *, poll_interval: float,
             on_update: Callable[[JobStatus], None] | None = None) -> JobStatus:
        return self.attach(application_id).wait(poll_interval=poll_interval, on_update=on_update)
