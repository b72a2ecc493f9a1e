"""What a YARN job's containers print, read by byte range for a follower
(:mod:`tony_workflow.client.output`).

While a container's files are on its NodeManager, a look costs one request per container (its
files' sizes, ``/ws/v1/node/containers/<id>/logs``) and, for a file that grew, one for the bytes
that are new: the NodeManager's log page (``/node/containerlogs/<id>/<user>/<file>/?start=&end=``),
the one place its web server serves a byte range (its REST file endpoint serves a head or a
tail, not a range). On a Kerberized cluster both go through SPNEGO, each NodeManager with a
session of its own (:func:`.rm.http_session`).

Once the job has ended its containers' files may be gone from the NodeManagers (aggregated to
HDFS): the rest then comes from ``yarn logs``, read once per job (:func:`.logs.read_aggregated`),
looked for again for a while as aggregation may still be under way.
"""
from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import OutputRefused
from .logs import TASK_FILES, container_of, read_aggregated

__all__ = ["NodeOutput"]

_PRE = re.compile(r"<pre>(.*?)</pre>", re.DOTALL)
#: how long a NodeManager is given to answer one request (a follower asks again at its next look)
_TIMEOUT = 10
#: how long the files of an ended job are looked for in its aggregated logs
AGGREGATION_WAIT_S = 60.0


class NodeOutput:
    """Reads containers' files by byte range, from their NodeManagers while they hold them, then
    from the aggregated logs. ``session(node)`` gives a requests session for one NodeManager;
    ``ended(app_id)`` says whether the application has ended; ``conf_dir`` is the client's
    Hadoop configuration, for ``yarn logs``, run as ``login(app_id)`` (None: no Kerberos)."""

    def __init__(self, session: Callable[[str, str], Any], ended: Callable[[str], bool], conf_dir: Path,
                 login: Callable[[str], Any] = lambda app_id: None):
        self._session, self._ended, self.conf_dir, self._login = session, ended, conf_dir, login
        self._lock = threading.Lock()
        # app -> (first look, last look, its containers' files)
        self._aggregated: dict[str, tuple[float | None, float | None, dict[str, dict[str, bytes]]]] = {}

    def read(self, app_id: str, container: str, stream: str, where: str | None, offset: int,
             limit: int) -> tuple[bytes, int | None] | None:
        # The task's log link names its YARN container and NodeManager (``container`` is the job's own id).
        node, container = container_of(where) or ("", "")
        if node:
            sizes = self._sizes(app_id, node, container)
            if sizes is not None and stream in sizes:
                size = sizes[stream]
                if size <= offset:
                    return b"", size
                data = self._range(app_id, node, str(where), stream, offset, min(size, offset + limit))
                if data is not None:
                    return data, size
            elif sizes is not None:
                return None  # its NodeManager holds the container, which has not written the file yet
        if not self._ended(app_id):
            return None  # not written yet, or its NodeManager not answering: looked at again later
        # Aggregation goes container by container: one not among those found yet may come later.
        held = self._from_aggregated(app_id, container).get(container, {}).get(stream) if container else None
        if held is None:
            return None
        return held[offset:offset + limit], len(held)

    def _sizes(self, app_id: str, node: str, container: str) -> dict[str, int] | None:
        try:
            r = self._session(app_id, node).get(f"http://{node}/ws/v1/node/containers/{container}/logs", timeout=_TIMEOUT,
                                        headers={"Accept": "application/json"})
        except Exception as e:  # noqa: BLE001 - a NodeManager gone holds nothing any more
            if self._ended(app_id):
                return None
            raise OutputRefused(f"its NodeManager at {node} did not answer ({type(e).__name__})") from None
        if r.status_code in (401, 403, 500):  # authenticated or not, it will not say: said, and asked again
            raise OutputRefused(f"its NodeManager at {node} answered HTTP {r.status_code} for the container's files")
        if r.status_code != 200:
            return None
        try:
            listed = r.json().get("containerLogsInfo") or []
        except ValueError:
            return None
        out: dict[str, int] = {}
        for group in listed if isinstance(listed, list) else [listed]:
            if group.get("logAggregationType", "LOCAL") != "LOCAL":
                continue
            for f in group.get("containerLogInfo") or []:
                try:
                    out[str(f["fileName"])] = int(f["fileSize"])
                except (KeyError, ValueError):
                    continue
        return out

    def _range(self, app_id: str, node: str, where: str, stream: str, start: int, end: int) -> bytes | None:
        try:
            r = self._session(app_id, node).get(f"{where.rstrip('/')}/{stream}/", params={"start": start, "end": end},
                                        timeout=_TIMEOUT)
        except Exception:  # noqa: BLE001 - looked at again at the next poll
            return None
        if r.status_code not in (200, 404):
            # Its NodeManager refuses to serve the file (a secure one without Hadoop's native code
            # cannot open it): said, not waited for in silence.
            said = next((ln for ln in r.text.splitlines() if ln.strip().startswith("MESSAGE:")), "").strip()
            raise OutputRefused(f"its NodeManager at {node} answered HTTP {r.status_code}" + (f" ({said})" if said else ""))
        found = _PRE.search(r.text) if r.status_code == 200 else None
        if found is None:
            return None
        data = html.unescape(found.group(1)).encode()
        # The page decodes what it read as text: a range cut inside a character gives it back
        # replaced, longer or shorter than asked. Only whole lines are passed on, so the cut is
        # taken at the last end of line, and what follows is read again.
        if len(data) != end - start:
            last = data.rfind(b"\n")
            data = data[:last + 1] if last >= 0 else b""
        return data

    def _from_aggregated(self, app_id: str, container: str) -> dict[str, dict[str, bytes]]:
        """Every container's files of an ended job, from ``yarn logs``: read again every few
        seconds while ``container`` is not among them (aggregation goes node by node), for
        :data:`AGGREGATION_WAIT_S` from the first look."""
        with self._lock:
            first, last, files = self._aggregated.get(app_id, (None, None, {}))
            now = time.monotonic()
            if container in files or (first is not None and now - first > AGGREGATION_WAIT_S) or \
                    (last is not None and now - last < 5.0):
                return files
            files, _ = read_aggregated(app_id, self.conf_dir, TASK_FILES.values(), self._login(app_id))
            self._aggregated[app_id] = (first if first is not None else now, now, files)
            return files
