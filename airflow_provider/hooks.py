"""TonyHook: owns the cluster connection, submission, status, kill and reattach."""
from __future__ import annotations

from typing import Any, Callable

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from tony_workflow.client import JobHandle, TonyClient
from tony_workflow.spec import JobSpec
from tony_workflow.status import JobStatus

__all__ = ["TonyHook"]

#: connection field -> the tony.* key it sets on every job submitted through the connection
_CONN_TO_CONF = {
    "queue": "tony.yarn.queue",
    "node_label": "tony.application.node-label",
    "principal": "tony.keytab.user",
    "keytab": "tony.keytab.location",
    "history_dir": "tony.history.location",
}


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

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {"hidden_fields": ["host", "schema", "port", "login", "password"], "relabeling": {}}

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
        if self._client is None:
            kwargs = {}
            if self.backend == "yarn":
                kwargs = {k: v for k, v in self.fields.items()
                          if k in ("rm_address", "webhdfs", "hadoop_conf_dir", "principal", "keytab") and v}
            self._client = TonyClient(self.backend, **kwargs)
        return self._client

    def connection_conf(self) -> dict[str, str]:
        """tony.* keys this connection sets on every job (queue, node label, Kerberos, history)."""
        return {key: str(self.fields[f]) for f, key in _CONN_TO_CONF.items() if self.fields.get(f)}

    def submit(self, spec: JobSpec) -> JobHandle:
        """Validates and submits; raises SpecError / SubmitError with nothing submitted on bad input."""
        return self.get_conn().submit(spec)

    def attach(self, application_id: str) -> JobHandle:
        return self.get_conn().attach(application_id)

    def get_status(self, application_id: str) -> JobStatus:
        return self.attach(application_id).status()

    def kill(self, application_id: str, reason: str = "killed from Airflow") -> JobStatus:
        return self.attach(application_id).kill(reason)

    def wait(self, application_id: str, *, poll_interval: float,
             on_update: Callable[[JobStatus], None] | None = None) -> JobStatus:
        return self.attach(application_id).wait(poll_interval=poll_interval, on_update=on_update)
