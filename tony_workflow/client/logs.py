"""``tony logs``: a job's log files as they are now, or with ``--follow`` its tasks' output as they
write it (:mod:`.output`) until the job ends."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..status import JobStatus
from . import JobHandle, TonyClient

__all__ = ["cmd_logs"]


def cmd_logs(args: argparse.Namespace) -> int:
    handle = TonyClient(args.backend).attach(args.app_id)
    if args.follow:
        return _follow(handle, args)
    # A cluster whose files live on its nodes (YARN) copies them here; nothing stays once printed.
    with tempfile.TemporaryDirectory(prefix="tony-logs-") as copies:
        files = handle.logs(args.task, into=Path(copies))
        if args.task and not files:
            return _no_such_task(handle, args.task)
        for name, path in files.items():
            if args.stdout_only and not name.split("#")[0].endswith("stdout"):
                continue
            shown = "" if path.is_relative_to(copies) else f" ({path})"
            print(f"==> {name}{shown} <==")
            try:
                sys.stdout.write(path.read_text(errors="replace"))
            except FileNotFoundError:
                print("(not written yet)")
    return 0


def _no_such_task(handle: JobHandle, task: str) -> int:
    tasks = ["am", *(t.task_id for t in handle.status().tasks)]
    if task in tasks:
        print(f"tony: {task} of {handle.app_id} has no container yet, so no logs", file=sys.stderr)
        return 0
    # The application exists (3 would say it does not): the task named is a usage error.
    print(f"tony: no task {task!r} in {handle.app_id} (its tasks: {', '.join(tasks)})", file=sys.stderr)
    return 2


def _follow(handle: JobHandle, args: argparse.Namespace) -> int:
    """Every line the followed tasks write, until the job ends: 0 if it succeeded, 1 if not, 2
    for a task the job does not have, 130 when the user stops following (the job runs on)."""
    if args.task:
        st = handle.status()
        if args.task not in {t.task_id for t in st.tasks}:
            return _no_such_task(handle, args.task)
    follower = handle.output([args.task] if args.task else None)
    streams = ("stdout",) if args.stdout_only else ("stdout", "stderr")
    last: JobStatus | None = None

    def status() -> JobStatus:
        nonlocal last
        last = handle.status()
        return last

    try:
        for line in follower.follow(status, interval=args.poll_interval):
            if not line.task or line.stream in streams:
                print(line.render(), flush=True)
    except KeyboardInterrupt:
        print(f"\ntony: stopped following {handle.app_id}'s output; the job keeps running", file=sys.stderr)
        return 130
    assert last is not None
    if not last.succeeded:
        print(f"tony: {last.application_id} {last.state}" + (f": {last.diagnostics}" if last.diagnostics else ""),
              file=sys.stderr)
    return 0 if last.succeeded else 1
