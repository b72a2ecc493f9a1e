"""What the ``tony`` command prints of jobs that ran: the one table of ``list`` and ``history``,
a job's record (``history APP``), an elastic group's course, and the ``history`` command itself."""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from ..backends import history_server
from ..context import FIELDS as CONTEXT_FIELDS
from ..context import describe as describe_context
from ..errors import UsageError
from ..status import FINAL_STATES, hanging
from . import TonyClient

if TYPE_CHECKING:
    from ..history import JobHistory, SubmitterHistory

__all__ = ["TABLE_HEADER", "cmd_advise", "cmd_history", "context_filter", "show_group", "show_record", "table_row", "when"]


#: The columns of ``tony list`` and ``tony history``, one job a row, newest first.
TABLE_HEADER = f"{'APPLICATION':<32}{'STATE':<12}{'STARTED':<21}{'TOOK':>8}  NAME  (FROM)"


def context_filter(args: argparse.Namespace) -> dict[str, str]:
    """The context fields ``--dag``, ``--run``, ``--flow`` ... ask for, by field name."""
    return {f.name: getattr(args, f.option) for f in CONTEXT_FIELDS
            if f.option and getattr(args, f.option, None) is not None}


def table_row(app_id: str, state: str, started: float | None, finished: float | None, name: str | None,
              context: dict | None) -> str:
    """One job's row of :data:`TABLE_HEADER`: a job still running took as long as it has run."""
    took = ((finished or time.time()) - started) if started else None
    origin = describe_context(context)
    return (f"{app_id:<32}{state:<12}{when(started):<21}{'-' if took is None else f'{took:.0f}s':>8}  {name or '-'}"
            + (f"  ({origin})" if origin else ""))


def show_group(g: dict) -> None:
    """An elastic group: its size now, who waits to join, and each change of its size with why."""
    waiting = f"; waiting to join: {', '.join(g['waiting'])}" if g.get("waiting") else ""
    print(f"elastic group: {g.get('size')} of {g.get('target')} nodes (at least {g.get('min')}), "
          f"membership changes {g.get('changes')} of {g.get('max_changes')}{waiting}")
    for h in g.get("history") or []:
        change = "".join(f"; {k}: {', '.join(h[k])}" for k in ("left", "joined", "replaced") if h.get(k))
        why = "".join(f"; {t}: {c}" for t, c in (h.get("causes") or {}).items())
        print(f"  {when(h.get('at'))}  size {h.get('size')}  {h.get('event')}{change}{why}")


def _since(text: str) -> float:
    """``--since``: a duration back from now (``3d``, ``12h``) or a date or time (``2026-11-20``,
    ``2026-11-20T10:00``, taken as UTC without a zone)."""
    import datetime as dt

    from ..retention import parse_duration

    try:
        return time.time() - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since: {text!r} is neither a duration (90m, 12h, 7d) nor a date or time "
                         "(2026-11-20, 2026-11-20T10:00)") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _history_line(r: dict) -> str:
    return table_row(r["application_id"], r["state"], r.get("started_at"), r.get("finished_at"),
                      r.get("name"), r.get("context"))


