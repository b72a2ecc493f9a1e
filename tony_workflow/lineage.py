"""OpenLineage for a training job: what it read, what it wrote, and the job itself, for the
Airflow operator's hooks (:mod:`airflow_provider.lineage`) and the Azkaban job type's own events
(:mod:`azkaban_jobtype.lineage`).

- **Inputs**: the spec's ``tony.lineage.inputs``, its declared inputs' paths (``tony.data.<input>.path``,
  with the columns read as a schema facet once planned), and the Airflow operator's ``inlets``.
- **Outputs**: the job's checkpoint directory, its model (known at the start only when
  ``tony.checkpoint.location`` names it; once the job runs, from its status), the spec's
  ``tony.lineage.outputs`` (and the Airflow operator's ``outlets``).
- **Facets**: the job facet ``tony`` (:class:`TonyJobFacet`: framework, backend, queue, each
  task type's instances and resources) and, at the end, the run facet ``tony``
  (:class:`TonyRunFacet`: application id, final state, sessions, retries, reclaims, ApplicationMaster
  attempts, the tracking and TensorBoard links, the checkpoint location and the last reported
  step and metrics); a failed job adds OpenLineage's ``errorMessage`` with its diagnostics.

Datasets are named by OpenLineage's naming rules: ``hdfs://namenode:port`` and the path for HDFS
(an ``hdfs:///path`` is given the NameNode of the cluster's ``fs.defaultFS``), ``file`` and the
absolute path for local files, ``s3://bucket`` (``gs://``...) and the key for object stores,
``scheme://authority`` and the path otherwise.

It imports ``openlineage-python`` (the ``lineage`` extra; the ``airflow`` extra brings it with
Airflow's OpenLineage provider): only what reports lineage imports this module.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import attr
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import JobFacet, RunFacet, error_message_run, schema_dataset

from .spec import JobSpec
from .status import JobStatus

__all__ = ["TonyJobFacet", "TonyRunFacet", "dataset", "datasets", "facets", "job_facet", "run_facet"]

#: Where the facets' schemas are described: this project's docs/openlineage/.
_SCHEMA = "urn:tony-workflow:openlineage:{name}:1-0-0"
_BUCKETS = {"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "oss"}


@attr.define
class TonyJobFacet(JobFacet):
    """The training job as submitted: ``framework``, ``backend``, ``queue`` (YARN), and ``tasks``:
    each task type's ``instances`` (and ``minInstances`` when elastic), ``memoryMb``, ``vcores``
    and ``gpus``; ``am``: the ApplicationMaster's resources."""

    framework: str
    backend: str
    tasks: dict[str, dict[str, Any]]
    am: dict[str, Any]
    queue: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return _SCHEMA.format(name="TonyJobFacet")


@attr.define
class TonyRunFacet(RunFacet):
    """One run of the job: ``applicationId``, ``finalState``, ``sessions`` started, ``retries`` and
    ``reclaims`` spent, ``amAttempts``, ``trackingUrl``, ``tensorboardUrl``,
    ``checkpointLocation``, and the last ``step`` and ``metrics`` the job reported."""

    applicationId: str  # OpenLineage names facet fields in camel case
    finalState: str
    sessions: int
    retries: int
    reclaims: int
    amAttempts: int
    trackingUrl: str | None = attr.field(default=None)
    tensorboardUrl: str | None = attr.field(default=None)
    checkpointLocation: str | None = attr.field(default=None)
    step: int | None = attr.field(default=None)
    metrics: dict[str, Any] = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return _SCHEMA.format(name="TonyRunFacet")


