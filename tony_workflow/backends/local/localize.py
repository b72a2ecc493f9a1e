"""The embedded cluster's localization of TonY's resources (:mod:`tony_workflow.spec.resources`).

At submission each entry is staged once under the job's directory, ``resources/<owner>/<name>``
(``<owner>``: ``_all`` for every container, else the task type), read-only: a file copied, an
archive unpacked into a directory of its name, a local directory copied whole, an ``hdfs://``
file downloaded and an ``hdfs://`` directory's files each downloaded under their own names. A
container then gets what its type is given (:func:`links`), as a YARN NodeManager localizes a
resource once and links it into each container: files hard-linked, directories linked.

A resource that cannot be staged (gone since the check, an archive that will not unpack, a file
system that refuses) refuses the job, naming the key and the entry.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ...archive import unpack
from ...spec import SpecError, SpecIssue
from ...spec.resources import Resource, resources_by_type
from ...storage import open_storage

__all__ = ["MANIFEST", "link_into", "link_or_copy", "links", "read_only", "stage"]

#: What was staged for whom: {owner: {name: path relative to the job's directory}}.
MANIFEST = "resources.json"
_ALL = "_all"


def _remote(r: Resource, dest: Path) -> dict[str, Path]:
    """Downloads ``r`` (a file, or a directory's first-level files) into ``dest``."""
    store = open_storage(r.source)
    files = [key for key in store.list("") if "/" not in key]
    if files:  # a directory: each file directly in it, by its own name (TonY's rule)
        out = {}
        for key in sorted(files):
            store.get(key, dest / key)
            out[key] = dest / key
        return out
    parent, _, base = r.source.rstrip("/").rpartition("/")
    if not r.archive:
        open_storage(parent).get(base, dest / r.name)
        return {r.name: dest / r.name}
    # The download keeps the source's name, by which unpack tells its kind.
    download = dest / ".download" / base
    open_storage(parent).get(base, download)
    unpack(download, dest / r.name)
    shutil.rmtree(download.parent)
    return {r.name: dest / r.name}


def _local(r: Resource, dest: Path) -> dict[str, Path]:
    src = r.local_path
    target = dest / r.name
    if r.archive:
        unpack(src, target)
    elif src.is_dir():
        shutil.copytree(src, target, symlinks=False)
    else:
        shutil.copy2(src, target)
    return {r.name: target}


def read_only(root: Path) -> None:
    """Takes the write bits off ``root`` (a file) or every file below it (directories stay
    writable): what is staged once for a job's containers stays as it was given."""
    paths = [root] if root.is_file() else [Path(d) / f for d, _, fs in os.walk(root) for f in fs]
    for path in paths:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """A hard link to ``src`` (a staged, read-only file), or a copy where links cannot be made."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stage(conf: dict[str, str], app_dir: Path) -> None:
    """Stages every resource ``conf`` names under ``app_dir`` and writes the manifest. Raises
    SpecError naming the key and entry of one that cannot be staged (nothing of the job then runs:
    the caller removes ``app_dir``)."""
    manifest: dict[str, dict[str, str]] = {}
    for owner, entries in resources_by_type(conf).items():
        who = owner or _ALL
        root = app_dir / "resources" / who
        for r in entries:
            dest = root / f"{len(manifest.get(who, {}))}"  # each entry its own directory: names may repeat
            dest.mkdir(parents=True, exist_ok=True)
            try:
                staged = _remote(r, dest) if r.remote else _local(r, dest)
            except (OSError, ValueError) as e:
                raise SpecError([SpecIssue(r.key, conf[r.key], f"{r.source} could not be given to the containers: "
                                           f"{e}")]) from None
            for name, path in staged.items():
                read_only(path)
                manifest.setdefault(who, {})[name] = path.relative_to(app_dir).as_posix()
    if manifest:
        (app_dir / MANIFEST).write_text(json.dumps(manifest, indent=1))


def links(app_dir: Path, task_type: str | None) -> dict[str, Path]:
    """What a container of ``task_type`` (None: the ApplicationMaster's) is given, by name: its
    type's entries over every container's."""
    try:
        manifest = json.loads((app_dir / MANIFEST).read_text())
    except FileNotFoundError:
        return {}
    named = dict(manifest.get(_ALL, {}))
    if task_type is not None:
        named.update(manifest.get(task_type, {}))
    return {name: app_dir / rel for name, rel in named.items()}


def link_into(app_dir: Path, task_type: str | None, workdir: Path) -> None:
    """Gives ``workdir`` the resources of ``task_type``: files hard-linked (copied where links
    cannot be made), directories as symbolic links to the staged, read-only copy."""
    for name, path in links(app_dir, task_type).items():
        target = workdir / name
        if target.exists() or target.is_symlink():
            target.unlink() if not target.is_dir() or target.is_symlink() else shutil.rmtree(target)
        if path.is_dir():
            target.symlink_to(path)
        else:
            link_or_copy(path, target)
