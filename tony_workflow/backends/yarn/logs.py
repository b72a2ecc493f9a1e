"""A YARN job's logs, one section per task, as the embedded cluster gives them.

Every container of a job writes YARN's two files in its log directory (the first of ``LOG_DIRS``):
``stdout`` and ``stderr`` (:func:`tony_workflow.backends.yarn.app.prelude`); the ApplicationMaster's
own are ``am.stdout`` and ``am.stderr`` in its container's. Which container holds which task comes
from the job's status: each task's log link names its container and NodeManager, as does the
AM's (``am_log_url``).

While the job runs, the files are read from each NodeManager's REST API
(``/ws/v1/node/containerlogs/<container>/<file>``), one request per file, which heads each as
``yarn logs`` does. Once it has ended, a
cluster that aggregates logs has moved them to HDFS, where one ``yarn logs`` run reads them all
(:func:`parse_aggregated` splits its output by container and file, by the lengths it states). A
cluster that does not aggregate keeps them on its NodeManagers for a while; they are read there.

Only the files asked for are read, and written under the caller's directory (the ``tony logs``
command gives a temporary one, removed once printed).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ...kerberos import Login

__all__ = ["AM_FILES", "TASK_FILES", "container_of", "job_logs", "parse_aggregated", "read_aggregated", "read_live",
           "sections"]

#: a task container's files, by the name their section ends with
TASK_FILES = {"stdout": "stdout", "stderr": "stderr"}
#: the ApplicationMaster's container's files, by the name their section ends with
AM_FILES = {"stdout": "am.stdout", "stderr": "am.stderr"}

_LINK = re.compile(r"/containerlogs/(container_[0-9_e]+)(?:/|$)")
_TIMEOUT = 30


def container_of(log_url: str | None) -> tuple[str, str] | None:
    """The NodeManager's web address (``host:port``) and the container id a task's log link
    (``http://nm:8042/node/containerlogs/container_…/user``) names; None for anything else."""
    if not log_url:
        return None
    parts = urlsplit(log_url)
    found = _LINK.search(parts.path)
    if not parts.netloc or not found:
        return None
    return parts.netloc, found.group(1)


def sections(status: Any, task: str | None) -> dict[str, tuple[tuple[str, str], dict[str, str]]]:
    """What to read for ``task`` (every task, and the AM, when None): each section's prefix
    (``worker:0``, ``am``) with its (NodeManager, container) and its files by section name. A
    task without a container yet (waiting for one) has no section."""
    out: dict[str, tuple[tuple[str, str], dict[str, str]]] = {}
    am = container_of(getattr(status, "am_log_url", None))
    if am is not None and task in (None, "am"):
        out["am"] = (am, AM_FILES)
    for t in status.tasks:
        where = container_of(t.log_url)
        if where is not None and task in (None, t.task_id):
            out[t.task_id] = (where, TASK_FILES)
    return out


def read_live(session: Any, node: str, container: str, files: Iterable[str],
              why: dict[str, str] | None = None) -> dict[str, bytes | None]:
    """The files of a container the NodeManager at ``node`` still holds (None for one it has not,
    or that the container has not written), through its REST API with ``session`` (a requests
    session of its own for this NodeManager: on a Kerberized cluster it authenticates with SPNEGO,
    and a session that spoke to another server of the host would offer that one's cookie and
    ticket, which the NodeManager refuses as a replay). ``why`` gets, by file, what a NodeManager
    that did not give one answered."""
    out: dict[str, bytes | None] = {}
    for name in files:
        url = f"http://{node}/ws/v1/node/containerlogs/{container}/{name}"
        try:
            r = session.get(url, timeout=_TIMEOUT, headers={"Accept": "text/plain"})
        except Exception as e:  # noqa: BLE001 - a NodeManager gone (its node lost) holds nothing any more
            out[name] = None
            if why is not None:
                why[name] = f"the NodeManager at {node} did not answer ({type(e).__name__})"
            continue
        if r.status_code != 200:
            out[name] = None
            if why is not None and r.status_code != 404:
                said = next((ln for ln in r.text.splitlines() if ln.startswith("MESSAGE:")), "").strip()
                why[name] = f"the NodeManager at {node} answered HTTP {r.status_code}" + (f" ({said})" if said else "")
            continue
        # Hadoop 3 heads the file as `yarn logs` does (LogAggregationType: LOCAL); older ones do not.
        headed = parse_aggregated(r.content).get(container, {})
        out[name] = headed.get(name, r.content if not headed else None)
    return out


def parse_aggregated(text: bytes) -> dict[str, dict[str, bytes]]:
    """``yarn logs`` output split by container and file. Each file comes as a ``Container:``
    line, a ``LogType:`` line, a ``LogLength:`` line and ``LogContents:``, then exactly that many
    bytes; the length is trusted over any line in the contents that looks like a header."""
    out: dict[str, dict[str, bytes]] = {}
    pos, container, log_type, length = 0, None, None, None
    while pos < len(text):
        end = text.find(b"\n", pos)
        line = text[pos:] if end < 0 else text[pos:end]
        pos = len(text) if end < 0 else end + 1
        if line.startswith(b"Container: "):
            container, log_type, length = line.split()[1].decode(), None, None
        elif line.startswith(b"LogType:"):
            log_type, length = line[len(b"LogType:"):].strip().decode(), None
        elif line.startswith(b"LogLength:"):
            try:
                length = int(line[len(b"LogLength:"):].strip())
            except ValueError:
                length = None
        elif line.startswith(b"LogContents:") and container and log_type and length is not None:
            out.setdefault(container, {})[log_type] = text[pos:pos + length]
            pos += length
            log_type, length = None, None
    return out


def read_aggregated(app_id: str, conf_dir: Path, files: Iterable[str],
                    login: Login | None = None) -> tuple[dict[str, dict[str, bytes]], str]:
    """Every container's ``files`` of an ended application, as log aggregation left them on HDFS:
    one ``yarn logs`` run (as ``login`` on a secure cluster). Returns them by container, and what
    ``yarn logs`` said on stderr when it found none."""
    as_login: contextlib.AbstractContextManager[dict[str, str]] = (
        login.java_environment() if login is not None else contextlib.nullcontext({}))
    with as_login as env:
        done = subprocess.run(["yarn", "logs", "-applicationId", app_id, "-log_files", ",".join(sorted(set(files)))],
                              capture_output=True, timeout=300, check=False,
                              env={**os.environ, "HADOOP_CONF_DIR": str(conf_dir), **env})
    found = parse_aggregated(done.stdout)
    said = "" if found else " ".join(done.stderr.decode(errors="replace").split())[-500:]
    return found, said


def job_logs(app_id: str, status: Any, task: str | None, *, into: Path, ended: bool, aggregated: bool,
             session: Callable[[], Any], conf_dir: Path, login: Login | None = None) -> dict[str, Path]:
    """The logs of ``task`` (every task and the AM when None) of the job ``status`` describes,
    written under ``into`` (emptied first) as ``<section>/<file>``; by section name
    (``worker:0/stdout``, ``am/stderr``). An ended job's are read from HDFS when the cluster may
    aggregate logs (``aggregated``), else, or when HDFS holds none yet, from the NodeManagers.
    On HDFS, containers no task of the final status names (an earlier attempt's, a relaunched
    task's first) come too when every task's logs are asked for, under their container id.
    ``session()`` makes a requests session for one NodeManager."""
    import shutil

    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    wanted = sections(status, task)
    found: dict[str, dict[str, bytes]] = {}
    said = ""
    if ended and aggregated:
        found, said = read_aggregated(app_id, conf_dir, [*TASK_FILES.values(), *AM_FILES.values()], login)
    out: dict[str, Path] = {}

    def keep(section: str, name: str, data: bytes | None, where: str) -> None:
        path = into / section.replace(":", "_") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            data = (f"(no {name} kept for {section}: {where}"
                    + (f"; yarn logs said: {said}" if said else "") + ")\n").encode()
        path.write_bytes(data)
        out[f"{section}/{name}"] = path

    for section, ((node, container), files) in wanted.items():
        held = found.get(container)
        answered: dict[str, str] = {}
        if held is None:
            with session() as own:
                held = {f: d for f, d in read_live(own, node, container, files.values(), answered).items()
                        if d is not None}
        if not ended:
            where = f"container {container} on {node} has written none yet"
        elif aggregated:
            where = f"neither HDFS nor the NodeManager at {node} holds container {container}'s"
        else:
            where = (f"this cluster does not aggregate logs (yarn.log-aggregation-enable=false), and the NodeManager "
                     f"at {node} gives none of this ended job's: container {container}'s stay in its "
                     "yarn.nodemanager.log-dirs while it keeps them")
        if ended and answered:
            where += f"; {next(iter(answered.values()))}"
        for name, file in files.items():
            answer = answered.get(file)
            keep(section, name, held.get(file), where if ended or not answer else answer)
    if task is None:
        named = {container for (_, container), _ in wanted.values()}
        for container in sorted(set(found) - named):
            for name, file in TASK_FILES.items():
                if file in found[container]:
                    keep(container, name, found[container][file], "")
    return out
