"""The job history: a record of every job that ended, kept after its directory is gone.

When a job ends, its ApplicationMaster (or, when no attempt of it could, its supervisor) writes one
record to ``tony.history.location`` (default ``$TONY_HOME/history`` on the local backend, an HDFS
directory beside the applications' own on YARN), in TonY's layout:
``finished/yyyy/MM/dd/<application id>/`` by the day it finished (``tony.history.finished-dir-timezone``,
UTC by default). The directory holds the record, named as TonY names its history file so that a
listing can filter by state and time without opening a file
(``<application id>-<started ms>-<finished ms>-<user>-<STATE>.json``), the job's configuration
(``config.json``), its events (``events.jsonl``) and, where the tasks wrote them into the job's own
directory, its TensorBoard event files (``tensorboard/``). Records older than
``tony.history.retention-sec`` (TonY's default, 30 days) are purged whenever one is written.

A job that runs as another user (tony.application.proxy-user) is theirs, and so is its record, in
their history; the submitter leaves a mark in its own (``proxied/<user>``) and reads the records of
the jobs it submitted there too, as that user (:class:`SubmitterHistory`).

A record is built from the final status and the event log alone (:func:`build_record`): the
sessions' timeline, each task's end, restarts and final resource figures across sessions, where
its logs were, and sizing hints that compare what each task type asked for with what it used.
"""
from __future__ import annotations

import builtins
import datetime as _dt
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .context import application_tags, matches
from .events import read_events
from .process import user_name
from .protocol import EXCEEDED_MEMORY_EXIT
from .spec.errors import mask_secrets
from .spec.site import tony_home
from .spec.values import parse_list
from .status import check_application_id
from .storage import Storage, open_storage

if TYPE_CHECKING:
    from .spec import JobSpec

__all__ = ["JobHistory", "SubmitterHistory", "build_record", "history_default", "live_record", "parse_record_name",
           "record_history", "record_job", "record_name", "site_history", "sizing_hints", "submitter_history"]

FINISHED = "finished"
BOARD = "tensorboard"  # a record's TensorBoard event files, beside it
NOTEBOOKS = "notebooks"  # its tasks' executed notebooks, a folder per task
PROXIED = "proxied"
_NAME = re.compile(r"(application_\d+_\d+)-(\d+)-(\d+)-(.+)-([A-Z]+)\.json")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*")
_FINAL_TASK = {"SUCCEEDED", "FAILED", "KILLED", "LOST"}


def record_name(record: dict[str, Any]) -> str:
    return (f"{record['application_id']}-{int((record.get('started_at') or 0) * 1000)}-"
            f"{int((record.get('finished_at') or 0) * 1000)}-{record.get('user') or 'unknown'}-{record['state']}.json")


def parse_record_name(name: str) -> dict[str, Any] | None:
    m = _NAME.fullmatch(name)
    if not m:
        return None
    return {"application_id": m.group(1), "started_at": int(m.group(2)) / 1000.0,
            "finished_at": int(m.group(3)) / 1000.0, "user": m.group(4), "state": m.group(5)}


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def sizing_hints(tasks: list[dict[str, Any]], requested: dict[str, dict[str, Any]]) -> list[str]:
    """What each task type asked for against what its tasks used at most, where the two are far
    apart: memory used beyond the request (a container the cluster killed for it: YARN's exit
    status -104), above nine tenths of it, or below half; GPUs mostly idle."""
    hints = []
    for task_type, asked in requested.items():
        own = [t for t in tasks if t["task_id"].split(":")[0] == task_type]
        mine = [t for t in own if t.get("metrics")]
        peaks = [t["metrics"].get("max_rss_mb") for t in mine if t["metrics"].get("max_rss_mb") is not None]
        memory = asked.get("memory_mb")
        killed = any(t.get("exit_code") == EXCEEDED_MEMORY_EXIT for t in own)
        if memory and (killed or (peaks and max(peaks) > memory)):
            used = f"used {_gib(max(peaks))}, more than" if peaks and max(peaks) > memory else "went beyond"
            hints.append(f"{task_type} {used} its {_gib(memory)}: it exceeded its memory"
                         f"{' and the cluster killed it' if killed else ''}; raise tony.{task_type}.memory")
        elif peaks and memory:
            peak = max(peaks)
            if peak < memory / 2:
                hints.append(f"{task_type} asked for {_gib(memory)}, used at most {_gib(peak)}: "
                             f"tony.{task_type}.memory could be lower")
            elif peak > 0.9 * memory:
                hints.append(f"{task_type} used {_gib(peak)} of its {_gib(memory)}: close to the limit, "
                             f"raise tony.{task_type}.memory")
        utils = [t["metrics"].get("gpu_util_percent") for t in mine if t["metrics"].get("gpu_util_percent") is not None]
        if asked.get("gpus") and utils and max(utils) < 30:
            hints.append(f"{task_type} asked for {asked['gpus']} GPU(s) per task; their utilisation was at most "
                         f"{max(utils):.0f} % at the last sample: the input pipeline may be the bottleneck")
    return hints


