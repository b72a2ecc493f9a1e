"""A job's inputs checked and planned before it is submitted, and their plan shipped with it.

Every input the job declares (``tony.data.<input>.*``) is planned here (:func:`tony_workflow.data.
manifest.plan_input`): its paths must name files of the format, readable, of one schema that holds
the columns and the filter's columns. Each problem is one issue naming the input, the file and
what is wrong, and nothing is submitted. The plans are written as the job's manifest under
``$TONY_HOME/data`` (named by their content, so a resubmission of the same data reuses it) and
the spec's ``tony.data.manifest`` names it: both backends then give it to every container as
``tony-data.json``, as they give TonY's resources.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any
from urllib.parse import urlsplit

from ..errors import DataError, SpecError
from ..spec import JobSpec
from ..spec.data import MANIFEST_KEY
from ..spec.errors import SpecIssue
from ..spec.site import tony_home

__all__ = ["data_issues", "planned", "with_manifest"]


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file:")


def data_issues(spec: JobSpec, backend: str, cluster_files: bool) -> tuple[list[SpecIssue], dict[str, Any]]:
    """Every problem of the job's inputs on ``backend`` (``cluster_files``: whether it can read HDFS),
    and the plans of those without one."""
    inputs = spec.data_inputs
    if not inputs:
        return [], {}
    issues: list[SpecIssue] = []
    ready = {}
    for name, inp in inputs.items():
        key = f"tony.data.{name}.path"
        local = [p for p in inp.paths if _local(p)]
        remote = [p for p in inp.paths if not _local(p)]
        if backend == "yarn" and local:
            issues.append(spec.issue(key, ",".join(local), "is on this machine, which YARN's nodes cannot read: "
                                     "put the input in HDFS (hdfs:///path) and name it there"))
            continue
        if remote and not cluster_files:
            issues.append(spec.issue(key, ",".join(remote), "is in HDFS, which the embedded cluster reads only with a "
                                     "Hadoop configuration (HADOOP_CONF_DIR) that says where it is"))
            continue
        unknown = [p for p in remote if urlsplit(p).scheme.lower() not in ("hdfs", "webhdfs", "swebhdfs")]
        if unknown:
            issues.append(spec.issue(key, ",".join(unknown), "is on a file system the reader does not know: use "
                                     "hdfs://, webhdfs:// or a local path"))
            continue
        ready[name] = inp
    try:
        from ..data.manifest import plan_inputs
    except ImportError as e:
        issues.append(spec.issue(f"tony.data.{next(iter(inputs))}.path", None,
                                 f"reading a job's inputs needs the data extra ({e.name} is missing): pip install "
                                 "'tony-workflow[data]'"))
        return issues, {}
    plans, errors = plan_inputs(ready)
    for error in errors:
        issues.append(_issue(spec, error))
    return issues, plans


def _issue(spec: JobSpec, error: DataError) -> SpecIssue:
    key = f"tony.data.{error.input}.path"
    message = f"{error.path}: {error.message}" if error.path else error.message
    return spec.issue(key, None, message)


def with_manifest(spec: JobSpec, plans: dict[str, Any]) -> JobSpec:
    """``spec`` naming the manifest of ``plans`` in ``tony.data.manifest`` (written under
    ``$TONY_HOME/data``, by its content)."""
    if not plans:
        return spec
    from ..data.manifest import write_manifest
    text = json.dumps({n: p.to_dict() for n, p in sorted(plans.items())}, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    path = write_manifest(plans, tony_home() / "data" / f"manifest-{digest}.json")
    os.chmod(path, 0o644)
    return spec.with_overrides({MANIFEST_KEY: str(path)}, origin="the planned inputs")


def planned(spec: JobSpec, backend: str, cluster_files: bool) -> JobSpec:
    """``spec`` with its inputs' manifest; SpecError listing every problem of its inputs."""
    issues, plans = data_issues(spec, backend, cluster_files)
    if issues:
        raise SpecError(issues)
    return with_manifest(spec, plans)
