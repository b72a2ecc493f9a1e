"""TonyJobTrigger: polls an application from the triggerer until it ends.

A small poller: the job follower (:class:`tony_workflow.client.follow.Follower`) says what changed, the
hook reads the status and kills; the trigger only sleeps between reads, logs each change, and fires
one event when the application is final.
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tony_workflow.client.follow import Follower
from tony_workflow.client.output import Cursor, OutputLine, StatusGap

if TYPE_CHECKING:
    from airflow_provider.hooks import TonyHook

__all__ = ["TonyJobTrigger"]


class TonyJobTrigger(BaseTrigger):
    """Fires once the application is final, with its JobStatus as the event payload.

    :param application_id: the application to follow.
    :param tony_conn_id: the ``tony`` connection it runs on.
    :param poll_interval: seconds between status checks.
    :param output_tasks: the tasks whose output it logs as they print it (None: the chief;
        ``[]``: none), looked at every :data:`~tony_workflow.client.output.OUTPUT_INTERVAL_S` seconds.
    :param cursor: where following the output starts (:class:`~tony_workflow.client.output.Cursor`
        as JSON): where the deferring task left it.
    """

    def __init__(self, application_id: str, tony_conn_id: str = "tony_default", poll_interval: float = 5.0,
                 output_tasks: list[str] | None = None, cursor: str | None = None):
        super().__init__()
        self.application_id = application_id
        self.tony_conn_id = tony_conn_id
        self.poll_interval = poll_interval
        self.output_tasks = output_tasks
        self.cursor = cursor

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_provider.triggers.TonyJobTrigger",
                {"application_id": self.application_id, "tony_conn_id": self.tony_conn_id,
                 "poll_interval": self.poll_interval, "output_tasks": self.output_tasks, "cursor": self.cursor})

    @functools.cached_property
    def hook(self) -> TonyHook:
        """One hook (one client) for the whole run and for on_kill."""
        from airflow_provider.hooks import TonyHook
        return TonyHook(self.tony_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            hook = self.hook
            follower = Follower(lambda: hook.get_status(self.application_id))
            output = None
            if self.output_tasks != []:
                output = hook.attach(self.application_id).output(self.output_tasks, Cursor.from_json(self.cursor))
            while True:
                # Status reads are short blocking HTTP/file reads: keep them off the event loop.
                update = await asyncio.to_thread(follower.poll)
                status = follower.last
                if output is not None:
                    self._say(await asyncio.to_thread(output.drain if status.is_final else output.poll, status))
                if update is not None:
                    self.log.info("%s", update.status.summary())
                    if update.starting:
                        self.log.info("%s", update.starting)
                if status.is_final:
                    yield TriggerEvent({"status": "success" if status.succeeded else "error",
                                        "application_id": self.application_id, "job": status.to_dict()})
                    return
                gap = StatusGap(self.poll_interval)
                while (pause := gap.pause()) is not None:
                    await asyncio.sleep(pause)
                    if output is not None and gap.look():
                        self._say(await asyncio.to_thread(output.poll, status))
        except Exception as e:  # noqa: BLE001 - surfaced as an event so the task fails with the reason
            yield TriggerEvent({"status": "error", "application_id": self.application_id,
                                "message": f"{type(e).__name__}: {e}"})

    def _say(self, lines: list[OutputLine]) -> None:
        for line in lines:
            self.log.info("%s", line.render())

    async def on_kill(self) -> None:
        """The user marked the task failed (or cleared it): stop the application."""
        await asyncio.to_thread(self.hook.kill, self.application_id, "task killed from Airflow")
