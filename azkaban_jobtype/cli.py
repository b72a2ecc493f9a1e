"""The ``tony-azkaban`` command.

``tony-azkaban install-plugin PLUGINS_DIR [--python PATH] [--env NAME=VALUE ...] [--proxy]``
    Writes the ``TonyJob`` and ``TensorFlowJob`` job types into an Azkaban executor's
    ``plugins/jobtypes`` folder.
``tony-azkaban validate PROJECT_DIR_OR_ZIP [--param NAME=VALUE ...] [--json]``
    Loads a whole project (Flow 1.0 or 2.0) as Azkaban would and shows, for every TonY job in every
    flow, the job spec it would submit; otherwise every problem, with its file and key: whatever
    submitting would refuse, down to a job its cluster could never hold.

Mistakes in the input are reported on stderr, one per line, and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tony_workflow.backends import Backend, NeverFits, get_backend
from tony_workflow.errors import TonyError
from tony_workflow.spec import JobSpec, SpecError, parse_pairs

from .flow import JobInstance, Project, load_project
from .plugin import install_plugin
from .props import resolve
from .translate import TONY_JOB_TYPES, backend_name, describe, path_issues, translate

__all__ = ["main"]

EXIT_INPUT = 2

_STAND_INS = ("azkaban.flow.execid", "azkaban.flow.flowid", "azkaban.flow.projectname", "azkaban.flow.submituser",
              "azkaban.job.id", "azkaban.job.attempt")


def cmd_install_plugin(args: argparse.Namespace) -> int:
    written = install_plugin(args.plugins_dir, python=args.python, env=parse_pairs(args.env, "--env"),
                             proxy=args.proxy)
    for path in written:
        print(path)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    params = parse_pairs(args.param, "--param")
    with load_project(args.project) as project:
        report = validate_project(project, params)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print_report(report)
    return EXIT_INPUT if report["errors"] else 0


def validate_project(project: Project, params: dict[str, str] | None = None) -> dict:
    """What ``validate`` reports, as JSON-safe data: the project, each TonY job's spec, warnings and errors."""
    errors = [str(issue) for issue in project.issues]
    warnings: list[str] = []
    jobs = []
    backends: dict[str, Backend | TonyError] = {}
    for instance in project.instances(params):
        if instance.node.type not in TONY_JOB_TYPES:
            continue
        entry = {"job": instance.id, "file": instance.node.source, "type": instance.node.type}
        try:
            spec = _spec_of(instance, project, warnings)
            entry["spec"] = spec.to_dict()
            entry["describe"] = describe(spec)
            # A missing directory still leaves a spec worth showing.
            issues = path_issues(spec, instance.props, source=instance.node.source, origins=instance.props.origins(),
                                 project_dir=project.root)
        except SpecError as exc:
            issues, spec = exc.issues, None
            if exc.spec is not None:  # every problem at once: the paths of a spec with bad values too
                issues = [*issues, *path_issues(exc.spec, instance.props, source=instance.node.source,
                                                origins=instance.props.origins(), project_dir=project.root)]
        entry["errors"] = list(dict.fromkeys(str(issue) for issue in issues))
        if spec is not None and not issues:
            entry["errors"] += _never_fits(spec, instance, backends, warnings)
            inputs, input_errors = _inputs(spec, instance)
            entry["inputs"] = inputs
            entry["errors"] += input_errors
        errors.extend(entry["errors"])
        jobs.append(entry)
    # A Flow 1.0 job in several flows has the same problems in each; say them once.
    return {"project": str(project.root), "name": project.name, "flow_version": project.version,
            "jobs": jobs, "warnings": list(dict.fromkeys(warnings)), "errors": list(dict.fromkeys(errors))}


