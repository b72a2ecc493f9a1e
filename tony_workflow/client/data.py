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

from ..errors import DataError
from ..spec import JobSpec
from ..spec.data import MANIFEST_KEY
from ..spec.errors import SpecIssue
from ..spec.site import tony_home

__all__ = ["cmd_data_inspect", "data_issues", "inspect_summary", "stage_input", "with_manifest"]


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file:")


def data_issues(spec: JobSpec, backend: str, cluster_files: bool, *, hadoop_conf_dir: str | None = None,
                login: Any = None) -> tuple[list[SpecIssue], dict[str, Any]]:
    """Every problem of the job's inputs on ``backend`` (``cluster_files``: whether it can read HDFS,
    through ``hadoop_conf_dir`` as ``login``), and the plans of those without one."""
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
    plans, errors = plan_inputs(ready, hadoop_conf_dir=hadoop_conf_dir, login=login)
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


def stage_input(local: str | os.PathLike[str], backend: Any, name: str) -> str:
    """Where a job on ``backend`` reads the local directory ``local`` from: itself on the embedded
    cluster; on YARN, a copy in the user's HDFS home (``.tony/inputs/<name>``, replaced whole),
    named by its full URI. For example DAGs and trials that make their data on the client."""
    from pathlib import Path

    from ..process import user_name
    from ..storage import open_storage, qualified
    source = Path(local)
    if getattr(backend, "name", "local") != "yarn":
        return str(source.resolve())
    conf_dir = str(backend.conf_dir)
    uri = qualified(f"hdfs:///user/{user_name()}/.tony/inputs/{name}", conf_dir)
    store = open_storage(uri, hadoop_conf_dir=conf_dir, login=getattr(backend, "login", None))
    for key in store.list(""):
        store.delete(key)
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        store.put(path, path.relative_to(source).as_posix())
    return uri


_UNIT_NAMES = {"parquet": "row groups", "orc": "stripes", "avro": "runs of blocks", "tfrecord": "runs of records"}


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def inspect_summary(plan: Any) -> dict[str, Any]:
    """What ``tony data inspect`` says of a planned input, as JSON-safe data."""
    return {"paths": list(plan.input.paths), "format": plan.format, "rows": plan.rows, "bytes": plan.bytes,
            "units": len(plan.units), "unit": _UNIT_NAMES[plan.format], "fingerprint": plan.fingerprint,
            "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in plan.schema],
            "filter": plan.input.filter.text if plan.input.filter else None,
            "files": [{"path": f.path, "rows": f.info.rows, "bytes": f.size, "units": len(f.info.units)}
                      for f in plan.files]}


def verify(plan: Any) -> None:
    """Reads every unit of the plan whole: a damaged block is found now, not in the middle of training."""
    from ..data.reader import _Source
    source = _Source(plan, plan.columns)
    try:
        for index in range(len(plan.units)):
            source.unit(index)
    finally:
        source.close()


def cmd_data_inspect(args: Any) -> int:
    """``tony data inspect PATH...``: the input's format, schema, rows, bytes and units."""
    from ..data.manifest import plan_input
    from ..spec.data import DataInput, parse_filter
    try:
        flt = parse_filter(args.filter) if args.filter else None
    except ValueError as e:
        raise DataError(f"--filter {args.filter!r}: {e}") from None
    columns = tuple(c.strip() for c in args.columns.split(",") if c.strip()) if args.columns else None
    plan = plan_input(DataInput("", tuple(args.paths), args.format, columns, flt))
    if args.verify:
        verify(plan)
    summary = inspect_summary(plan)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{', '.join(plan.input.paths)}: {plan.format}, {len(plan.files)} file{'s' * (len(plan.files) != 1)}, "
          f"{plan.rows:,} rows{' matching the filter' if flt else ''}, {_size(plan.bytes)}, "
          f"{len(plan.units):,} units ({_UNIT_NAMES[plan.format]})" + (", every unit read" if args.verify else ""))
    width = max([len(f.name) for f in plan.schema] + [6])
    print("schema:")
    for f in plan.schema:
        print(f"  {f.name:<{width}}  {f.type}{'' if f.nullable else ' not null'}")
    print("files:")
    path_width = max(len(f.path) for f in plan.files) if plan.files else 4
    print(f"  {'path':<{path_width}}  {'rows':>12}  {'bytes':>10}  units")
    for f in plan.files:
        print(f"  {f.path:<{path_width}}  {f.info.rows:>12,}  {_size(f.size):>10}  {len(f.info.units)}")
    return 0
