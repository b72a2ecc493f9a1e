"""OpenLineage events from the Azkaban job type: Azkaban has no lineage of its own, so the runner
reports each TonY job as an OpenLineage run, with the same facets, inputs and outputs as the
Airflow operator (:mod:`tony_workflow.lineage`).

It reports only where OpenLineage is configured, the way the OpenLineage client reads its
configuration: ``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG`` (or an ``openlineage.yml``), or
``OPENLINEAGE__TRANSPORT__*`` variables (set them with Azkaban's ``env.NAME=value`` props or in
the job type's own environment); ``OPENLINEAGE_DISABLED=true`` turns it off. The job is
``<project>.<flow>.<job>`` in the namespace ``OPENLINEAGE_NAMESPACE`` (default ``azkaban``); its
parent is the flow's execution (``<project>.<flow>``, one run id per execution id). A START event
goes out once the application runs, and COMPLETE, FAIL or ABORT (killed) when it ends. The run's
namespace, job name and id go to the job's output properties (``tony.lineage.namespace``,
``tony.lineage.job``, ``tony.lineage.run-id``), so the jobs after it, and whoever reads the
execution, can find the run in the lineage store. A failure to report is said in the job's log
and never fails the job.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tony_workflow.spec import JobSpec
from tony_workflow.status import JobState, JobStatus

__all__ = ["PRODUCER", "Lineage", "configured"]

#: Who produced the events (OpenLineage asks for a URI).
PRODUCER = "urn:tony-workflow:azkaban-jobtype"
_NAMESPACE = "azkaban"


def configured(env: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether OpenLineage is configured for this process (and not disabled)."""
    env = env if env is not None else os.environ
    if str(env.get("OPENLINEAGE_DISABLED", "")).strip().lower() == "true":
        return False
    if env.get("OPENLINEAGE_URL") or env.get("OPENLINEAGE_CONFIG"):
        return True
    if any(k.startswith("OPENLINEAGE__TRANSPORT") and v for k, v in env.items()):
        return True
    return any(os.path.exists(p) for p in ("openlineage.yml", os.path.expanduser("~/.openlineage/openlineage.yml")))


class Lineage:
    """The OpenLineage run of one Azkaban job's TonY application."""

    def __init__(self, spec: JobSpec, backend: str, qualify: Callable[[str], str], say: Callable[[str], None]):
        from openlineage.client import OpenLineageClient
        from openlineage.client.uuid import generate_new_uuid

        self.spec, self.backend, self.qualify, self.say = spec, backend, qualify, say
        self.client = OpenLineageClient()
        self.namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or _NAMESPACE
        c = spec.context
        self.flow = ".".join(p for p in (c.get("project"), c.get("flow_id")) if p)
        self.job = ".".join(p for p in (self.flow, c.get("job_id")) if p) or spec.name or "tony"
        self.run_id = str(generate_new_uuid())
        self.started = False

    def output_props(self) -> dict[str, str]:
        return {"tony.lineage.namespace": self.namespace, "tony.lineage.job": self.job,
                "tony.lineage.run-id": self.run_id}

    def _parent(self) -> dict[str, Any]:
        from openlineage.client.facet_v2 import parent_run

        execution = self.spec.context.get("execution_id")
        if not (self.flow and execution):
            return {}
        # One run id per execution of the flow, whichever of its jobs names it.
        run = uuid.uuid5(uuid.NAMESPACE_URL, f"azkaban:{self.namespace}:{self.flow}:{execution}")
        return {"parent": parent_run.ParentRunFacet(run=parent_run.Run(runId=str(run)),
                                                    job=parent_run.Job(namespace=self.namespace, name=self.flow))}

    def _emit(self, kind: str, status: JobStatus | None) -> None:
        from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

        from tony_workflow.lineage import datasets, facets

        read, written = datasets(self.spec, status, self.qualify)
        job_facets, run_facets = facets(self.spec, self.backend, status)
        event = RunEvent(eventType=getattr(RunState, kind), eventTime=datetime.now(UTC).isoformat(),
                         run=Run(runId=self.run_id, facets={**self._parent(), **run_facets}),
                         job=Job(namespace=self.namespace, name=self.job, facets=job_facets), producer=PRODUCER,
                         inputs=[InputDataset(namespace=d.namespace, name=d.name) for d in read],
                         outputs=[OutputDataset(namespace=d.namespace, name=d.name) for d in written])
        try:
            self.client.emit(event)
        except Exception as exc:  # noqa: BLE001 - the lineage store's trouble is not the job's
            self.say(f"warning: the OpenLineage {kind} event of run {self.run_id} was not sent: {exc}")

    def start(self, status: JobStatus) -> None:
        if not self.started:
            self.started = True
            self._emit("START", status)

    def end(self, status: JobStatus) -> None:
        if not self.started:
            self.start(status)
        kind = ("COMPLETE" if status.succeeded else "ABORT" if status.state == JobState.KILLED else "FAIL")
        self._emit(kind, status)
