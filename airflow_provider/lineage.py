"""OpenLineage for :class:`~airflow_provider.operators.TonyOperator`: the job's lineage
(:mod:`tony_workflow.lineage`) as the OpenLineage provider's operator hooks return it, with the
operator's ``inlets`` and ``outlets`` (Airflow assets) among the inputs and outputs.

Only the operator's hooks import this module, and only where the OpenLineage provider is
installed (it is with the ``airflow`` extra).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from airflow.providers.openlineage.extractors import OperatorLineage

from tony_workflow.lineage import datasets, facets
from tony_workflow.spec import JobSpec
from tony_workflow.status import JobStatus

__all__ = ["lineage"]


def lineage(spec: JobSpec | None, backend: str, *, qualify: Callable[[str], str], inlets: Iterable[Any] = (),
            outlets: Iterable[Any] = (), status: JobStatus | None = None) -> OperatorLineage:
    """The ``OperatorLineage`` of a job: ``spec`` (None: it could not be read; only the operator's
    own inlets and outlets are known), ``qualify`` turning a location into a full URI on this
    cluster, and the job's final ``status`` once it has one."""
    inputs, outputs = datasets(spec, status, qualify, inputs=[a.uri for a in inlets if getattr(a, "uri", None)],
                               outputs=[a.uri for a in outlets if getattr(a, "uri", None)])
    job_facets, run_facets = facets(spec, backend, status)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets, job_facets=job_facets)