def _never_fits(spec: JobSpec, instance: JobInstance, backends: dict[str, Backend | TonyError],
                warnings: list[str]) -> list[str]:
    """What submitting would refuse once the spec is good: a gang its cluster could never hold (the
    backend the job would go to, as the runner picks it). A cluster that cannot be asked is a
    warning: the check is the cluster's, and the project may be validated away from it."""
    name = backend_name(instance.props)
    if name not in backends:
        try:
            backends[name] = get_backend(name)
        except TonyError as exc:
            backends[name] = exc
    backend = backends[name]
    try:
        if isinstance(backend, TonyError):
            raise backend
        backend.check_fits(spec)
    except NeverFits as exc:
        return [f"{instance.node.source}: {exc}"]
    except TonyError as exc:
        warnings.append(f"{instance.id}: not checked against the {name} cluster, which could not be asked: {exc}")
    return []


def _inputs(spec: JobSpec, instance: JobInstance) -> tuple[dict[str, dict], list[str]]:
    """The job's inputs as a submission plans them (files, schema, rows), and what it would refuse."""
    from tony_workflow.client import reads_cluster_files
    from tony_workflow.client.data import data_issues, inspect_summary
    name = backend_name(instance.props)
    issues, plans = data_issues(spec, name, reads_cluster_files(name))
    return ({n: inspect_summary(p) for n, p in plans.items()},
            [str(issue) for issue in issues])


def _spec_of(instance: JobInstance, project: Project, warnings: list[str]) -> JobSpec:
    props = instance.props
    resolved = resolve(props)
    command = props.origin("command")
    if command is not None:
        warnings.append(f"{command}: command: set for {instance.id}, it replaces the {instance.node.type} "
                        "job type's own command, so the job would not run TonY; remove it")
    return translate(resolved, source=instance.node.source, origins=props.origins(),
                     base_dir=resolved.get("working.dir") or project.root)


def _print_report(report: dict) -> None:
    print(f"project {report['name']} (Flow {report['flow_version']}): {report['project']}")
    if not report["jobs"]:
        print(f"  no job of type {' or '.join(TONY_JOB_TYPES)}")
    else:
        print(f"  runtime properties are stand-ins: {', '.join(_STAND_INS)} are set by Azkaban per execution")
    for job in report["jobs"]:
        print(f"\n{job['job']}  (type {job['type']}, {job['file']})")
        for line in job.get("describe", ()):
            print(line)
        for name, data in job.get("inputs", {}).items():
            columns = ", ".join(f"{c['name']} {c['type']}" for c in data["schema"])
            print(f"  input {name}: {data['format']}, {len(data['files'])} files, {data['rows']:,} rows, "
                  f"{data['bytes']:,} bytes, {data['units']} {data['unit']}: {columns}")
        if job["errors"]:
            count = len(job["errors"])
            print(f"  cannot be submitted: {count} error{'s' if count > 1 else ''} (listed on stderr)")
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for error in report["errors"]:
        print(f"error: {error}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tony-azkaban", description="TonY jobs in Azkaban: the job type's tools.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("install-plugin", help="write the TonyJob and TensorFlowJob job types into PLUGINS_DIR")
    p.add_argument("plugins_dir", metavar="PLUGINS_DIR", help="the executor's job type folder (plugins/jobtypes)")
    p.add_argument("--python", help="interpreter that runs the jobs (default: this one)")
    p.add_argument("--env", action="append", metavar="NAME=VALUE",
                   help="environment of every job of these types, e.g. TONY_HOME=/var/tony (repeatable)")
    p.add_argument("--proxy", action="store_true",
                   help="run each job as its flow's user.to.proxy on YARN (azkaban.should.proxy=true), as TonY's "
                        "job type did; the executor's login must be allowed to impersonate them")
    p.set_defaults(func=cmd_install_plugin)

    p = sub.add_parser("validate", help="show the job spec of every TonY job in a project, or what is wrong")
    p.add_argument("project", metavar="PROJECT_DIR_OR_ZIP")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="a flow parameter, as given to an execution (repeatable)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
        sys.stdout.flush()  # here, where a reader gone away (`| head`) can still be answered
        return status
    except BrokenPipeError:
        from tony_workflow.client.cli import reader_gone
        return reader_gone()
    except SpecError as exc:
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
