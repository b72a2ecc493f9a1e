"""An input's plan, made once before anything runs: its files, its units and their rows, its schema.

:func:`plan_input` lists the input's paths, reads each file's footer or header (Avro and TFRecord
files are walked block by block, since they keep no index), checks that the files' schemas agree
and hold the columns asked for, and, with a row filter, counts the rows of each unit that match
(units the format's statistics rule out are not read at all). A bad input raises
:class:`~tony_workflow.errors.DataError` listing every file at fault.

What a file's inspection found is kept under ``$TONY_HOME/data/index``, by the file's path, size
and modification time, so a file that does not change is walked once, not at every submission.

The plan goes to every task as the job's manifest (:func:`write_manifest`, ``tony-data.json``
beside the task's command, :data:`MANIFEST_ENV` naming it), so every rank reads the same files in
the same units: a file added to a directory while the job runs is not taken by some ranks and
missed by others. Its :attr:`Plan.fingerprint` identifies it in a reader's saved state, so a
checkpoint is never resumed over other data.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import DataError
from ..spec.data import MANIFEST_ENV, MANIFEST_NAME, DataInput, Filter
from .formats import BadFile, FileInfo, Unit, format_named, inferred_format
from .formats.tfrecord import compression_of
from .fs import FileStat, FileSystem, filesystem_for, qualified_path

__all__ = ["MANIFEST_ENV", "MANIFEST_NAME", "Plan", "PlannedFile", "load_manifest", "plan_input", "plan_inputs",
           "write_manifest"]

_VERSION = 1
#: How many bad files one message names before it counts the rest.
_NAMED = 10


@dataclass(frozen=True)
class PlannedFile:
    path: str
    size: int
    mtime: float
    info: FileInfo


@dataclass
class Plan:
    """One input, planned: ``units`` are (file, unit, rows) in the files' order, rows after the
    filter, units no row of which matches left out."""

    input: DataInput
    format: str
    schema: pa.Schema
    files: list[PlannedFile]
    units: list[tuple[int, int, int]]
    fingerprint: str = ""
    fs: FileSystem | None = field(default=None, repr=False, compare=False)
    #: For each unit, the hosts keeping a replica of most of its bytes (HDFS); empty: none known.
    unit_hosts: list[list[str]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(u[2] for u in self.units)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def columns(self) -> list[str]:
        return list(self.input.columns) if self.input.columns is not None else self.schema.names

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input.to_dict(), "format": self.format,
                "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
                "fingerprint": self.fingerprint,
                "files": [{"path": f.path, "size": f.size, "mtime": f.mtime, "rows": f.info.rows,
                           "units": [[u.rows, u.offset, u.length] for u in f.info.units], "extra": f.info.extra}
                          for f in self.files],
                "units": [list(u) for u in self.units], "unit_hosts": self.unit_hosts}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        from ..spec.data import parse_filter
        given = data["input"]
        inp = DataInput(given["name"], tuple(given["paths"]), given.get("format"),
                        tuple(given["columns"]) if given.get("columns") is not None else None,
                        parse_filter(given["filter"]) if given.get("filter") else None, given.get("remainder", "drop"))
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
        files = []
        for f in data["files"]:
            units = tuple(Unit(int(r), int(o), int(n)) for r, o, n in f["units"])
            files.append(PlannedFile(f["path"], int(f["size"]), float(f["mtime"]),
                                     FileInfo(schema, int(f["rows"]), units, dict(f.get("extra") or {}))))
        planned = [(int(f), int(u), int(r)) for f, u, r in data["units"]]
        return cls(inp, data["format"], schema, files, planned, data.get("fingerprint", ""),
                   unit_hosts=[list(h) for h in data.get("unit_hosts") or []])


def _fingerprint(plan: Plan) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([plan.format, plan.input.filter.text if plan.input.filter else None]).encode())
    for f in plan.files:
        digest.update(json.dumps([f.path, f.size, f.mtime]).encode())
    digest.update(json.dumps(plan.units).encode())
    return digest.hexdigest()[:16]


def _same_schema(a: pa.Schema, b: pa.Schema) -> str | None:
    """How ``b`` differs from ``a`` (names and types, not nullability or metadata), or None."""
    if a.names != b.names:
        missing = [n for n in a.names if n not in b.names]
        extra = [n for n in b.names if n not in a.names]
        if missing or extra:
            parts = ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"adds {', '.join(extra)}"] if extra else [])
            return " and ".join(parts)
        return f"has its columns in another order ({', '.join(b.names)})"
    for fa, fb in zip(a, b):
        if not fa.type.equals(fb.type):
            return f"has column {fa.name} as {fb.type}, the first file as {fa.type}"
    return None


def _open(fs: FileSystem, stat: FileStat) -> Any:
    return fs.open(stat.path, stat.size)


#: Where what a file's inspection found is kept, by the file's path, size and time: an Avro or
#: TFRecord file is walked through once, not at every submission of a job that reads it.
INDEX_VERSION = 1


def _index_path(fmt: str, stat: FileStat) -> Path | None:
    try:
        from ..spec.site import tony_home
    except ImportError:  # pragma: no cover - the spec package is always there
        return None
    key = hashlib.sha256(json.dumps([INDEX_VERSION, fmt, stat.path, stat.size, stat.mtime]).encode()).hexdigest()
    return tony_home() / "data" / "index" / key[:2] / f"{key}.json"


def _cached(fmt: str, stat: FileStat) -> FileInfo | None:
    where = _index_path(fmt, stat)
    try:
        data = json.loads(where.read_text()) if where is not None else None
    except (OSError, ValueError):
        return None
    if not data:
        return None
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
    return FileInfo(schema, int(data["rows"]), tuple(Unit(*u) for u in data["units"]), dict(data.get("extra") or {}))


def _keep(fmt: str, stat: FileStat, info: FileInfo) -> None:
    where = _index_path(fmt, stat)
    if where is None:
        return
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        part = where.with_name(where.name + f".{os.getpid()}.tony-part")
        part.write_text(json.dumps({"schema": base64.b64encode(info.schema.serialize().to_pybytes()).decode(),
                                    "rows": info.rows, "units": [[u.rows, u.offset, u.length] for u in info.units],
                                    "extra": info.extra}))
        os.replace(part, where)
    except OSError:
        pass  # a cache: the next submission inspects the file again


def _inspect(fs: FileSystem, fmt: str, stat: FileStat) -> FileInfo:
    cached = _cached(fmt, stat)
    if cached is not None:
        return cached
    f = _open(fs, stat)
    try:
        if fmt == "tfrecord":
            info = format_named(fmt).inspect(f, stat.size, compression_of(stat.path))  # type: ignore[call-arg]
        else:
            info = format_named(fmt).inspect(f, stat.size)
    finally:
        f.close()
    _keep(fmt, stat, info)
    return info


def _count(fs: FileSystem, fmt: str, planned: PlannedFile, flt: Filter) -> list[int]:
    """Rows of each unit of the file that match the filter (0 for units ruled out unread)."""
    reader = format_named(fmt)
    expression = flt.expression()
    f = _open(fs, FileStat(planned.path, planned.size, planned.mtime))
    try:
        ruled_out = reader.pruned(planned.info, f, expression)
        opened = None
        counts = []
        for i, unit in enumerate(planned.info.units):
            if ruled_out[i] or unit.rows == 0:
                counts.append(0)
                continue
            columns = list(flt.columns) if reader.columnar else None
            opened = reader.open(f) if opened is None else opened
            table = reader.read(opened, planned.info, i, columns)
            counts.append(table.filter(expression).num_rows)
        return counts
    finally:
        f.close()


def _bad(inp: DataInput, problems: list[tuple[str, str]]) -> DataError:
    named = [f"{path}: {why}" for path, why in problems[:_NAMED]]
    more = f" (and {len(problems) - _NAMED} more files)" if len(problems) > _NAMED else ""
    if len(named) == 1:
        path, why = problems[0]
        return DataError(why, inp.name, path)
    return DataError("; ".join(named) + more, inp.name)


def plan_input(inp: DataInput, *, hadoop_conf_dir: str | None = None, login: Any = None, threads: int = 8) -> Plan:
    """The plan of ``inp``: every file its paths name, inspected (HDFS through ``hadoop_conf_dir``,
    as ``login``: see :func:`~.fs.filesystem_for`). Raises DataError naming every file at fault (a
    path that names nothing, an unknown format, a damaged file, a schema that differs from the
    first file's, a column that is not there)."""
    stats: list[tuple[FileSystem, FileStat]] = []
    fs: FileSystem | None = None
    problems: list[tuple[str, str]] = []
    for path in inp.paths:
        try:
            fs = filesystem_for(path, hadoop_conf_dir=hadoop_conf_dir, login=login)
            stats.extend((fs, s) for s in fs.expand(qualified_path(path, hadoop_conf_dir)))
        except FileNotFoundError as e:
            problems.append((path, str(e).split(": ", 1)[-1]))
        except (OSError, ValueError) as e:
            problems.append((path, str(e)))
    if problems:
        raise _bad(inp, problems)
    seen: dict[str, tuple[FileSystem, FileStat]] = {}
    for pair in stats:
        seen.setdefault(pair[1].path, pair)
    stats = list(seen.values())
    fmt = inp.format
    if fmt is None:
        kinds = {s.path: inferred_format(s.path) for _, s in stats}
        unknown = [p for p, k in kinds.items() if k is None]
        if unknown:
            why = (f"its name does not say its format (.parquet, .orc, .avro, .tfrecord); set "
                   f"tony.data.{inp.name}.format")
            raise _bad(inp, [(p, why) for p in unknown])
        found = sorted({k for k in kinds.values() if k})
        if len(found) > 1:
            raise DataError(f"its files are of several formats ({', '.join(found)}); one input is one format",
                            inp.name)
        fmt = found[0]
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(stats)))) as pool:
        def inspect(pair: tuple[FileSystem, FileStat]) -> FileInfo | BadFile | OSError:
            try:
                return _inspect(pair[0], fmt, pair[1])
            except (BadFile, OSError) as e:
                return e
        infos = list(pool.map(inspect, stats))
    files = []
    for (_, stat), info in zip(stats, infos):
        if isinstance(info, BaseException):
            problems.append((stat.path, str(info) if isinstance(info, BadFile) else f"cannot be read: {info}"))
        else:
            files.append(PlannedFile(stat.path, stat.size, stat.mtime, info))
    if problems:
        raise _bad(inp, problems)
    with_rows = [f for f in files if f.info.units] or files
    schema = with_rows[0].info.schema
    for f in with_rows[1:]:
        differs = _same_schema(schema, f.info.schema)
        if differs:
            problems.append((f.path, f"its schema differs from {with_rows[0].path}'s: it {differs}"))
    if problems:
        raise _bad(inp, problems)
    _check_columns(inp, fmt, schema, with_rows[0])
    plan = Plan(inp, fmt, schema, files, [], fs=fs)
    counts = [[u.rows for u in f.info.units] for f in files]
    if inp.filter is not None:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files)))) as pool:
            counts = list(pool.map(lambda pair: _count(pair[0], fmt, *pair[1:]),
                                   [(s[0], f, inp.filter) for s, f in zip(stats, files)]))
    plan.units = [(i, j, rows) for i, per_file in enumerate(counts) for j, rows in enumerate(per_file) if rows > 0]
    plan.fingerprint = _fingerprint(plan)
    plan.unit_hosts = _unit_hosts(plan, [s[0] for s in stats], threads)
    return plan