def dataset(location: str) -> Dataset:
    """The OpenLineage dataset at ``location``, a URI or an absolute local path."""
    if "://" not in location:
        return Dataset(namespace="file", name=location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return Dataset(namespace=f"file://{parts.netloc}" if parts.netloc else "file", name=parts.path)
    if scheme in _BUCKETS:
        return Dataset(namespace=f"{scheme}://{parts.netloc}", name=parts.path.lstrip("/"))
    return Dataset(namespace=f"{scheme}://{parts.netloc}" if parts.netloc else scheme, name=parts.path or "/")


def job_facet(spec: JobSpec, backend: str) -> TonyJobFacet:
    tasks = {}
    for name, task in spec.tasks.items():
        r = task.resources
        entry: dict[str, Any] = {"instances": task.instances, "memoryMb": r.memory_mb, "vcores": r.vcores,
                                 "gpus": r.gpus}
        if task.elastic:
            entry["minInstances"] = task.min_instances
        tasks[name] = entry
    am = spec.am
    return TonyJobFacet(framework=spec.framework, backend=backend, tasks=tasks,
                        am={"memoryMb": am.memory_mb, "vcores": am.vcores, "gpus": am.gpus},
                        queue=(spec.queue or "default") if backend == "yarn" else None)


def run_facet(status: JobStatus) -> TonyRunFacet:
    progress = status.progress or {}
    step = progress.get("step")
    return TonyRunFacet(applicationId=status.application_id, finalState=status.state,
                        sessions=max(status.attempts, status.session_id + 1), retries=status.retries,
                        reclaims=status.reclaims, amAttempts=status.am_attempt, trackingUrl=status.tracking_url,
                        tensorboardUrl=status.tensorboard_url, checkpointLocation=status.checkpoint_location,
                        step=int(step) if isinstance(step, (int, float)) else None,
                        metrics=dict(progress.get("metrics") or {}))


def _unique(datasets: Iterable[Dataset]) -> list[Dataset]:
    seen, out = set(), []
    for d in datasets:
        if (d.namespace, d.name) not in seen:
            seen.add((d.namespace, d.name))
            out.append(d)
    return out


def _schemas(spec: JobSpec) -> dict[str, list[tuple[str, str]]]:
    """Each planned input's columns (name, type), from the manifest the client wrote at submission."""
    import json

    from .spec.data import MANIFEST_KEY
    path = spec.get(MANIFEST_KEY)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            inputs = json.load(f)["inputs"]
        from .data.manifest import Plan
    except (OSError, ValueError, KeyError, ImportError):
        return {}
    out = {}
    for name, data in inputs.items():
        plan = Plan.from_dict(data)
        out[name] = [(f.name, str(f.type)) for f in plan.schema if f.name in plan.columns]
    return out


def data_datasets(spec: JobSpec, qualify: Callable[[str], str]) -> list[Dataset]:
    """The job's declared inputs (``tony.data.<input>.path``), each path a dataset, with the
    columns read as its schema facet once the inputs are planned."""
    schemas = _schemas(spec)
    out = []
    for name, inp in spec.data_inputs.items():
        facets: dict[str, Any] = {}
        if name in schemas:
            facets["schema"] = schema_dataset.SchemaDatasetFacet(
                fields=[schema_dataset.SchemaDatasetFacetFields(name=c, type=t) for c, t in schemas[name]])
        for path in inp.paths:
            d = dataset(qualify(path))
            out.append(Dataset(namespace=d.namespace, name=d.name, facets=facets))
    return out


def datasets(spec: JobSpec | None, status: JobStatus | None, qualify: Callable[[str], str],
             inputs: Iterable[str] = (), outputs: Iterable[str] = ()) -> tuple[list[Dataset], list[Dataset]]:
    """(inputs, outputs) of a job: ``spec`` (None: it could not be read), its ``status`` once it
    has one, ``qualify`` turning a location into a full URI on the job's cluster, and more
    ``inputs`` and ``outputs`` (URIs) from the workflow."""
    read = [dataset(qualify(x)) for x in (spec.lineage_inputs if spec else [])]
    read += data_datasets(spec, qualify) if spec else []
    read += [dataset(x) for x in inputs]
    written = []
    checkpoints = (status.checkpoint_location if status else None) or (spec.checkpoint_location if spec else None)
    if checkpoints:
        written.append(dataset(qualify(checkpoints)))
    written += [dataset(qualify(x)) for x in (spec.lineage_outputs if spec else [])]
    written += [dataset(x) for x in outputs]
    return _unique(read), _unique(written)


def facets(spec: JobSpec | None, backend: str, status: JobStatus | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(job facets, run facets): ``tony`` for each once known, and ``errorMessage`` for a job that
    ended badly."""
    job_facets: dict[str, Any] = {"tony": job_facet(spec, backend)} if spec else {}
    run_facets: dict[str, Any] = {}
    if status is not None and status.is_final:
        run_facets["tony"] = run_facet(status)
        if not status.succeeded:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=status.diagnostics or f"the TonY application ended {status.state}",
                programmingLanguage="python")
    return job_facets, run_facets
