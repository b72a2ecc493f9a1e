"""TonyJobTrigger: polls an application from the triggerer until it ends."""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

__all__ = ["TonyJobTrigger"]


class TonyJobTrigger(BaseTrigger):
    """Fires once the application is final, with its JobStatus as the event payload.

    :param application_id: the application to follow.
    :param tony_conn_id: the ``tony`` connection it runs on.
    :param poll_interval: seconds between status checks.
    """

    def __init__(self, application_id: str, tony_conn_id: str = "tony_default", poll_interval: float = 5.0):
        super().__init__()
        self.application_id = application_id
        self.tony_conn_id = tony_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_provider.triggers.TonyJobTrigger",
                {"application_id": self.application_id, "tony_conn_id": self.tony_conn_id,
                 "poll_interval": self.poll_interval})

    def _hook(self):
        from airflow_provider.hooks import TonyHook
        return TonyHook(self.tony_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        last = None
        try:
            while True:
                # Status calls are short blocking HTTP/file reads: keep them off the event loop.
                status = await asyncio.to_thread(hook.get_status, self.application_id)
                line = status.summary()
                if line != last:
                    self.log.info("%s", line)
                    last = line
                if status.is_final:
                    yield TriggerEvent({"status": "success" if status.succeeded else "error",
                                        "application_id": self.application_id, "job": status.to_dict()})
                    return
                await asyncio.sleep(self.poll_interval)
        except Exception as e:  # surface as an event so the task fails with the reason
            yield TriggerEvent({"status": "error", "application_id": self.application_id,
                                "message": f"{type(e).__name__}: {e}"})

    async def on_kill(self) -> None:
        """The user marked the task failed (or cleared it): stop the application."""
        await asyncio.to_thread(self._hook().kill, self.application_id, "task killed from Airflow")
