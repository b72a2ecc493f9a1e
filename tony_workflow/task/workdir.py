"""The directory a task's command runs in: TonY's layout, the job's source beside its resources
and its ``venv``, private to the container.

On the embedded cluster the container's directory is already that: the source and the resources
are linked into it as the container is made. On YARN the source arrives as an archive that the
NodeManager unpacks once per node (``src/``, shared by the job's containers there), and the
resources and ``venv`` sit beside it in the container's directory. The command then runs in
``work/``, made here: a link to each entry of ``src/`` and to each resource (``TONY_RESOURCES``
names them) and ``venv``. What the command writes lands in its own container, never in the
shared copy, and ``./common.zip`` or ``venv/`` mean what they mean under TonY.
"""
from __future__ import annotations

import os
import shlex
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

from ..archive import unsafe_entry
from ..protocol import ENVIRONMENT_ENV, RESOURCES_ENV, RUNTIME_ENV
from ..spec import JobSpec

__all__ = ["RESOURCES_ENV", "WORKDIR_ENV", "job_python", "join_parts", "python_path", "task_pythonpath",
           "user_directory"]

#: Where the job's source is in the container's directory (``src`` on YARN when the job has one).
WORKDIR_ENV = "TONY_WORKDIR"
_WORK = "work"


def _link(target: Path, link: Path) -> None:
    if not link.exists() and not link.is_symlink():
        link.symlink_to(target)


def user_directory(container_dir: Path, env: Mapping[str, str]) -> Path:
    """The directory the user's command runs in, made when the source is a directory apart."""
    source = env.get(WORKDIR_ENV, ".")
    if source in ("", "."):
        return container_dir
    src = container_dir / source
    work = container_dir / _WORK
    work.mkdir(exist_ok=True)
    for entry in sorted(os.listdir(src)) if src.is_dir() else []:
        _link(src / entry, work / entry)
    names = [n for n in env.get(RESOURCES_ENV, "").split(",") if n]
    for name in [*names, "venv"]:
        if (container_dir / name).exists():
            # A resource of the same name as a source file wins, as the later localization does under TonY.
            if (work / name).is_symlink() and name in names:
                (work / name).unlink()
            _link(container_dir / name, work / name)
    return work


def python_path(container_dir: Path, interpreter: str) -> list[str]:
    """The directories to put first on a task's PATH so that a bare ``python`` in its command is the
    job's ``interpreter`` (the venv's, python_binary_path, or the executor's own where neither can
    be run: a TonY ``python_venv`` zip need not hold an interpreter, and a node need not have a
    ``python`` on its PATH). The interpreter's own directory follows, for what else a venv holds."""
    if os.path.isabs(interpreter):
        found: str | None = interpreter
    else:
        import shutil  # a relative interpreter only (python_binary_path=python): not on every task's start
        found = shutil.which(interpreter)
    if not found or not os.access(found, os.X_OK):
        found = sys.executable
    shim = container_dir / ".tony-bin"
    shim.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        # A script, not a link: an interpreter finds its virtualenv by the path it is run as.
        script = shim / name
        script.write_text(f'#!/bin/sh\nexec {shlex.quote(found)} "$@"\n')
        script.chmod(0o755)
    own = os.path.dirname(interpreter) if os.path.isabs(interpreter) else ""
    return [str(shim), *([own] if own and os.path.isdir(own) else [])]


def job_python(container_dir: Path, spec: JobSpec) -> str:
    """The job's interpreter in ``container_dir``: ``python_venv``'s (a zip unpacked into ``venv/``
    the first time, a directory linked there), with ``python_binary_path`` relative to it; else
    ``python_binary_path``; else the one running this process."""
    venv, pbp = spec.python_venv, spec.python_binary_path
    if not venv:
        return pbp or sys.executable
    target = container_dir / "venv"
    src = Path(venv)
    if src.is_file() and zipfile.is_zipfile(src) and not target.exists():
        unsafe = unsafe_entry(src)
        if unsafe:
            raise ValueError(f"python_venv {src} is not unpacked: {unsafe}")
        with zipfile.ZipFile(src) as z:
            z.extractall(target)
        for p in (target / "bin").glob("*"):
            p.chmod(p.stat().st_mode | 0o111)
    elif src.is_dir() and not target.exists():
        target.symlink_to(src.resolve())
    if pbp and not os.path.isabs(pbp):
        return str(target / pbp)
    return pbp or str(target / "bin" / "python")


def task_pythonpath(env: Mapping[str, str], current: str | None) -> dict[str, str]:
    """Where the job shipped its runtime (YARN): the task's processes import from the job's own
    paths first, then its packed environment (its parts joined into one directory, once per
    container: :func:`join_parts`), then this package (``tony_workflow.report``), and never from
    what the runtime itself imports, whose versions are not the job's."""
    runtime = env.get(RUNTIME_ENV)
    parts = [p for p in (env.get(ENVIRONMENT_ENV) or "").split(os.pathsep) if p]
    if not runtime and not parts:
        return {}
    own = [p for p in (current or "").split(os.pathsep) if p and not (runtime and p.startswith(runtime))]
    environment = str(joined(parts)) if len(parts) > 1 else (parts[0] if parts else None)
    return {"PYTHONPATH": os.pathsep.join([*own, *([environment] if environment else []),
                                           *([os.path.join(runtime, "tony")] if runtime else [])])}


#: Where a container's environment parts are joined, beside them.
ENVIRONMENT = "environment"


def joined(parts: list[str]) -> Path:
    """The parts joined in ``environment/`` beside the first, made once (the AM's container and a
    task's may both ask): written aside and renamed into place."""
    target = Path(parts[0]).parent / ENVIRONMENT
    if not target.is_dir():
        part = target.with_name(f"{ENVIRONMENT}.{os.getpid()}.part")
        join_parts(parts, part)
        try:
            os.rename(part, target)
        except OSError:  # another process of the container joined them first
            import shutil
            shutil.rmtree(part, ignore_errors=True)
    return target


def join_parts(parts: list[str], target: Path) -> Path:
    """One site directory at ``target`` made of the unpacked parts' directories, in order: each
    entry of a part is a link to it, and a directory that several parts fill (a namespace package,
    ``nvidia/``) is a directory of links to each one's entries, recursively. The first part to
    bring a file keeps it. Returns ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for part in parts:
        _join(Path(part), target)
    return target


def _join(source: Path, target: Path) -> None:
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        dest = target / entry.name
        if not os.path.lexists(dest):
            os.symlink(entry.path, dest)
            continue
        if not (entry.is_dir() and dest.is_dir()):
            continue  # a file two parts bring: the first keeps it
        if dest.is_symlink():  # a directory one part brought alone so far: it becomes a real one
            first = os.readlink(dest)
            dest.unlink()
            dest.mkdir()
            _join(Path(first), dest)
        _join(Path(entry.path), dest)