def _unit_hosts(plan: Plan, systems: list[FileSystem], threads: int) -> list[list[str]]:
    """For each unit, the hosts keeping its bytes' largest block (one NameNode call a file)."""
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(plan.files)))) as pool:
        blocks = list(pool.map(lambda pair: pair[0].blocks(pair[1].path, pair[1].size), zip(systems, plan.files)))
    if not any(blocks):
        return []
    out = []
    for file_index, unit_index, _ in plan.units:
        unit = plan.files[file_index].info.units[unit_index]
        best: tuple[int, list[str]] = (0, [])
        for offset, length, hosts in blocks[file_index]:
            overlap = min(unit.offset + unit.length, offset + length) - max(unit.offset, offset)
            if overlap > best[0]:
                best = (overlap, hosts)
        out.append(best[1])
    return out


def _check_columns(inp: DataInput, fmt: str, schema: pa.Schema, first: PlannedFile) -> None:
    from difflib import get_close_matches
    unions = set(first.info.extra.get("unions") or [])
    wanted = [*(inp.columns or ()), *(inp.filter.columns if inp.filter else ())]
    problems = []
    for column in dict.fromkeys(wanted):
        if column in schema.names:
            continue
        if column in unions:
            problems.append(f"column {column} is an Avro union of several types, which has no array form; leave "
                            "it out, or write it as one type")
            continue
        close = get_close_matches(column, schema.names, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append(f"has no column {column} (it has {', '.join(schema.names) or 'none'}){hint}")
    if inp.columns is None and unions:
        problems.append(f"columns {', '.join(sorted(unions))} are Avro unions of several types, which have no array "
                        f"form: name the columns to read with tony.data.{inp.name}.columns")
    if not schema.names and not unions:
        problems.append("has no columns")
    if problems:
        raise DataError("; ".join(problems), inp.name, first.path)


def plan_inputs(inputs: dict[str, DataInput], **options: Any) -> tuple[dict[str, Plan], list[DataError]]:
    """Every input planned, and the errors of those that could not be (every one)."""
    plans, errors = {}, []
    for name, inp in inputs.items():
        try:
            plans[name] = plan_input(inp, **options)
        except DataError as e:
            errors.append(e)
    return plans, errors


def write_manifest(plans: dict[str, Plan], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".tony-part")
    part.write_text(json.dumps({"version": _VERSION, "inputs": {n: p.to_dict() for n, p in plans.items()}}))
    os.replace(part, path)
    return path


def load_manifest(path: str | os.PathLike[str] | None = None) -> dict[str, Plan]:
    """The job's manifest: ``path``, else ``$TONY_DATA_MANIFEST``, else ``tony-data.json`` here."""
    where = Path(path or os.environ.get(MANIFEST_ENV) or MANIFEST_NAME)
    try:
        data = json.loads(where.read_text())
    except FileNotFoundError:
        raise DataError(f"no data manifest at {where}: the job declares no inputs (tony.data.<name>.path), or "
                        "this process is not one of its tasks; outside a job, give dataset() a path") from None
    if data.get("version") != _VERSION:
        raise DataError(f"{where} is a manifest of version {data.get('version')}, this reader reads {_VERSION}")
    return {name: Plan.from_dict(p) for name, p in data["inputs"].items()}
