"""Azkaban projects: Flow 1.0 (``.job`` and ``.properties`` files) and Flow 2.0 (``.flow`` YAML).

:func:`load_project` reads a project directory or zip the way Azkaban's upload does and returns a
:class:`Project`: its flows, their nodes, and every problem Azkaban would refuse the upload for
(each naming the file, and the key or node). :meth:`Project.instances` then lists every job as it
would run inside each flow, with the props Azkaban would hand it: its own keys over the
properties of the flows that embed it, the flow parameters and Azkaban's runtime properties, and
(Flow 1.0) the ``.properties`` files of its directory and the directories above.

A project is Flow 2.0 when it holds a ``*.project`` file (at the root, or else in the first
directory that has one) saying ``azkaban-flow-version: 2.0``; otherwise it is Flow 1.0. Hidden
directories (``.git`` and the like) are not part of a project.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

import yaml

from tony_workflow.spec import SpecIssue

from .flow20 import load_flow20
from .project import (
    FLOW_TYPE,
    FLOW_VERSION_KEY,
    JOB_SUFFIX,
    PROJECT_SUFFIX,
    Flow,
    JobInstance,
    Node,
    Project,
    ProjectError,
    dependency_cycles,
    runtime_props,
)
from .props import Props, PropsError, directory_chains, load_properties, relative_name

__all__ = [
    "FLOW_TYPE",
    "Flow",
    "JobInstance",
    "Node",
    "Project",
    "ProjectError",
    "load_project",
    "runtime_props",
]


def load_project(path: str | os.PathLike, name: str | None = None) -> Project:
    """Loads the project at ``path``: a directory, or a zip as uploaded to Azkaban (unpacked into a
    temporary directory that :meth:`Project.close` removes). ``name`` defaults to the directory's
    or zip's name.

    Problems Azkaban reports on upload (a job without a type, an unknown dependency, a cycle, a
    duplicate name, a malformed file) are collected in ``Project.issues``. A path that is neither a
    directory nor a zip, an unsafe zip, or an unreadable ``.project`` file raises :class:`ProjectError`.
    """
    source = Path(path)
    tempdir = None
    if source.is_dir():
        root = source.resolve()
    elif source.is_file() and zipfile.is_zipfile(source):
        tempdir = tempfile.TemporaryDirectory(prefix="azkaban-project-")
        root = Path(tempdir.name)
        try:
            _unzip(source, root)
        except ProjectError:
            tempdir.cleanup()
            raise
    elif source.exists():
        raise ProjectError([SpecIssue("project", str(source), "must be a project directory or a .zip file")])
    else:
        raise ProjectError([SpecIssue("project", str(source), "no such file or directory")])
    project_name = name or (source.stem if tempdir else source.resolve().name)
    try:
        version = _flow_version(root)
        project = Project(root=root, name=project_name, version=version, _tempdir=tempdir)
        if version == "2.0":
            load_flow20(project)
        else:
            _load_flow10(project)
    except BaseException:
        if tempdir is not None:
            tempdir.cleanup()
        raise
    return project


def _unzip(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            name = info.filename
            parts = Path(name).parts
            if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise ProjectError([SpecIssue("zip entry", name, "points outside the project; "
                                              "entries must be relative paths without '..'", str(archive))])
        try:
            zf.extractall(target)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ProjectError([SpecIssue("zip", str(archive), f"cannot be unpacked: {exc}")]) from None


def _flow_version(root: Path, top: Path | None = None) -> str:
    """'2.0' when a .project file says so, '1.0' when there is none; ProjectError otherwise. Like
    Azkaban, the first directory (depth first, in name order) that has a .project file decides."""
    top = top or root
    project_files = sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(PROJECT_SUFFIX))
    if len(project_files) > 1:
        names = ", ".join(p.name for p in project_files)
        raise ProjectError([SpecIssue("project file", names, "only one .project file is allowed per directory",
                                      relative_name(top, root) if root != top else None)])
    if project_files:
        return _read_project_file(project_files[0], relative_name(top, project_files[0]))
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if _flow_version(sub, top) == "2.0":
            return "2.0"
    return "1.0"


def _read_project_file(path: Path, source: str) -> str:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
        raise ProjectError([SpecIssue("document", None, f"not a readable YAML file: {exc}", source)]) from None
    if not isinstance(data, dict) or FLOW_VERSION_KEY not in data:
        raise ProjectError([SpecIssue(FLOW_VERSION_KEY, None, "is required in a .project file "
                                      "(azkaban-flow-version: 2.0)", source)])
    version = data[FLOW_VERSION_KEY]
    # Azkaban compares with the number 2.0: a quoted "2.0" or the integer 2 is refused.
    if not (isinstance(version, float) and version == 2.0):
        raise ProjectError([SpecIssue(FLOW_VERSION_KEY, version, "must be the number 2.0 (unquoted); "
                                      "leave the .project file out for Flow 1.0", source)])
    return "2.0"


def _job_name(path: Path) -> str:
    return path.name.rsplit(".", 1)[0]


def _load_flow10(project: Project) -> None:
    root = project.root
    issues = project.issues
    nodes: dict[str, Node] = {}
    duplicates: set[str] = set()
    try:
        chains = directory_chains(root)
    except PropsError as exc:
        issues.extend(exc.issues)
        return
    for directory in sorted(chains, key=lambda d: d.as_posix()):
        chain = chains[directory]
        for path in sorted((root / directory).iterdir(), key=lambda p: p.name):
            if not (path.is_file() and path.name.endswith(JOB_SUFFIX)):
                continue
            name = _job_name(path)
            source = relative_name(root, path)
            if name in duplicates:
                continue
            if name in nodes:
                issues.append(SpecIssue("job name", name, f"is used twice ({nodes[name].source} and {source}); "
                                        "job names must be unique in a project", source))
                duplicates.add(name)
                del nodes[name]
                continue
            try:
                props = load_properties(path, parent=chain, source=source)
            except PropsError as exc:
                issues.extend(exc.issues)
                continue
            # Like Azkaban, the type may be inherited from a .properties file.
            node = Node(name=name, type=props.get("type"), source=source, props=props,
                        dependencies=_split_list(props.get("dependencies", "")))
            if not node.type:
                issues.append(SpecIssue("type", None, "is required: every job needs a type (e.g. type=TonyJob)",
                                        source))
            if node.is_flow:
                node.embedded_flow = (props.get("flow.name") or "").strip() or None
                if node.embedded_flow is None:
                    issues.append(SpecIssue("flow.name", None, "is required on a job of type flow: "
                                            "the name of the flow it runs", source))
            nodes[name] = node

    dependents: set[str] = set()
    for node in nodes.values():
        for dep in node.dependencies:
            where = _origin_text(node.props, "dependencies", node.source)
            if dep == node.name:
                issues.append(SpecIssue("dependencies", dep, "a job cannot depend on itself", where))
            elif dep in duplicates:
                issues.append(SpecIssue("dependencies", dep, "is ambiguous: two jobs have that name", where))
            elif dep not in nodes:
                issues.append(SpecIssue("dependencies", dep, "no job of that name in the project", where))
            else:
                dependents.add(dep)

    graph = {name: [d for d in node.dependencies if d in nodes] for name, node in nodes.items()}
    for name, dep, cycle in dependency_cycles(graph):
        node = nodes[name]
        issues.append(SpecIssue("dependencies", dep, f"cyclic dependency {cycle}",
                                _origin_text(node.props, "dependencies", node.source)))

    for name, node in nodes.items():
        if name in dependents and not _truthy(node.props.get("root.node", "false")):
            continue
        flow = Flow(id=name, source=node.source)
        _collect_flow10(flow, node, nodes)
        project.flows[name] = flow

    for node in nodes.values():
        if node.is_flow and node.embedded_flow and node.embedded_flow not in project.flows:
            issues.append(SpecIssue("flow.name", node.embedded_flow, "no flow of that name in the project "
                                    "(a flow is named after its last job, the one no other job depends on)",
                                    _origin_text(node.props, "flow.name", node.source)))
    _check_embeddingdependency_cycles(project)


def _collect_flow10(flow: Flow, node: Node, nodes: dict[str, Node]) -> None:
    """Adds ``node`` and everything it depends on, directly or not, to ``flow``."""
    pending = [node]
    while pending:
        current = pending.pop()
        if current.name in flow.nodes:
            continue
        flow.nodes[current.name] = current
        pending.extend(nodes[d] for d in current.dependencies if d in nodes)


def _check_embeddingdependency_cycles(project: Project) -> None:
    def visit(flow_id: str, path: list[str]) -> None:
        flow = project.flows.get(flow_id)
        if flow is None:
            return
        for node in flow.nodes.values():
            inner = node.embedded_flow
            if not node.is_flow or inner is None:
                continue
            if inner in path:
                issue = SpecIssue("flow.name", inner, "embedded flows form a cycle: "
                                  + " -> ".join([*path, inner]), _origin_text(node.props, "flow.name", node.source))
                if issue not in project.issues:
                    project.issues.append(issue)
            else:
                visit(inner, [*path, inner])

    for flow_id in list(project.flows):
        visit(flow_id, [flow_id])


def _origin_text(props: Props, key: str, default: str) -> str:
    origin = props.origin(key)
    return str(origin) if origin else default


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _truthy(value: str) -> bool:
    return value.strip().lower() == "true"
