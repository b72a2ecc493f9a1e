"""The job type's plugin folder, as Azkaban's JobTypeManager loads it.

An Azkaban executor loads every directory of its ``plugins/jobtypes`` folder as a job type named
after the directory. Each has a ``private.properties`` (what the executor itself reads; here, that
the job type is Azkaban's own ``ProcessJob``) and a ``plugin.properties`` (defaults merged into
the props of every job of that type, for keys the job does not set; here, the ``command`` that
starts the runner). Beside them, ``reattach.key``: the executor's key for naming its jobs (one
key for every type, kept when the plugin is installed again; readable by the executor's user
only), which the runner finds through ``env.TONY_REATTACH_KEY_FILE``
(:mod:`azkaban_jobtype.runner`).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from tony_workflow.spec import SpecError, SpecIssue

from .props import dump_properties
from .translate import TONY_JOB_TYPES

__all__ = ["JOBTYPE_CLASS", "install_plugin", "runner_command"]

#: The class Azkaban runs jobs of these types with: a plain process job.
JOBTYPE_CLASS = "azkaban.jobExecutor.ProcessJob"

_HEADER = ("Written by tony-azkaban install-plugin; run it again to update. "
           "Jobs of this type run {command}")


def runner_command(python: str) -> str:
    """The ``command`` that starts the runner with ``python``.

    ProcessJob splits a command at spaces outside quotes and drops the quotes, without a shell, so
    an interpreter path with spaces is put in double quotes; one with a quote character cannot be
    written at all.
    """
    if any(c in python for c in "\"'"):
        raise SpecError([SpecIssue("--python", python, "the interpreter path must not contain quote characters: "
                                   "Azkaban's command splitting cannot carry them")])
    if any(c.isspace() for c in python):
        python = f'"{python}"'
    return f"{python} -m azkaban_jobtype"


def install_plugin(plugins_dir: str | os.PathLike, *, python: str | None = None,
                   env: Mapping[str, str] | None = None, types: Iterable[str] = TONY_JOB_TYPES,
                   check: bool = True, proxy: bool = False) -> list[Path]:
    """Writes one folder per job type (default ``TonyJob`` and ``TensorFlowJob``) under ``plugins_dir``.

    ``python`` is the interpreter that runs the runner (default: this one); it must be able to import
    ``azkaban_jobtype``, which is checked unless ``check`` is false. ``env`` becomes ``env.NAME=value``
    defaults, which ProcessJob exports to the runner (``TONY_HOME``, ``TONY_CONF_DIR``,
    ``TONY_BACKEND``, ...). Existing ``private.properties`` and ``plugin.properties`` are replaced;
    anything else in the folders is left alone. With ``proxy``, jobs run on YARN as their flow's
    ``user.to.proxy`` (``azkaban.should.proxy=true``). Returns the files written.
    """
    if not python:
        python = sys.executable
    elif os.sep not in python:
        python = shutil.which(python) or python
    # Not resolved: a virtualenv's python is a symlink whose target lacks the virtualenv's packages.
    python = str(Path(python).absolute())
    issues = []
    if not os.access(python, os.X_OK) or not Path(python).is_file():
        issues.append(SpecIssue("--python", python, "must be an executable Python interpreter"))
    elif check:
        probe = subprocess.run([python, "-c", "import azkaban_jobtype.runner"], capture_output=True, text=True,
                               check=False)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            issues.append(SpecIssue("--python", python, f"cannot import azkaban_jobtype ({last}); install "
                                    "tony-workflow into that interpreter's environment"))
    for name in (env or {}):
        if not name or not all(c.isalnum() or c == "_" for c in name) or name[0].isdigit():
            issues.append(SpecIssue("--env", name, "must be an environment variable name "
                                    "(letters, digits and '_', not starting with a digit)"))
    if issues:
        raise SpecError(issues)

    command = runner_command(python)
    types = list(types)
    folders = [Path(plugins_dir).absolute() / job_type for job_type in types]
    key = _shared_key(folders)
    written = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        key_file = folder / KEY_FILE
        if not key_file.exists():
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(key + "\n")
        plugin_props = {"command": command, "env.TONY_REATTACH_KEY_FILE": str(key_file),
                        **({"azkaban.should.proxy": "true"} if proxy else {}),
                        **{f"env.{k}": v for k, v in (env or {}).items()}}
        comment = _HEADER.format(command=command)
        dump_properties({"jobtype.class": JOBTYPE_CLASS}, folder / "private.properties", comment)
        dump_properties(plugin_props, folder / "plugin.properties", comment)
        written += [folder / "private.properties", folder / "plugin.properties", key_file]
    return written


#: The executor's key's file, in each type's folder.
KEY_FILE = "reattach.key"


def _shared_key(folders: list[Path]) -> str:
    """The key every type's folder holds: the one a folder already has (an earlier installation's:
    jobs it named are still found), else a new one."""
    for folder in folders:
        with contextlib.suppress(OSError):
            text = (folder / KEY_FILE).read_text().strip()
            if text:
                return text
    return secrets.token_hex(32)