def build_record(status: dict[str, Any], events: Iterable[dict[str, Any]], *, user: str,
                 conf: dict[str, str], requested: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The history record of a job from its final status and its events."""
    sessions: dict[int, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    timeline = []
    for e in events:
        kind, ts = e.get("event"), e.get("ts")
        if kind == "session_started":
            sessions[e["session"]] = {"session": e["session"], "started_at": ts}
            timeline.append({"ts": ts, "what": f"session {e['session']} started"})
        elif kind == "session_finished":
            sessions.setdefault(e["session"], {"session": e["session"]}).update(
                finished_at=ts, state=e.get("state"), diagnostics=e.get("diagnostics") or "")
            timeline.append({"ts": ts, "what": f"session {e['session']} ended {e.get('state')}",
                             "detail": (e.get("diagnostics") or "")[:500]})
        elif kind == "am_started":
            if e.get("admitted"):
                timeline.append({"ts": float(e["admitted"]), "what": "its turn came: its ApplicationMaster's "
                                 "container and its gang were asked for"})
            timeline.append({"ts": ts, "what": f"ApplicationMaster attempt {e.get('attempt', 1)} started"})
        elif kind == "turn_came":  # an AM started first or next in line, before its turn: then its gang was asked for
            timeline.append({"ts": ts, "what": "its turn came: its gang was asked for (its ApplicationMaster "
                             f"had started {e.get('place') or 'first'} in line)"})
        elif kind == "am_attempt_failed":
            what = f"ApplicationMaster attempt {e.get('attempt')} failed"
            if e.get("counted") is False:  # the cluster took its container back, as YARN does not count it
                what += " (not counted against tony.am.max-attempts)"
            timeline.append({"ts": ts, "what": what, "detail": str(e.get("reason") or "")[:500]})
        elif kind == "container_reclaimed":
            timeline.append({"ts": ts, "what": f"the container of task {e.get('task')} was {e.get('cause')}",
                             "detail": "relaunched without spending tony.am.retry-count"})
        elif kind == "placed_anywhere":
            timeline.append({"ts": ts, "what": f"task {e.get('task')} placed anywhere: node {e.get('host')} gave no "
                             f"container in {float(e.get('waited_s') or 0):g} s", "detail": "tony.<type>.spread: spread where "
                             "the cluster allows"})
        elif kind == "elastic_member_lost":
            timeline.append({"ts": ts, "what": f"task {e.get('task')} left the elastic group; a replacement is asked for",
                             "detail": f"{e.get('cause')}; membership change {e.get('changes')} of "
                                       f"tony.elastic.max-membership-changes={e.get('max_changes')}"
                                       + (" (taken back by the cluster: not counted)" if e.get("reclaimed") else "")})
        elif kind == "elastic_group":
            detail = "; ".join(f"{k}: {', '.join(e[k])}" for k in ("left", "joined", "replaced") if e.get(k))
            causes = e.get("causes") or {}
            detail += "".join(f"; {t}: {why}" for t, why in causes.items())
            timeline.append({"ts": ts, "what": f"{e.get('what')}: {e.get('size')} of {e.get('target')} nodes train "
                             f"(round {e.get('round')})", "detail": detail.strip("; ")[:500]})
        elif kind == "requests_lost":
            timeline.append({"ts": ts, "what": f"the ResourceManager held no request for {', '.join(e.get('tasks') or [])}: "
                             "asked again", "detail": f"it held {e.get('asks_held')} of the job's "
                                                      f"{e.get('requested')} requests"})
        elif kind == "task_restarted":
            timeline.append({"ts": ts, "what": f"task {e['task']} relaunched alone"})
        elif kind == "gang_formed" and e.get("waited_s"):
            timeline.append({"ts": ts, "what": f"all {e.get('containers')} containers granted after waiting "
                             f"{float(e['waited_s']):.0f} s", "detail": f"session {e.get('session')}"})
        elif kind == "gang_released":
            timeline.append({"ts": ts, "what": "the containers held were given back, to be asked for again in "
                             f"{float(e.get('backoff_s') or 0):.0f} s", "detail": str(e.get("reason") or "")[:500]})
        elif kind == "task_state" and "task" in e:
            t = tasks.setdefault(e["task"], {"task_id": e["task"], "launches": 0, "metrics": {}})
            if e["state"] == "LAUNCHED":
                t["launches"] += 1
            # When its user process started and ended (the latest session's), as the task's host saw
            # them where its executor said so: the AM hears of them later, by a varying delay.
            if e["state"] == "RUNNING":
                t["started_at"] = e.get("at") or ts
            if e["state"] in _FINAL_TASK:
                t.update(state=e["state"], exit_code=e.get("exit_code"), session=e.get("session"),
                         finished_at=e.get("at") or ts)
                if e["state"] in ("FAILED", "LOST"):
                    timeline.append({"ts": ts, "what": f"task {e['task']} {e['state']} (exit {e.get('exit_code')})",
                                     "detail": str(e.get("diagnostics") or "")[:500]})
                if e.get("metrics"):
                    peak = max(t["metrics"].get("max_rss_mb") or 0, e["metrics"].get("max_rss_mb") or 0)
                    t["metrics"] = {**e["metrics"], "max_rss_mb": peak}
    logs = {}
    for t in status.get("tasks", []):
        task_id = f"{t['type']}:{t['index']}"
        rec = tasks.setdefault(task_id, {"task_id": task_id, "launches": 1, "metrics": {}})
        rec.setdefault("state", t.get("state"))
        rec.setdefault("exit_code", t.get("exit_code"))
        if t.get("metrics") and not rec["metrics"]:
            rec["metrics"] = t["metrics"]
        logs[task_id] = t.get("log_url")
    task_list = []
    for task_id, t in sorted(tasks.items()):
        metrics = {k: v for k, v in t["metrics"].items() if k not in ("sampled_at", "gpus")}
        task_list.append({"task_id": task_id, "state": t.get("state"), "exit_code": t.get("exit_code"),
                          "restarts": max(0, t["launches"] - 1), "metrics": metrics, "log": logs.get(task_id),
                          "started_at": t.get("started_at"), "finished_at": t.get("finished_at")})
    return {
        "application_id": status["application_id"], "name": status.get("name"), "user": user,
        "state": status["state"], "started_at": status.get("started_at"), "finished_at": status.get("finished_at"),
        "diagnostics": status.get("diagnostics") or "", "backend": status.get("backend"),
        "tracking_url": status.get("tracking_url"), "tensorboard_url": status.get("tensorboard_url"),
        "notebook": bool(status.get("notebook_url")), "am_attempts": status.get("am_attempt", 1), "reclaims": status.get("reclaims", 0), "progress": status.get("progress"),
        "warnings": status.get("warnings") or [], "sessions": [sessions[k] for k in sorted(sessions)],
        "waiting": {k: status.get(k) for k in ("waiting_reason", "waiting_since", "containers_held",
                                                "containers_wanted", "jobs_ahead")} if status.get("waiting_reason") else None,
        "elastic": status.get("elastic"), "context": status.get("context"),
        "view_acls": str((conf or {}).get("tony.application.view-acls") or ""),
        "tags": application_tags([], parse_list(str((conf or {}).get("tony.application.tags") or "")),
                                 status.get("context") or {})[0],
        "timeline": sorted(timeline, key=lambda x: x["ts"] or 0), "tasks": task_list,
        "requested": requested, "hints": sizing_hints(task_list, requested), "conf": conf,
    }


class JobHistory:
    """Records in ``store`` (see :func:`~tony_workflow.storage.open_storage`), purged after
    ``retention_s`` seconds (0: kept forever). ``timezone`` names the day directories' zone."""

    def __init__(self, store: Storage, retention_s: int = 30 * 86400, timezone: str = "UTC"):
        self.store = store
        self.retention_s = retention_s
        self.timezone = timezone

    @classmethod
    def at(cls, location: str, retention_s: int = 30 * 86400, timezone: str = "UTC") -> JobHistory:
        return cls(open_storage(location), retention_s, timezone)

    def _day(self, ts: float) -> str:
        try:
            from zoneinfo import ZoneInfo

            zone: _dt.tzinfo = ZoneInfo(self.timezone)
        except Exception:  # noqa: BLE001 - an unknown zone name: TonY falls back to UTC as well
            zone = _dt.UTC
        return _dt.datetime.fromtimestamp(ts, zone).strftime("%Y/%m/%d")

    def write(self, record: dict[str, Any], events_file: Path | None = None, board_dir: Path | None = None,
              notebooks: Sequence[tuple[str, Path]] = ()) -> str:
        """Stores ``record`` (and a copy of the event log, the TensorBoard event files under
        ``board_dir``, which ``tony tensorboard`` serves once the job has ended, and each task's
        executed notebook, ``(task id, file)``); returns the record's key. Purges expired records first."""
        self.purge()
        app_id = check_application_id(record["application_id"])
        folder = f"{FINISHED}/{self._day(record.get('finished_at') or time.time())}/{app_id}"
        kept: list[tuple[Path, str]] = []
        if board_dir is not None and Path(board_dir).is_dir():
            base = Path(board_dir)
            kept = [(f, f.relative_to(base).as_posix()) for f in sorted(base.rglob("*")) if f.is_file()]
        for f, rel in kept:
            self.store.put(f, f"{folder}/{BOARD}/{rel}")
        if kept:
            record = {**record, "tensorboard_logs": {"key": f"{folder}/{BOARD}", "uri": f"{self.store.uri}/{folder}/{BOARD}",
                                                     "files": len(kept), "bytes": sum(f.stat().st_size for f, _ in kept)}}
        shown = []
        for task_id, path in notebooks:
            key = f"{folder}/{NOTEBOOKS}/{task_id.replace(':', '-')}/{path.name}"
            self.store.put(path, key)
            shown.append({"task": task_id, "name": path.name, "key": key, "bytes": path.stat().st_size})
        if shown:
            record = {**record, "notebooks": shown}
        with tempfile.TemporaryDirectory(prefix="tony-history-") as tmp:
            if str((record.get("conf") or {}).get("tony.history.tony-format", "")).strip().lower() == "true":
                self._write_tony_files(folder, record, events_file, Path(tmp))
            conf = Path(tmp) / "config.json"
            conf.write_text(json.dumps(record.get("conf") or {}, indent=1, sort_keys=True))
            self.store.put(conf, f"{folder}/config.json")
            if events_file is not None and Path(events_file).exists():
                self.store.put(Path(events_file), f"{folder}/events.jsonl")
            body = Path(tmp) / "record.json"
            body.write_text(json.dumps({k: v for k, v in record.items() if k != "conf"}, indent=1))
            key = f"{folder}/{record_name(record)}"
            self.store.put(body, key)  # last: a listed record always has its files beside it
        return key

    def _write_tony_files(self, folder: str, record: dict[str, Any], events_file: Path | None, tmp: Path) -> None:
        """TonY's own files of the job beside its record (:mod:`tony_workflow.tony_format`)."""
        from .tony_format import final_xml, jhist, jhist_name

        log = list(read_events(events_file)) if events_file is not None else []
        (tmp / "jhist").write_bytes(jhist(record, log))
        self.store.put(tmp / "jhist", f"{folder}/{jhist_name(record)}")
        (tmp / "tony-final.xml").write_text(final_xml(record.get("conf") or {}, record.get("context"),
                                                      str(record.get("user") or "")))
        self.store.put(tmp / "tony-final.xml", f"{folder}/tony-final.xml")

    def _keys(self) -> list[str]:
        return [f"{FINISHED}/{rel}" for rel in self.store.list(FINISHED)]

    def _records(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for key in self._keys():
            meta = parse_record_name(key.rsplit("/", 1)[-1])
            if meta is not None:
                out.append((key, meta))
        return out

    def purge(self, now: float | None = None) -> list[str]:
        """Removes records (with their files) that finished more than ``retention_s`` ago; returns
        the application ids removed."""
        if self.retention_s <= 0:
            return []
        cutoff = (now or time.time()) - self.retention_s
        entries = self._keys()
        removed = []
        for key in entries:
            meta = parse_record_name(key.rsplit("/", 1)[-1])
            if meta is None or meta["finished_at"] >= cutoff:
                continue
            folder = key.rsplit("/", 1)[0] + "/"
            for other in [k for k in entries if k.startswith(folder)]:
                self.store.delete(other)
            removed.append(meta["application_id"])
        return removed

    def note_proxied(self, user: str) -> None:
        """Marks that this history's user submitted a job run as ``user``, whose record is kept in
        ``user``'s history (:class:`SubmitterHistory` reads it there)."""
        check_user(user)
        if user in self.proxied_users():
            return
        with tempfile.TemporaryDirectory(prefix="tony-history-") as tmp:
            mark = Path(tmp) / user
            mark.write_text("")
            self.store.put(mark, f"{PROXIED}/{user}")

    def proxied_users(self) -> list[str]:
        """The users this history's user has submitted jobs as (:meth:`note_proxied`)."""
        try:
            return sorted(name for name in self.store.list(PROXIED) if "/" not in name and _USER.fullmatch(name))
        except FileNotFoundError:
            return []

    def list(self, state: str | None = None, since: float | None = None, limit: int | None = None,
             full: bool = True, context: Mapping[str, str] | None = None,
             tags: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Records, newest first, of jobs that ended in ``state`` and started at or after ``since``;
        at most ``limit``. With ``full`` each is read whole, else only what its name says. With
        ``context`` (fields by name, compared without case) or ``tags``, only the jobs whose context
        has those fields and that carried all those tags (each record is read to tell)."""
        found = [(key, meta) for key, meta in self._records()
                 if (state is None or meta["state"] == state.upper())
                 and (since is None or meta["started_at"] >= since)]
        found.sort(key=lambda item: item[1]["finished_at"], reverse=True)
        if not context and not tags:
            if limit is not None:
                found = found[:limit]
            return [self._read(key) if full else meta for key, meta in found]
        wanted = {t.lower() for t in tags}
        out: list[dict[str, Any]] = []
        for key, _ in found:
            if limit is not None and len(out) >= limit:
                break
            record = self._read(key)
            if matches(record.get("context"), context or {}) and wanted <= set(record.get("tags") or []):
                out.append(record)
        return out

    def get(self, app_id: str) -> dict[str, Any] | None:
        check_application_id(app_id)
        # An attempt that died as it ended may have left a record before the one that carried the
        # job on wrote its own: the record of the latest end is the job's.
        found = [(meta["finished_at"], key) for key, meta in self._records() if meta["application_id"] == app_id]
        if not found:
            return None
        key = max(found)[1]
        record = self._read(key)
        record["conf"] = self.read_conf(key)
        return record

    def entries(self) -> builtins.list[tuple[str, dict[str, Any]]]:
        """Every record's key with what its name says (application, user, state, times), unread."""
        return self._records()

    def read(self, key: str) -> dict[str, Any]:
        """The record at ``key`` (one of :meth:`entries`), without its configuration."""
        return self._read(key)

    def read_conf(self, key: str) -> dict[str, str]:
        """The configuration kept beside the record at ``key`` ({} when there is none)."""
        try:
            conf: dict[str, str] = json.loads(self._text(key.rsplit("/", 1)[0] + "/config.json"))
        except (OSError, ValueError):
            return {}
        return conf

    def _text(self, key: str) -> str:
        return self.store.read_bytes(key).decode()

    def _read(self, key: str) -> dict[str, Any]:
        record: dict[str, Any] = json.loads(self._text(key))
        return record


def check_user(user: str) -> str:
    if not _USER.fullmatch(user or ""):
        raise ValueError(f"not a user name: {user!r}")
    return user


def history_default(name: str, user: str | None = None) -> str:
    """Where backend ``name`` keeps the job history when tony.history.location does not say:
    ``$TONY_HOME/history`` locally, ``/user/<user>/.tony/history`` in HDFS on YARN (``user``:
    this process's by default)."""
    if name == "yarn":
        return f"hdfs:///user/{check_user(user or user_name())}/.tony/history"
    return str(tony_home() / "history")


def site_history(backend: str, **store_options: Any) -> JobHistory:
    """The history readers on this machine see: ``tony.history.location`` of
    ``$TONY_CONF_DIR/tony-site.xml``, else backend ``backend``'s default place. ``store_options``
    go to :func:`~tony_workflow.storage.open_storage` (a backend's Hadoop configuration and
    Kerberos login: :meth:`~tony_workflow.backends.base.Backend.store_options`)."""
    from .spec.loading import site_conf

    configured = (site_conf().get("tony.history.location") or "").strip()
    if not configured or configured == "/path/to/tony-history":  # tony-default.xml's placeholder
        configured = history_default(backend)
    return JobHistory(open_storage(configured, **store_options))


def submitter_history(backend: Any) -> JobHistory | SubmitterHistory:
    """What ``backend``'s (:class:`~tony_workflow.backends.base.Backend`) user reads as its job
    history: :func:`site_history`, with, on YARN, the records of the jobs it submitted to run as
    other users (:meth:`JobHistory.note_proxied`), read from their histories as them."""
    options = backend.store_options()
    own = site_history(backend.name, **options)
    me = backend.submitting_user() if backend.name == "yarn" else None
    users = [u for u in own.proxied_users() if u != me] if me else []
    if not me or not users:
        return own
    return SubmitterHistory(own, [(u, JobHistory(open_storage(history_default("yarn", u), doas=u, **options)))
                                  for u in users], me)


def record_history(app_dir: Path, backend: str, board_store: str | None = None) -> str | None:
    """:func:`record_job` for the ApplicationMaster and its supervisor as a job ends: the
    backend's default place, the user the job ran as, and where its chief kept its TensorBoard
    event files when the job's tasks shared no directory (``board_store``); a failure is said on
    stderr, never raised (the job's outcome does not depend on its record)."""
    from .spec import JobSpec

    try:
        spec = JobSpec.from_dict(json.loads((Path(app_dir) / "spec.json").read_text()))
        user = spec.proxy_user or user_name()  # a job run as its proxy user is theirs, and so is its record
        return record_job(app_dir, spec, history_default(backend, user), user, board_store)
    except Exception as e:  # noqa: BLE001 - the store's errors, a status that could not be written, ...
        print(f"tony: the job's history record was not written: {e}", file=sys.stderr, flush=True)
        return None


def live_record(status: dict[str, Any], app_dir: Path, spec: JobSpec, series: dict[str, Any] | None = None,
                user: str | None = None) -> dict[str, Any]:
    """The record of a job from ``status`` and the events and figures in ``app_dir`` (``series``
    when given): what the history keeps once it ends, and what a job page shows while it runs."""

    requested = {t: task.resources.to_dict() for t, task in spec.tasks.items()}
    record = build_record(status, read_events(Path(app_dir) / "events.jsonl"), user=user or user_name(),
                          conf=mask_secrets(spec.conf), requested=requested)
    if series is None:
        try:
            series = json.loads((Path(app_dir) / "series.json").read_text())
        except (OSError, ValueError):
            series = None
    record["series"] = series
    record["submitter"] = spec.submitter or record["user"]
    return record


def record_job(app_dir: Path, spec: JobSpec, default_location: str, user: str,
               board_store: str | None = None) -> str:
    """Writes the history record of the job whose files are in ``app_dir`` (its final
    ``status.json``, ``events.jsonl`` and ``series.json``) where ``tony.history.location`` says,
    else at ``default_location``; returns the record's key. The TensorBoard event files go with it:
    from the job's directory, which every task wrote to (the embedded cluster), or from
    ``board_store``, where a chief with a directory of its own copied them as it ended (YARN)."""
    status = json.loads((Path(app_dir) / "status.json").read_text())
    record = live_record(status, app_dir, spec, user=user)
    history = JobHistory.at(spec.history_location or default_location, spec.history_retention_s,
                            spec.history_timezone)
    with tempfile.TemporaryDirectory(prefix="tony-board-") as tmp:
        board_dir = Path(app_dir) / BOARD
        if board_store:
            board_dir = Path(tmp)
            try:
                store = open_storage(board_store)
                for rel in store.list(""):
                    (board_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                    store.get(rel, board_dir / rel)
            except FileNotFoundError:
                pass  # the chief wrote no event files
            except Exception as e:  # noqa: BLE001 - the store's errors: the record is written without them
                print(f"tony: the job's TensorBoard event files were not kept: {e}", file=sys.stderr, flush=True)
        return history.write(record, Path(app_dir) / "events.jsonl", board_dir=board_dir,
                             notebooks=executed_notebooks(Path(app_dir), board_store, Path(tmp) / NOTEBOOKS))


def executed_notebooks(app_dir: Path, board_store: str | None, scratch: Path) -> list[tuple[str, Path]]:
    """Each task's executed notebook (``executes: train.ipynb``), the last it wrote: in its
    container's directory (the embedded cluster), or in the store beside ``board_store`` where
    the task kept it as it ended (YARN, :data:`~tony_workflow.protocol.NOTEBOOK_STORE_ENV`)."""
    found: dict[tuple[str, str], Path] = {}
    if board_store:
        try:
            store = open_storage(f"{board_store.rsplit('/', 1)[0]}/{NOTEBOOKS}")
            for rel in sorted(store.list("")):
                task_dir, _, name = rel.rpartition("/")
                target = scratch / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                store.get(rel, target)
                kind, _, index = task_dir.rpartition("-")  # the task's folder: worker-0 for worker:0
                found[(f"{kind}:{index}", name)] = target
        except FileNotFoundError:
            pass  # no task kept one
        except Exception as e:  # noqa: BLE001 - the store's errors: the record is written without them
            print(f"tony: the job's executed notebooks were not kept: {e}", file=sys.stderr, flush=True)
        return sorted((task, path) for (task, _), path in found.items())
    containers = sorted(Path(app_dir).glob("containers/*/*.executed.ipynb"), key=lambda p: p.stat().st_mtime)
    for path in containers:  # a relaunched task's newer container last: its copy is kept
        try:
            task = (path.parent / "task_id").read_text().strip()
        except OSError:
            continue
        found[(task, path.name)] = path
    return sorted((task, path) for (task, _), path in found.items())


class SubmitterHistory:
    """The history a submitter reads: its own (``own``), and the records of the jobs it submitted
    to run as other users, which are theirs and kept in their histories (``proxied``: each user
    with their history, read as them). Another user's own jobs stay out of it."""

    def __init__(self, own: JobHistory, proxied: Sequence[tuple[str, JobHistory]], submitter: str):
        self.own, self.proxied, self.submitter = own, list(proxied), submitter
        self.store = own.store

    def _theirs(self, user: str, read: Any) -> list[dict[str, Any]]:
        """What ``read`` finds in ``user``'s history that this submitter submitted; nothing, said
        on stderr, when their history cannot be read now (impersonation withdrawn, HDFS away)."""
        try:
            return [r for r in read() if r and r.get("submitter") == self.submitter]
        except OSError as e:
            print(f"tony: the history of jobs run as {user} was not read: {e}", file=sys.stderr)
            return []

    def list(self, state: str | None = None, since: float | None = None, limit: int | None = None,
             full: bool = True, context: Mapping[str, str] | None = None,
             tags: Sequence[str] = ()) -> list[dict[str, Any]]:
        """:meth:`JobHistory.list` over all of them, newest first (theirs read whole)."""
        found = self.own.list(state, since, limit, full, context, tags)
        for user, history in self.proxied:
            found += self._theirs(user, lambda h=history: h.list(state, since, None, True, context, tags))
        found.sort(key=lambda r: r.get("finished_at") or 0, reverse=True)
        return found[:limit] if limit is not None else found

    def get(self, app_id: str) -> dict[str, Any] | None:
        record = self.own.get(app_id)
        for user, history in self.proxied:
            if record is not None:
                break
            record = next(iter(self._theirs(user, lambda h=history: [h.get(app_id)])), None)
        return record
