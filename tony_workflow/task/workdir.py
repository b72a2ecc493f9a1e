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
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from ..protocol import RESOURCES_ENV

__all__ = ["RESOURCES_ENV", "WORKDIR_ENV", "python_path", "user_directory"]

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
    found = interpreter if os.path.isabs(interpreter) else shutil.which(interpreter)
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
