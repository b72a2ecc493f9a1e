"""The ``tony`` command: submit, status, kill, logs, list, history, advise, tensorboard, clean."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from ..backends import default_backend
from ..context import FIELDS as CONTEXT_FIELDS
from ..context import describe as describe_context
from ..errors import (
    AccessDenied,
    AMUnreachable,
    ConfigError,
    DataError,
    LoginError,
    NotAnApplicationId,
    StoreError,
    SubmissionRefused,
    TonyError,
    UnknownApplication,
    UsageError,
)
from ..spec import JobSpec, SpecError, SpecIssue, parse_pairs
from ..status import JobStatus, TaskStatus, counted, hanging
from . import JobHandle, TonyClient, load_job
from .board import add_tensorboard_parser
from .data import cmd_data_inspect
from .logs import cmd_logs
from .notebook import add_notebook_parser
from .output import parse_tasks
from .records import TABLE_HEADER, cmd_advise, cmd_history, context_filter, show_group, table_row
from .saying import saying

__all__ = ["main", "reader_gone"]


def _follow(handle: JobHandle, poll_interval: float, stream=sys.stderr, output: list[str] | None | bool = False,
            output_stream=sys.stdout) -> JobStatus:
    """Follows the job to its end, a progress line on every change, and with ``output`` (tasks to
    follow: :func:`.output.parse_tasks`'s) what those tasks print; returns the final status."""
    status = None

    def lines(got) -> None:
        for line in got:
            print(line.render(), file=output_stream, flush=True)

    follower = handle.output(output) if output is not False else None  # type: ignore[arg-type]
    for update in handle.follow(poll_interval=poll_interval, output=follower, on_output=lines):
        status = update.status
        stamp = time.strftime("%H:%M:%S")
        print(f"[tony {stamp}] {status.summary()}", file=stream, flush=True)
        if update.new_session:
            print(f"[tony {stamp}] session {status.session_id} started: the previous one failed and was "
                  f"relaunched", file=stream, flush=True)
        for task in update.relaunched:
            print(f"[tony {stamp}] task {task.task_id} relaunched ({task.restarts} so far)", file=stream, flush=True)
        if update.new_am_attempt:
            print(hanging(f"[tony {stamp}] ApplicationMaster attempt {status.am_attempt}: {status.diagnostics}"),
                  file=stream, flush=True)
        for warning in update.new_warnings:
            print(f"[tony {stamp}] warning: {warning}", file=stream, flush=True)
        if update.starting:
            print(f"[tony {stamp}] {update.starting}", file=stream, flush=True)
        if update.final and status.diagnostics:
            print(hanging(f"[tony {stamp}] diagnostics: {status.diagnostics}"), file=stream, flush=True)
    return status if status is not None else handle.status()


def _tony_flags(args: argparse.Namespace) -> list[str]:
    """TonY's client flags that are keys of the job, as --conf entries: appended where the key
    holds a list (tony.containers.envs and resources), as TonY appends them."""
    conf = [f"tony.containers.envs={pair}" for pair in args.container_env or ()]
    conf += [f"tony.containers.resources={path}" for path in _classpath(args.hdfs_classpath or ())]
    if args.tensorboard_log_dir:
        conf.append(f"tony.application.tensorboard-log-dir={args.tensorboard_log_dir}")
    return conf


def _classpath(paths: Sequence[str]) -> list[str]:
    """The ``--hdfs_classpath`` entries that are there: TonY's client drops one that is not, with a
    warning, and so does this one (a resource given any other way that is not there refuses the job)."""
    from ..storage import open_storage

    kept = []
    for path in paths:
        try:
            there, why = open_storage(path).located(), "is not there"
        except (OSError, TonyError) as e:
            there, why = False, f"could not be read ({e})"
        if there:
            kept.append(path)
        else:
            print(f"tony: warning: --hdfs_classpath {path} {why}: left out of the job", file=sys.stderr, flush=True)
    return kept


def submitted_spec(args: argparse.Namespace) -> JobSpec:
    """The job ``tony submit``'s arguments describe (not yet validated: submission does)."""
    if args.spec and args.conf_file:
        raise SpecError([SpecIssue("--conf_file", args.conf_file, f"names a second job file beside {args.spec}: "
                                   "give one")])
    source = args.spec or args.conf_file or {}
    return load_job(source, conf=[*_tony_flags(args), *(args.conf or ())], variables=parse_pairs(args.set, "--set"),
                    executes=args.executes, task_params=args.task_params, src_dir=args.src_dir,
                    python_binary_path=args.python_binary_path, python_venv=args.python_venv,
                    shell_env=parse_pairs(args.shell_env, "--shell-env") or None)


def _say(line: str) -> None:
    print(f"[tony {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def cmd_submit(args: argparse.Namespace) -> int:
    client = TonyClient(args.backend)
    spec = client.checked(lambda: submitted_spec(args))
    if args.dry_run:
        return _valid(spec, args, client)
    with saying(_say):
        handle = client.submit(spec, checked=True)
    # The id on a line of its own, as its own token: schedulers scan logs for it.
    print(f"Submitted application {handle.app_id}", file=sys.stderr, flush=True)
    if not args.wait and args.logs is None:
        st = handle.status()
        print(json.dumps(st.to_dict(), indent=1) if args.json else handle.app_id)
        print(f"tony: follow it with '{_tony(args)} status {handle.app_id} --wait', its logs with "
              f"'{_tony(args)} logs {handle.app_id}'", file=sys.stderr, flush=True)
        return 0
    return _follow_to_the_end(handle, args)


def cmd_validate(args: argparse.Namespace) -> int:
    """Every check ``tony submit`` makes, every problem at once (exit 2), nothing submitted."""
    client = TonyClient(args.backend)
    return _valid(client.checked(lambda: submitted_spec(args)), args, client)


def _valid(spec: JobSpec, args: argparse.Namespace, client: TonyClient) -> int:
    # Last, as submitting does: whether the cluster could ever hold the job's gang (SubmissionRefused,
    # naming the key, when it never could). A cluster that cannot be asked is a warning: the spec
    # itself is valid.
    try:
        client.backend.check_fits(spec)
    except SubmissionRefused:
        raise
    except TonyError as e:
        print(f"tony: warning: not checked against the {args.backend} cluster, which could not be asked: {e}",
              file=sys.stderr)
    if args.json:
        print(json.dumps(spec.to_dict(), indent=1))
        return 0
    print(f"{spec.source or 'the job'}: valid; nothing was submitted")
    for task in spec.tasks.values():
        r = task.resources
        print(f"  {task.type}: {counted(task.instances, 'instance')} of {r.memory_mb} MB, "
              f"{counted(r.vcores, 'vcore')}, {counted(r.gpus, 'GPU')}; runs {task.command or '-'}")
    return 0


def _tony(args: argparse.Namespace) -> str:
    """The command as the user would type it again for this backend."""
    backend = args.backend or default_backend()
    return "tony" if backend == default_backend() else f"tony --backend {backend}"


def _follow_to_the_end(handle: JobHandle, args: argparse.Namespace) -> int:
    """Follows the job with progress lines until it ends; its final line (or status as JSON) on
    stdout. 0: it succeeded, 1: it did not, 130: the user stopped following (the job runs on)."""
    try:
        st = _follow(handle, args.poll_interval, output=_output_tasks(handle, args),
                     output_stream=sys.stderr if args.json else sys.stdout)
    except KeyboardInterrupt:
        # Following is not owning: the job runs in its own ApplicationMaster, not in this process.
        print(f"\ntony: stopped following {handle.app_id}; the job keeps running. Follow it again with "
              f"'{_tony(args)} status {handle.app_id} --wait', stop it with '{_tony(args)} kill {handle.app_id}'.",
              file=sys.stderr, flush=True)
        return 130
    if not st.succeeded and (tails := handle.failed_output(st)):
        print(tails, file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(st.to_dict(), indent=1))
    else:
        print(f"{st.application_id} {st.state}" + (f": {st.diagnostics}" if st.diagnostics and not st.succeeded else ""))
    return 0 if st.succeeded else 1


def _output_tasks(handle: JobHandle, args: argparse.Namespace) -> list[str] | None | bool:
    """The tasks whose output ``--logs`` follows (False: no --logs): those it names, else the
    job's tony.output.tasks, else the chief."""
    given = getattr(args, "logs", None)
    if given is None:
        return False
    if not given.strip() and handle.spec is not None:
        given = handle.spec.get("tony.output.tasks") or ""
    return parse_tasks(given)


def _handle(args: argparse.Namespace) -> JobHandle:
    return TonyClient(args.backend).attach(args.app_id)


def cmd_status(args: argparse.Namespace) -> int:
    handle = _handle(args)
    if args.wait or args.logs is not None:
        return _follow_to_the_end(handle, args)
    st = handle.status()
    if args.json:
        print(json.dumps(st.to_dict(), indent=1))
    else:
        print(st.summary())
        if st.context:
            print(f"  from: {describe_context(st.context)}" + (f"  {st.context['url']}" if st.context.get("url") else ""))
        for t in st.tasks:
            print(_task_row(st, t))
        if st.elastic:
            show_group(st.elastic)
        if st.diagnostics:
            print(hanging(f"  diagnostics: {st.diagnostics}"))
    return 0


def _task_row(st: JobStatus, t: TaskStatus) -> str:
    """One task of ``tony status``: its state, where it runs (``-`` before it is placed), its exit
    code once it has one, and its log."""
    code = "" if t.exit_code is None else f" exit={t.exit_code}"
    where = f"{t.host}:{t.port}" if t.host and t.port else (t.host or "-")
    return f"  {t.task_id:<14} {st.shown_state(t):<10} {where}{code}  {t.log_url or ''}".rstrip()


def cmd_kill(args: argparse.Namespace) -> int:
    handle = _handle(args)
    before = handle.status()
    if before.is_final:
        print(f"{before.application_id} {before.state}")
        print(f"tony: {before.application_id} had already ended ({before.state}): nothing to kill", file=sys.stderr)
        return 0
    st = handle.kill()
    print(f"{st.application_id} {st.state}")
    return 0 if st.is_final else 1


def _add_context_filters(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where the job came from (compared without case)")
    for f in CONTEXT_FIELDS:
        if f.option:
            g.add_argument(f"--{f.option}", metavar=f.option.upper(), help=f"only the jobs of this {f.doc.replace(': the ', ' ')}")
    g.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="only jobs with this application tag, e.g. azkaban.flow.execid:42 (repeatable: all of them)")


def cmd_list(args: argparse.Namespace) -> int:
    statuses = TonyClient(args.backend).list(context=context_filter(args), tags=args.tag)
    if args.json:
        print(json.dumps([s.to_dict() for s in statuses], indent=1))
        return 0
    print(TABLE_HEADER)
    for s in reversed(statuses):
        print(table_row(s.application_id, s.state, s.started_at, s.finished_at, s.name, s.context))
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from ..backends.local.ledger import cluster_dir
    from ..retention import clean, human_size, parse_duration
    from ..spec import local_settings

    if args.backend != "local":
        return _clean_shipped(args)
    try:
        older = parse_duration(args.older_than) if args.older_than is not None else local_settings().retention_s
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not args.app_ids and args.older_than is None and older <= 0:
        print("tony: tony.local.retention-sec is 0 (keep every job); name jobs or give --older-than",
              file=sys.stderr)
        return 2
    removed, refused = clean(cluster_dir() / "apps", older_than_s=older, app_ids=args.app_ids,
                             dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for r in removed:
        print(f"{verb} {r.application_id} ({human_size(r.bytes)})")
    for app_id, why in refused:
        print(f"tony: {app_id} was not removed: {why}", file=sys.stderr)
    print(f"{verb} {len(removed)} job(s), {human_size(sum(r.bytes for r in removed))}")
    return 2 if refused else 0


def _clean_shipped(args: argparse.Namespace) -> int:
    """``tony clean --backend yarn``: what jobs shipped and no job of today's versions names, in the
    user's HDFS cache once uploaded longer ago than --older-than (default 30 days: a job that
    still runs may start a container from one), and on this machine. YARN keeps and removes the
    jobs themselves (yarn.log-aggregation.retain-seconds)."""
    from ..backends.yarn.runtime import local_archives, runtime_key
    from ..backends.yarn.ship import open_cache
    from ..retention import human_size, parse_duration

    if args.app_ids:
        raise UsageError("on YARN tony clean removes what jobs shipped, not jobs: YARN keeps and removes its own "
                         "(yarn.log-aggregation.retain-seconds)")
    try:
        older = parse_duration(args.older_than or "30d")
    except ValueError as e:
        raise UsageError(str(e)) from None
    current = runtime_key()
    verb = "would remove" if args.dry_run else "removed"
    count, total = 0, 0
    for path in local_archives():
        if path.stem != current and time.time() - path.stat().st_mtime > older:
            count, total = count + 1, total + path.stat().st_size
            print(f"{verb} {path} ({human_size(path.stat().st_size)})")
            if not args.dry_run:
                path.unlink(missing_ok=True)
    backend = TonyClient(args.backend).backend
    cache = open_cache(backend.conf_dir, backend.login)  # type: ignore[attr-defined]
    if cache is None:
        print("tony: the user's cache in HDFS cannot be reached: only this machine's archives were looked at",
              file=sys.stderr)
    else:
        for key, size in cache.stale(older, {current}):
            count, total = count + 1, total + size
            print(f"{verb} {cache.uri}/{key} ({human_size(size)})")
            if not args.dry_run:
                cache.store.delete(key)
    print(f"{verb} {count} shipped file(s), {human_size(total)}")
    return 0


LOGS_HELP = ("follow the job (as --wait does) and print what its tasks print as they write it, each line after its "
             "task: the chief's (or the job's tony.output.tasks), or TASKS' (ids or types, comma-separated)")
BACKEND_HELP = "the cluster: local or yarn (default $TONY_BACKEND, else tony.client.backend in tony-site.xml, else local)"

EXIT_CODES = """exit status:
  0    done: the job succeeded, or the command did what it was asked (a server,
       tony history serve or tony tensorboard, stopped with Ctrl-C or SIGTERM)
  1    the job failed or was killed, or the cluster or a store failed
  2    a usage or job spec error (nothing was submitted), or no such task of a job
  3    no such application
  130  stopped following (Ctrl-C): the job keeps running"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tony", description="Run distributed training jobs (TonY-compatible).",
                                 epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["local", "yarn"], default=None,
                    help="the cluster: local (the embedded one) or yarn; default $TONY_BACKEND, else local")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("submit", help="submit a job spec (YAML, JSON or TonY XML; Jinja2 templates allowed)")
    s.add_argument("spec", nargs="?", help="the job's file; without one (TonY's way) the job is its --conf keys")
    s.add_argument("--conf-file", "--conf_file", dest="conf_file", help="TonY's name for the job's file")
    s.add_argument("--conf", action="append", metavar="KEY=VALUE", help="override a tony.* key (repeatable)")
    s.add_argument("--set", action="append", metavar="NAME=VALUE", help="a template variable (repeatable)")
    s.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    s.add_argument("--wait", action="store_true", help="follow the job until it ends; exit 0 if it succeeded")
    s.add_argument("--json", action="store_true", help="print the JobStatus as JSON on stdout")
    s.add_argument("--logs", nargs="?", const="", default=None, metavar="TASKS", help=LOGS_HELP)
    s.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS",
                   help="with --wait, how often the job's status is read (default 1)")
    s.add_argument("--executes", metavar="SCRIPT",
                   help="what every task runs: a script in --src-dir (train.py) or a command (python x.py)")
    s.add_argument("--task-params", "--task_params", dest="task_params", metavar="ARGS",
                   help="arguments given to the script every task runs")
    s.add_argument("--src-dir", "--src_dir", dest="src_dir", metavar="DIR",
                   help="the job's source directory, given to every task as its working directory")
    s.add_argument("--python-binary-path", "--python_binary_path", dest="python_binary_path", metavar="PATH",
                   help="the Python that runs --executes (in --python-venv when relative)")
    s.add_argument("--python-venv", "--python_venv", dest="python_venv", metavar="VENV",
                   help="a virtualenv (directory or zip; hdfs:// on YARN) every task runs in")
    s.add_argument("--shell-env", "--shell_env", dest="shell_env", action="append", metavar="K=V",
                   help="a variable of every task's command (repeatable)")
    s.add_argument("--container-env", "--container_env", dest="container_env", action="append", metavar="K=V",
                   help="a variable of every container (tony.containers.envs; repeatable)")
    s.add_argument("--hdfs-classpath", "--hdfs_classpath", dest="hdfs_classpath", action="append", metavar="URI",
                   help="files every container is given, e.g. an hdfs:// directory (tony.containers.resources)")
    s.add_argument("--sidecar-tensorboard-log-dir", "--sidecar_tensorboard_log_dir", dest="tensorboard_log_dir",
                   metavar="DIR", help="a TensorBoard task serves this directory (tony.application.tensorboard-log-dir)")
    s.add_argument("--dry-run", action="store_true",
                   help="check the job as submitting would, every problem at once (exit 2), and submit nothing")
    s.set_defaults(fn=cmd_submit)
    v = sub.add_parser("validate", parents=[], add_help=True, formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="check a job as submit would (every problem at once, exit 2) and submit nothing")
    for action in s._actions:
        if action.dest not in ("help", "wait", "poll_interval", "dry_run", "logs"):
            v._add_action(action)
    v.set_defaults(fn=cmd_validate)

    for name, fn, helptext in (("status", cmd_status, "show an application's status (--wait: follow it)"),
                               ("kill", cmd_kill, "kill an application")):
        p = sub.add_parser(name, help=helptext, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("app_id", metavar="APPLICATION_ID")
        p.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
        if name == "status":
            p.add_argument("--json", action="store_true", help="print the JobStatus as JSON on stdout")
            p.add_argument("--wait", action="store_true",
                           help="follow the job with progress lines until it ends; exit 0 if it succeeded")
            p.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS",
                           help="with --wait, how often the job's status is read (default 1)")
            p.add_argument("--logs", nargs="?", const="", default=None, metavar="TASKS", help=LOGS_HELP)
        p.set_defaults(fn=fn)

    lg = sub.add_parser("logs", help="print an application's logs")
    lg.add_argument("app_id", metavar="APPLICATION_ID")
    lg.add_argument("--task", help="one task, e.g. worker:0 (or am)")
    lg.add_argument("--stdout-only", action="store_true", help="only the tasks' standard output")
    lg.add_argument("-f", "--follow", action="store_true",
                    help="print the tasks' output as they write it until the job ends, each line after its task "
                         "(the chief's unless --task says); exit 0 if the job succeeded, 1 if not")
    lg.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS", help=argparse.SUPPRESS)
    lg.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    lg.set_defaults(fn=cmd_logs)

    ls = sub.add_parser("list", help="list applications, newest first")
    ls.add_argument("--json", action="store_true", help="print the JobStatus of each as JSON on stdout")
    _add_context_filters(ls)
    ls.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    ls.set_defaults(fn=cmd_list)

    hs = sub.add_parser("history", help="jobs that ended, from the job history",
                        description="Lists jobs that ended, newest first, from the job history "
                                    "(tony.history.location in tony-site.xml; default $TONY_HOME/history, or "
                                    "/user/<user>/.tony/history in HDFS on YARN), or shows one. "
                                    "`tony history serve` serves its pages (see tony history serve --help).")
    hs.add_argument("app_id", nargs="?", metavar="APPLICATION_ID", help="show this job: timeline, tasks, hints")
    hs.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    hs.add_argument("--state", type=str.upper, choices=["SUCCEEDED", "FAILED", "KILLED"],
                    help="only the jobs that ended so")
    hs.add_argument("--since", metavar="WHEN", help="started since: a duration back (7d, 12h) or a date (2026-11-20)")
    hs.add_argument("--limit", type=int, default=20, metavar="N", help="at most N jobs (default 20)")
    _add_context_filters(hs)
    hs.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    hs.set_defaults(fn=cmd_history)

    ad = sub.add_parser("advise", help="advice that sizes the next run, from the job history",
                        description="Judges a job's request against what its runs used (memory, vcores, GPUs, the "
                                    "wait for its gang): one job and every other run of its workflow task, or a "
                                    "workflow task's runs named by --dag and --task (or --project, --flow, --job). "
                                    "Prints the changes as --conf lines on stdout, what was seen on stderr.")
    ad.add_argument("app_id", nargs="?", metavar="APPLICATION_ID", help="this run, and the other runs of its task")
    ad.add_argument("--runs", type=int, default=10, metavar="N", help="the newest N runs at most (default 10)")
    ad.add_argument("--json", action="store_true", help="print the runs, the advice and the lines as JSON")
    _add_context_filters(ad)
    ad.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    ad.set_defaults(fn=cmd_advise)

    add_tensorboard_parser(sub, BACKEND_HELP)
    add_notebook_parser(sub, BACKEND_HELP)

    data = sub.add_parser("data", help="a training input: what it holds, checked as a submission checks it")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    di = data_sub.add_parser("inspect", help="the format, schema, rows, bytes and units of an input",
                             description="Plans an input as a submission does (lists its files, reads their "
                                         "footers or headers, checks their schemas agree) and prints what it "
                                         "holds; a bad input is refused naming the file (exit status 2).")
    di.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or globs; local, hdfs:// or webhdfs://")
    di.add_argument("--format", choices=["parquet", "orc", "avro", "tfrecord"], help="default: from the extension")
    di.add_argument("--columns", help="comma-separated: check that the input has them")
    di.add_argument("--filter", help="a row filter, as tony.data.<input>.filter takes it: count the rows it keeps")
    di.add_argument("--verify", action="store_true", help="read every unit whole, to find damaged data now")
    di.add_argument("--json", action="store_true", help="print JSON")
    di.set_defaults(fn=cmd_data_inspect)

    cl = sub.add_parser("clean", help="remove the directories of finished local jobs, or what YARN jobs shipped",
                        description="Removes the directories of final jobs of the local cluster: the ones "
                                    "named, or every one final for longer than --older-than (default "
                                    "tony.local.retention-sec of tony-site.xml, 7 days). Running jobs are "
                                    "never removed. With --backend yarn: the runtime archives, environments "
                                    "and configurations jobs shipped, from the user's HDFS cache and this "
                                    "machine's, uploaded longer ago than --older-than (default 30 days), but "
                                    "this client's own runtime.")
    cl.add_argument("app_ids", nargs="*", metavar="APPLICATION_ID")
    cl.add_argument("--older-than", metavar="DURATION", help="e.g. 3d, 12h, 30m, 90s (default: the retention)")
    cl.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    cl.add_argument("--backend", choices=["local", "yarn"], default=argparse.SUPPRESS, help=BACKEND_HELP)
    cl.set_defaults(fn=cmd_clean)

    # Everything after `minicluster` goes unparsed to the mini cluster's own command line, imported
    # only when that runs, so that no other command loads it. With "\0" as the only option prefix
    # (no argument can start with it), --help and every other word land in that list.
    mc = sub.add_parser("minicluster", help="run a local Hadoop 3.5.0 cluster (YARN + HDFS)", add_help=False,
                        prefix_chars="\0")
    mc.add_argument("minicluster_argv", nargs=argparse.REMAINDER)

    def run_minicluster(args: argparse.Namespace) -> int:
        from ..minicluster.cli import main as minicluster_main
        return minicluster_main(args.minicluster_argv, parent=ap)
    mc.set_defaults(fn=run_minicluster)
    return ap


#: How the command line reports the project's errors: the first that matches gives the line's
#: opening and the exit status (2: the input must change; 1: the cluster or a store failed).
ERROR_REPORTS: tuple[tuple[type[TonyError], str, int], ...] = (
    (SpecError, "invalid job spec, nothing was submitted:\n", 2),
    (SubmissionRefused, "the job cannot run on this cluster, nothing was submitted:\n", 2),
    (NotAnApplicationId, "", 2),
    (UnknownApplication, "", 3),
    (LoginError, "cannot log in to the cluster: ", 2),
    (AccessDenied, "", 2),
    (ConfigError, "", 2),
    (DataError, "the input cannot be read as declared: ", 2),
    (UsageError, "", 2),
    (AMUnreachable, "the job's ApplicationMaster does not answer: ", 1),
    (StoreError, "the store failed: ", 1),
    (TonyError, "", 1),
)


def error_report(error: TonyError) -> tuple[str, int]:
    """The line the command prints for ``error`` (without the ``tony: `` prefix), and its exit status."""
    for kind, opening, status in ERROR_REPORTS:
        if isinstance(error, kind):
            return f"{opening}{error}", status
    raise AssertionError("TonyError is the last row")


#: The extra of this project that installs a module a command may need, by the module's top name.
EXTRAS = {"fastapi": "history", "uvicorn": "history", "multipart": "history", "skein": "yarn", "pyhdfs": "yarn",
          "requests_gssapi": "yarn", "gssapi": "yarn", "pyarrow": "data", "fastavro": "data", "cramjam": "data",
          "google_crc32c": "data", "tensorboard": "tensorflow", "tensorflow": "tensorflow",
          "openlineage": "lineage", "airflow": "airflow", "jupyterlab": "notebook", "httpx": "history",
          "websockets": "history"}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One line naming the extra to install for a module that is not there; None for any other."""
    module = (error.name or "").split(".", 1)[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return (f"this needs {module}, which is not installed: pip install 'tony-workflow[{extra}]' (the {extra} extra)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        print(f"tony: {line}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    serve = _history_serve(argv)
    if serve is not None:  # beside `tony history [APP]`, whose argument could be any word
        from ..web.server import serve_parser
        args = serve_parser(BACKEND_HELP, TonyClient).parse_args(serve)
    else:
        args = build_parser().parse_args(argv)
    try:
        args.backend = args.backend or default_backend()
        if args.backend == "yarn":  # a command lives for seconds: its driver is kept for the next one
            from ..backends.yarn.driver import detach_drivers
            detach_drivers()
        status: int = args.fn(args)
        sys.stdout.flush()  # here, where a reader gone away can still be answered
        return status
    except TonyError as e:
        line, status = error_report(e)
        if status == 3 and args.backend == "local":
            line += " (a YARN application? add --backend yarn, or set TONY_BACKEND=yarn)"
        print(f"tony: {line}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return reader_gone()


def _history_serve(argv: list[str]) -> list[str] | None:
    """The arguments of ``tony [--backend B] history serve ...`` (the top level's --backend kept),
    or None for any other command."""
    i = 0
    while i < len(argv) and argv[i].startswith("--backend"):
        i += 1 if "=" in argv[i] else 2
    if argv[i:i + 2] != ["history", "serve"]:
        return None
    return argv[:i] + argv[i + 2:]


def reader_gone() -> int:
    """The status of a command whose reader went away (``tony history | head``): what is left to
    print goes nowhere, with no traceback, and the command ends as a shell's would on SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