def show_record(r: dict) -> None:
    from ..status import progress_text

    print(f"{r['application_id']} {r['state']}  {r.get('name') or ''}  user={r.get('user')}  backend={r.get('backend')}")
    print(f"  started {when(r.get('started_at'))}, finished {when(r.get('finished_at'))}, "
          f"{len(r.get('sessions') or [])} session(s), {r.get('am_attempts', 1)} ApplicationMaster attempt(s)")
    if r.get("context"):
        print(f"  from: {describe_context(r['context'])}" + (f"  {r['context']['url']}" if r['context'].get("url") else ""))
    if r.get("diagnostics"):
        print(f"  diagnostics: {r['diagnostics']}")
    kept = r.get("tensorboard_logs")
    server = history_server() if r.get("state") in FINAL_STATES else None
    if server:
        print(f"  page: {server}/jobs/{r['application_id']}")
    if kept:
        where = f"{server}/jobs/{r['application_id']}/tensorboard/" if server else f"tony tensorboard {r['application_id']}"
        print(f"  TensorBoard: {where}  ({kept.get('files')} event file(s) kept in {kept.get('uri')})")
    if r.get("progress"):
        print(f"  progress: {progress_text(r['progress'], metrics=8)}")
    for name, line in ((r.get("series") or {}).get("metrics") or {}).items():
        points = [v for v in line if v is not None]
        if len(points) == 1:
            print(f"  {name}: {points[0]:.4g} (1 point)")
        elif points:
            print(f"  {name}: {points[0]:.4g} first, {min(points):.4g} to {max(points):.4g}, {points[-1]:.4g} last "
                  f"({len(points)} points)")
    if r.get("elastic"):
        show_group(r["elastic"])
    print("timeline:")
    for item in r.get("timeline") or []:
        print(hanging(f"  {when(item['ts'])}  {item['what']}" + (f": {item['detail']}" if item.get("detail") else "")))
    print("tasks:")
    for t in r.get("tasks") or []:
        m = t.get("metrics") or {}
        figures = " ".join(f"{k}={m[k]}" for k in ("max_rss_mb", "avg_rss_mb", "cpu_percent", "gpu_util_percent",
                                                   "gpu_mem_mb") if m.get(k) is not None)
        print(f"  {t['task_id']:<12} {t.get('state') or '-':<10} exit={t.get('exit_code')} restarts={t['restarts']}"
              f"  {figures}")
        if t.get("log"):
            print(f"  {'':<12} log: {t['log']}")
    from ..advice import advise, as_conf_lines
    found = advise([r])
    for hint in [] if found else r.get("hints") or []:  # the advice says it with the keys to set
        print(f"hint: {hint}")
    for a in found:
        print(f"advice [{a.severity}] {a.heuristic}: {a.message}")
    if found and as_conf_lines(found):
        print("  next run: " + " ".join(as_conf_lines(found)))
    for warning in r.get("warnings") or []:
        print(f"warning: {warning}")


def cmd_history(args: argparse.Namespace) -> int:
    history = TonyClient(args.backend).history()
    if args.app_id:
        record = history.get(args.app_id)
        if record is None:
            print(f"tony: no history of {args.app_id} in {history.store.uri}", file=sys.stderr)
            return 3
        if args.json:
            print(json.dumps(record, indent=1))
        else:
            show_record(record)
        return 0
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    records = history.list(state=args.state, since=_since(args.since) if args.since else None, limit=args.limit,
                           context=context_filter(args), tags=args.tag)
    if args.json:
        keep = ("application_id", "name", "user", "state", "started_at", "finished_at", "diagnostics", "context")
        print(json.dumps([{**{k: r.get(k) for k in keep},
                           "tasks": [{k: t.get(k) for k in ("task_id", "state", "exit_code", "restarts", "metrics")}
                                     for t in r.get("tasks") or []]} for r in records], indent=1))
        return 0
    print(TABLE_HEADER)
    for r in records:
        print(_history_line(r))
    return 0




def _runs(args: argparse.Namespace, history: JobHistory | SubmitterHistory) -> tuple[list[dict], str]:
    """The records to advise from, newest first (the one named first), and what they are runs of."""
    from ..advice import runs_of, workflow_task

    limit = max(1, args.runs)
    if args.app_id:
        record = history.get(args.app_id)
        if record is None:
            raise LookupError(f"no history of {args.app_id} in {history.store.uri}")
        task = workflow_task(record.get("context"))
        what = describe_context(task) if task else f"{args.app_id} (submitted by hand: this run alone)"
        return runs_of(history, record, limit), what
    wanted = context_filter(args)
    if not wanted:
        raise UsageError("name a job (APPLICATION_ID) or a workflow task: --dag and --task, or --project, --flow and "
                         "--job")
    return history.list(context=wanted, limit=limit), describe_context(wanted)


def cmd_advise(args: argparse.Namespace) -> int:
    from ..advice import advise, as_conf_lines

    history = TonyClient(args.backend).history()
    try:
        runs, what = _runs(args, history)
    except LookupError as e:
        print(f"tony: {e}", file=sys.stderr)
        return 3
    if not runs:
        print(f"tony: no run of {what} in the history ({history.store.uri})", file=sys.stderr)
        return 3
    found = advise(runs)
    if args.json:
        print(json.dumps({"runs": [r["application_id"] for r in runs], "advice": [a.to_dict() for a in found],
                          "conf": as_conf_lines(found)}, indent=1))
        return 0
    print(f"advice for the next run of {what}, from {len(runs)} run(s), the newest {runs[0]['application_id']}:",
          file=sys.stderr)
    for a in found:
        print(f"  [{a.severity}] {a.heuristic}: {a.message}", file=sys.stderr)
    if not found:
        print("  nothing to change: what it asked for fits what it used", file=sys.stderr)
    for line in as_conf_lines(found):
        print(line)
    return 0
