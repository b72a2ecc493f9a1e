"""TonY's resources: files a job's containers are given, as ``tony.containers.resources`` (every
container, the ApplicationMaster's too) and ``tony.<type>.resources`` (that type's) name them.

Each key holds a comma-separated list of entries, in TonY's forms:

* ``path``: a file, given to the container under its own name;
* ``path::alias``: the same file under the name ``alias``;
* ``path#archive`` (or ``path::alias#archive``): a zip, jar, tar, tar.gz or tgz, unpacked into a
  directory of that name;
* a local directory: given whole, as a directory of its name (TonY zips it and YARN unpacks it);
* an ``hdfs://`` directory: each file directly in it, under its own name (not its subdirectories,
  as TonY does).

Local paths are files of the submitting machine; an ``hdfs://`` (or ``webhdfs://``) URI is read
from the cluster's file system. A type's own entry wins over an entry of every container's with
the same name. What the names may be, and which files must exist, is checked before anything is
submitted (:func:`resource_issues`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .data import MANIFEST_KEY, MANIFEST_NAME
from .errors import SpecIssue

__all__ = ["ARCHIVE_SUFFIXES", "RESERVED_NAMES", "Resource", "absolute", "parse", "resource_issues",
           "resources_by_type", "resources_of"]

#: What YARN unpacks as an archive, and so does the embedded cluster.
ARCHIVE_SUFFIXES = (".zip", ".jar", ".tar", ".tar.gz", ".tgz")
#: Names a container's directory already uses for what the runtime ships: a resource may not take one.
RESERVED_NAMES = frozenset({"src", "venv", "hadoop-conf", "spec.json", "runtime", "environment",
                            "checkpoint", "tensorboard", "handoff", "work", ".tony-bin", "stdout", "stderr", "tmp",
                            "launch_container.sh", "container_tokens", MANIFEST_NAME})
_CONTAINERS_KEY = "tony.containers.resources"
_TYPE_KEY = re.compile(r"^tony\.([A-Za-z0-9_-]+)\.resources$")
_ARCHIVE = "#archive"
_ALIAS = "::"


@dataclass(frozen=True)
class Resource:
    """One entry: ``source`` as written (a local path or a URI), ``name`` in the container's
    directory, whether it is an ``archive`` to unpack, and the ``key`` that named it."""

    source: str
    name: str
    archive: bool
    key: str

    @property
    def remote(self) -> bool:
        """Whether the cluster's file system holds it (a URI other than ``file:``)."""
        return "://" in self.source and not self.source.startswith("file:")

    @property
    def local_path(self) -> Path:
        return Path(self.source.removeprefix("file://").removeprefix("file:"))


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def parse(key: str, value: str) -> list[Resource]:
    """The entries of ``key``'s ``value``. Raises ValueError saying what is wrong with an entry."""
    out = []
    for entry in _split(value):
        path, archive = entry, entry.lower().endswith(_ARCHIVE)
        if archive:
            path = entry[: -len(_ARCHIVE)]
        parts = path.split(_ALIAS)
        if len(parts) > 2 or not parts[0]:
            raise ValueError(f"{entry!r} is not path, path::alias or path#archive")
        source = parts[0]
        name = parts[1] if len(parts) == 2 else source.rstrip("/").rsplit("/", 1)[-1]
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"{entry!r}: {name!r} cannot be a file's name in the container")
        out.append(Resource(source, name, archive, key))
    return out


def _keys(conf: dict[str, str]) -> list[tuple[str | None, str]]:
    """(task type or None for every container, key) for each resources key ``conf`` sets."""
    out: list[tuple[str | None, str]] = []
    for key in sorted(conf):
        if key == _CONTAINERS_KEY:
            out.append((None, key))
        elif (m := _TYPE_KEY.match(key)) and m.group(1) not in ("containers", "application"):
            out.append((m.group(1), key))
    return out


def resources_by_type(conf: dict[str, str]) -> dict[str | None, list[Resource]]:
    """Every resources key's entries: None's are every container's, a type's its own. Raises
    ValueError for an entry that cannot be read (:func:`resource_issues` reports it first). The
    plan of the job's inputs (``tony.data.manifest``, set by the client) is every container's
    ``tony-data.json``."""
    out = {owner: parse(key, conf[key]) for owner, key in _keys(conf) if _split(conf[key] or "")}
    if conf.get(MANIFEST_KEY):
        out.setdefault(None, []).append(Resource(conf[MANIFEST_KEY], MANIFEST_NAME, False, MANIFEST_KEY))
    return out


def resources_of(conf: dict[str, str], task_type: str | None) -> list[Resource]:
    """What a container of ``task_type`` is given (None: the ApplicationMaster), by name: its
    type's entries win over every container's."""
    by_type = resources_by_type(conf)
    named = {r.name: r for r in by_type.get(None, [])}
    if task_type is not None:
        named.update({r.name: r for r in by_type.get(task_type, [])})
    return list(named.values())


def absolute(value: str, base: Path) -> str:
    """``value`` with each relative local path made absolute against ``base`` (aliases and
    ``#archive`` kept): a spec's paths mean the same place wherever it is submitted from."""
    out = []
    for entry in _split(value):
        if "://" in entry or entry.startswith("file:") or os.path.isabs(entry):
            out.append(entry)
        else:
            out.append(str((base / entry).resolve()) if _ALIAS not in entry and not entry.endswith(_ARCHIVE)
                       else str(base.resolve() / entry))
    return ",".join(out)


def resource_issues(conf: dict[str, str], declared: set[str], remote_ok: bool,
                    source: str | None = None) -> list[SpecIssue]:
    """What is wrong with the resources ``conf`` names: an entry that cannot be read, a name the
    runtime uses, a local file that is not there, a type the job does not have, or (when the
    cluster cannot read its file system, ``remote_ok`` False) a URI."""
    issues = []
    for owner, key in _keys(conf):
        value = conf[key] or ""
        if owner is not None and owner not in declared:
            issues.append(SpecIssue(key, value, f"names files for task type {owner!r}, which the job does not have "
                                    f"(it has {', '.join(sorted(declared)) or 'none'})", source))
            continue
        try:
            entries = parse(key, value)
        except ValueError as e:
            issues.append(SpecIssue(key, value, f"{e}: each entry is path, path::alias or path#archive", source))
            continue
        seen: set[str] = set()
        for r in entries:
            if r.name in RESERVED_NAMES:
                issues.append(SpecIssue(key, value, f"{r.name!r} is a name the runtime gives a container's own "
                                        "files: give the entry another with ::alias", source))
            elif r.name in seen:
                issues.append(SpecIssue(key, value, f"two entries are named {r.name!r} in the container: give one "
                                        "another with ::alias", source))
            seen.add(r.name)
            if r.remote:
                if not remote_ok:
                    issues.append(SpecIssue(key, value, f"{r.source} is on a cluster file system, which this "
                                            "backend cannot read without a Hadoop configuration (HADOOP_CONF_DIR)",
                                            source))
                continue
            path = r.local_path
            if not path.exists():
                issues.append(SpecIssue(key, value, f"{path} does not exist on this machine", source))
            elif r.archive and not (path.is_file() and path.name.lower().endswith(ARCHIVE_SUFFIXES)):
                issues.append(SpecIssue(key, value, f"{path} is marked #archive, and only a "
                                        f"{', '.join(ARCHIVE_SUFFIXES)} file can be unpacked", source))
    return issues
