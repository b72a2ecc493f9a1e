"""TonyJobTrigger: polls an application from the triggerer until it ends.

A small poller: the job follower (:class:`tony_workflow.client.follow.Follower`) says what changed, the
hook reads the status and kills; the trigger only sleeps between reads, logs each change, and fires
one event when the application is final.

How far it has written the job's output into the task's log is kept as it goes, in an XCom of the
deferred task instance (:data:`OUTPUT_CURSOR_KEY`; a trigger may write its task instance's XComs
from the triggerer, not its task state store): a trigger started again for the same deferral (its
triggerer stopped or died, another took the trigger over) goes on from there rather than from where
the task deferred. The final event carries it too, so that the task keeps it for a later try.

What is kept lags one look behind what was logged: a trigger's log lines travel to the task's log
after the trigger has logged them, and a triggerer that stops drops those still on their way. A
trigger started again so writes the lines of the last look before the stop once more, rather than
lose them (it says so in the log).
"""
from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tony_workflow.client.follow import Follower
from tony_workflow.client.output import Cursor, OutputFollower, OutputLine, StatusGap

if TYPE_CHECKING:
    from airflow_provider.hooks import TonyHook

__all__ = ["OUTPUT_CURSOR_KEY", "TonyJobTrigger"]

#: how far the job's output was followed: an XCom of the deferred task (its trigger's), and a key
#: of the task's state store (the task's, for a later try that reattaches)
OUTPUT_CURSOR_KEY = "tony_output_cursor"


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
        self._unkept = False
        self._logged: str | None = None  # the cursor past the lines logged at the last look, not yet kept

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
        output: OutputFollower | None = None
        try:
            hook = self.hook
            follower = Follower(lambda: hook.get_status(self.application_id))
            if self.output_tasks != []:
                kept = await self._kept_cursor()
                if kept is not None:
                    self.log.info("The job's output goes on from where an earlier trigger kept it: the lines of "
                                  "its last look may be written twice")
                cursor = Cursor.from_json(self.cursor).furthest(kept)
                output = hook.attach(self.application_id).output(self.output_tasks, cursor)
            while True:
                # Status reads are short blocking HTTP/file reads: keep them off the event loop.
                update = await asyncio.to_thread(follower.poll)
                status = follower.last
                if output is not None:
                    await self._say(await asyncio.to_thread(output.drain if status.is_final else output.poll, status),
                                    output)
                if update is not None:
                    self.log.info("%s", update.status.summary())
                    if update.starting:
                        self.log.info("%s", update.starting)
                if status.is_final:
                    yield TriggerEvent({"status": "success" if status.succeeded else "error",
                                        "application_id": self.application_id, "job": status.to_dict(),
                                        **({"cursor": output.cursor.to_json()} if output is not None else {})})
                    return
                gap = StatusGap(self.poll_interval)
                while (pause := gap.pause()) is not None:
                    await asyncio.sleep(pause)
                    if output is not None and gap.look():
                        await self._say(await asyncio.to_thread(output.poll, status), output)
        except Exception as e:  # noqa: BLE001 - surfaced as an event so the task fails with the reason
            yield TriggerEvent({"status": "error", "application_id": self.application_id,
                                "message": f"{type(e).__name__}: {e}",
                                **({"cursor": output.cursor.to_json()} if output is not None else {})})

    async def _say(self, lines: list[OutputLine], output: OutputFollower) -> None:
        """Writes ``lines`` into the task's log, and keeps how far the lines of the look before went
        (a look or more ago, they have reached the log)."""
        if self._logged is not None:
            await self._keep(Cursor.from_json(self._logged))
            self._logged = None
        for line in lines:
            self.log.info("%s", line.render())
        if lines:
            self._logged = output.cursor.to_json()

    def _where(self) -> dict[str, Any] | None:
        """The deferred task instance's XCom coordinates (None: a trigger run outside a triggerer)."""
        ti = getattr(self, "task_instance", None)
        if ti is None or not all(getattr(ti, k, None) is not None for k in ("dag_id", "task_id", "run_id")):
            return None
        map_index = getattr(ti, "map_index", None)
        return {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id,
                "map_index": -1 if map_index is None else map_index}

    async def _kept_cursor(self) -> Cursor | None:
        """The cursor an earlier run of this trigger kept for this application, if any."""
        where = self._where()
        if where is None or self._unkept:
            return None
        try:
            from airflow.sdk.execution_time.xcom import XCom  # the site's XCom backend
            kept = await XCom.aget_one(key=OUTPUT_CURSOR_KEY, **where)
        except Exception as e:  # noqa: BLE001 - the output is followed from where the task deferred
            self.log.warning("How far an earlier trigger followed the job's output cannot be read (%s): "
                             "it is followed from where the task deferred", e)
            return None
        if isinstance(kept, dict) and kept.get("application_id") == self.application_id:
            return Cursor.from_json(json.dumps(kept.get("cursor") or {}))
        return None

    async def _keep(self, cursor: Cursor) -> None:
        where = self._where()
        if where is None or self._unkept:
            return
        try:
            from airflow.sdk.execution_time.xcom import XCom
            await XCom.aset(OUTPUT_CURSOR_KEY, {"application_id": self.application_id,
                                                    "cursor": json.loads(cursor.to_json())}, **where)
        except Exception as e:  # noqa: BLE001 - following goes on; only a restarted trigger's resumption is lost
            self._unkept = True
            self.log.warning("Cannot keep how far the job's output was followed (%s): a trigger started again "
                             "writes it from where the task deferred", e)

    async def on_kill(self) -> None:
        """The user marked the task failed (or cleared it): stop the application."""
        await asyncio.to_thread(self.hook.kill, self.application_id, "task killed from Airflow")
