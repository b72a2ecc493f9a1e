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

import datetime
import getpass
import os
import tempfile
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tony_workflow.spec import SpecError, SpecIssue

from .props import Props, PropsError, directory_chains, load_properties, relative_name

__all__ = ["Project", "Flow", "Node", "JobInstance", "ProjectError", "load_project", "runtime_props",
           "FLOW_TYPE"]

#: The node type of an embedded flow (Flow 1.0: a job with ``type=flow`` and ``flow.name``).
FLOW_TYPE = "flow"
JOB_SUFFIX = ".job"
FLOW_SUFFIX = ".flow"
PROJECT_SUFFIX = ".project"
FLOW_VERSION_KEY = "azkaban-flow-version"

# The fields a Flow 2.0 node may have (those of Azkaban's NodeBean); the flow file's top level
# is a node too, whose name and type come from the file.
_NODE_FIELDS = ("name", "type", "config", "dependsOn", "condition", "nodes", "trigger")
_FLOW_FIELDS = ("config", "nodes", "trigger")


class ProjectError(SpecError):
    """A project that cannot be read at all (not a directory or zip, an unsafe zip, a bad ``.project``)."""


@dataclass
class Node:
    """A node of a flow: a job, or (``type == "flow"``) an embedded flow.

    ``props`` is the node's own layer (Flow 1.0: the job file over its directory chain; Flow 2.0:
    its ``config`` plus ``type``). ``embedded_flow`` is the id of the flow an embedded-flow node
    runs. ``source`` is the file that defines it, relative to the project.
    """

    name: str
    type: str | None
    source: str
    props: Props
    dependencies: list[str] = field(default_factory=list)
    condition: str | None = None
    embedded_flow: str | None = None

    @property
    def is_flow(self) -> bool:
        return self.type == FLOW_TYPE


@dataclass
class Flow:
    """A flow: ``id`` (``name``, or ``parent:node`` for a Flow 2.0 embedded flow), its ``nodes`` by
    name, and (Flow 2.0) ``props``, its ``config`` layer."""

    id: str
    source: str
    nodes: dict[str, Node] = field(default_factory=dict)
    props: Props | None = None
    embedded: bool = False


@dataclass
class JobInstance:
    """A job as it runs inside one flow. ``path`` is the root flow, the embedded-flow nodes leading
    to the job, and the job's name; ``props`` the full chain Azkaban would build for it."""

    path: tuple[str, ...]
    node: Node
    props: Props

    @property
    def id(self) -> str:
        return ":".join(self.path)

    @property
    def flow_id(self) -> str:
        return self.path[0]


@dataclass
class Project:
    """A loaded project. ``issues`` lists what Azkaban would reject it for; the rest is still loaded."""

    root: Path
    name: str
    version: str
    flows: dict[str, Flow] = field(default_factory=dict)
    issues: list[SpecIssue] = field(default_factory=list)
    _tempdir: tempfile.TemporaryDirectory | None = field(default=None, repr=False)

    @property
    def root_flows(self) -> list[Flow]:
        return [flow for flow in self.flows.values() if not flow.embedded]

    def instances(self, params: Mapping[str, str] | None = None, *,
                  runtime: Mapping[str, str] | None = None) -> list[JobInstance]:
        """Every job of every root flow, with embedded flows expanded, and its props chain.

        ``params`` are flow parameters (they override the flows' own properties, as Azkaban's
        execution options do). ``runtime`` replaces the stand-ins :func:`runtime_props` makes up
        for the properties Azkaban sets on each execution.
        """
        found: list[JobInstance] = []
        for flow in self.root_flows:
            common = runtime_props(self.name, flow.id)
            common.update(runtime or {})
            base = Props(common, source="runtime")
            if flow.props is not None:
                base = flow.props.over(base)
            if params:
                base = Props(dict(params), parent=base, source="flow parameters")
            self._expand(flow, (flow.id,), base, [], found, set())
        return found

    def _expand(self, flow: Flow, path: tuple[str, ...], flow_input: Props, embedding: list[Props],
                found: list[JobInstance], active: set[str]) -> None:
        if flow.id in active:
            return  # an embedded-flow cycle, already reported
        active = active | {flow.id}
        for node in flow.nodes.values():
            if node.is_flow:
                inner = self.flows.get(node.embedded_flow or "")
                if inner is None:
                    continue
                if self.version == "2.0":
                    # The embedded flow's config is its input over the outer flow's.
                    self._expand(inner, (*path, node.name), node.props.over(flow_input), [], found, active)
                else:
                    # A Flow 1.0 embedded-flow node's own .job file (without its directory chain)
                    # sits between the jobs inside and the outer flow's input.
                    own = Props(node.props.values, source=node.props.source, lines=node.props.lines)
                    self._expand(inner, (*path, node.name), flow_input, [own, *embedding], found, active)
                continue
            found.append(JobInstance((*path, node.name), node,
                                     self._job_chain(node, path, flow_input, embedding)))

    def _job_chain(self, node: Node, path: tuple[str, ...], flow_input: Props, embedding: list[Props]) -> Props:
        if self.version == "2.0":
            chain = node.props.over(flow_input)
        else:
            # Azkaban 1.0: the job file, then the embedding flows' nodes, then the flow's input, then
            # the job's own directory chain at the very bottom.
            directory_chain = node.props.parent
            below = flow_input.over(directory_chain)
            for layer in reversed(embedding):
                below = layer.over(below)
            own = Props(node.props.values, source=node.props.source, lines=node.props.lines)
            chain = own.over(below)
        # What the executor sets on every job just before it runs it.
        job_runtime = {"azkaban.job.id": node.name, "azkaban.job.attempt": "0"}
        if len(path) > 1:
            job_runtime["azkaban.flow.nested.path"] = ":".join((*path[1:], node.name))
        if "working.dir" not in chain:
            # The executor runs each job in the directory of the file that defines it.
            job_runtime["working.dir"] = str((self.root / node.source).parent)
        if "user.to.proxy" not in chain and "azkaban.flow.submituser" in chain:
            job_runtime["user.to.proxy"] = chain["azkaban.flow.submituser"]
        return Props(job_runtime, parent=chain, source="runtime")

    def close(self) -> None:
        if self._tempdir is not None:
            self._tempdir.cleanup()
            self._tempdir = None

    def __enter__(self) -> Project:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def runtime_props(project_name: str, flow_id: str) -> dict[str, str]:
    """Stand-ins for the properties Azkaban's executor sets on a flow execution (flow id,
    execution id 0, project name, submit user = the current user, start time = now)."""
    now = datetime.datetime.now().astimezone()
    user = _current_user()
    return {
        "azkaban.flow.flowid": flow_id,
        "azkaban.flow.execid": "0",
        "azkaban.flow.projectid": "0",
        "azkaban.flow.projectname": project_name,
        "azkaban.flow.projectversion": "1",
        "azkaban.flow.uuid": str(uuid.uuid4()),
        "azkaban.flow.projectlastchangedby": user,
        "azkaban.flow.projectlastchangeddate": "0",
        "azkaban.flow.submituser": user,
        "azkaban.flow.start.timestamp": now.isoformat(timespec="milliseconds"),
        "azkaban.flow.start.year": now.strftime("%Y"),
        "azkaban.flow.start.month": now.strftime("%m"),
        "azkaban.flow.start.day": now.strftime("%d"),
        "azkaban.flow.start.hour": now.strftime("%H"),
        "azkaban.flow.start.minute": now.strftime("%M"),
        "azkaban.flow.start.second": now.strftime("%S"),
        "azkaban.flow.start.milliseconds": f"{now.microsecond // 1000:03d}",
        "azkaban.flow.start.timezone": now.strftime("%Z") or "UTC",
    }


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "azkaban"


# --------------------------------------------------------------------------------------------------
# Loading


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
            _load_flow20(project)
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
    for name, dep, cycle in _cycles(graph):
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
    _check_embedding_cycles(project)


def _collect_flow10(flow: Flow, node: Node, nodes: dict[str, Node]) -> None:
    """Adds ``node`` and everything it depends on, directly or not, to ``flow``."""
    pending = [node]
    while pending:
        current = pending.pop()
        if current.name in flow.nodes:
            continue
        flow.nodes[current.name] = current
        pending.extend(nodes[d] for d in current.dependencies if d in nodes)


def _cycles(graph: Mapping[str, list[str]]) -> list[tuple[str, str, str]]:
    """Each dependency that closes a cycle, as (node, dependency, "a -> b -> a"); a self-dependency is
    left to the caller."""
    found = []
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in graph.get(name, ()):
            if dep == name:
                continue
            if state.get(dep) == 1:
                found.append((name, dep, " -> ".join([*path[path.index(dep):], dep])))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])
    return found


def _check_embedding_cycles(project: Project) -> None:
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


# --------------------------------------------------------------------------------------------------
# Flow 2.0


class _Located:
    """A YAML value with the line it starts on."""

    __slots__ = ("value", "line")

    def __init__(self, value, line: int):
        self.value = value
        self.line = line


def _plain(node: yaml.Node):
    """A composed YAML node as Python data: a null is None, and every other scalar is its text, so
    ``2``, ``true`` and ``1.50`` read as written (quoting them, as the Hadoop DSL does, changes
    nothing). Mappings keep the line of each value."""
    if isinstance(node, yaml.ScalarNode):
        null = node.tag == "tag:yaml.org,2002:null"
        return _Located(None if null else node.value, node.start_mark.line + 1)
    if isinstance(node, yaml.SequenceNode):
        return _Located([_plain(item) for item in node.value], node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, _Located] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            result[key] = _plain(value_node)
        return _Located(result, node.start_mark.line + 1)
    raise TypeError(type(node))


def _load_flow20(project: Project) -> None:
    root = project.root
    for path in _flow_files(root):
        source = relative_name(root, path)
        name = path.name[: -len(FLOW_SUFFIX)]
        if name in project.flows:
            project.issues.append(SpecIssue("flow name", name, f"is used twice ({project.flows[name].source} and "
                                            f"{source}); flow file names must be unique in a project", source))
            continue
        reader = _FlowReader(project, source)
        reader.read_file(path, name)


def _flow_files(root: Path) -> list[Path]:
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        files.extend(Path(directory) / n for n in sorted(names) if n.endswith(FLOW_SUFFIX))
    return files


class _FlowReader:
    def __init__(self, project: Project, source: str):
        self.project = project
        self.source = source
        self.issues: list[SpecIssue] = []
        self.depends_lines: dict[tuple[str, str], int] = {}

    def problem(self, where: str, value: object, message: str, line: int | None = None) -> None:
        source = f"{self.source}:{line}" if line else self.source
        self.issues.append(SpecIssue(where, value, message, source))

    def read_file(self, path: Path, name: str) -> None:
        try:
            document = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            self.problem("document", None, f"invalid YAML: {exc.problem or exc.context}",
                         mark.line + 1 if mark else None)
            document = None
        except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
            self.problem("document", None, f"cannot be read as YAML: {exc}")
            document = None
        if document is not None:
            data = _plain(document)
            if not isinstance(data.value, dict):
                self.problem("document", None, "the top level of a .flow file must be a mapping "
                             "(config, nodes, trigger)", data.line)
            else:
                for key, value in data.value.items():
                    if key not in _NODE_FIELDS:
                        self.problem(key, None, f"unknown flow field; allowed: {', '.join(_FLOW_FIELDS)}", value.line)
                flows: list[Flow] = []
                self.read_flow(data.value, name, name, "", flows, data.line)
                if not self.issues:
                    for flow in flows:
                        self.project.flows[flow.id] = flow
        self.project.issues.extend(self.issues)

    def read_flow(self, fields: dict[str, _Located], flow_id: str, name: str, where: str,
                  flows: list[Flow], line: int) -> Props:
        config = self.config(fields.get("config"), where)
        config["type"] = FLOW_TYPE
        props = Props(config, source=self.source, lines=self.config_lines(fields.get("config")))
        flow = Flow(id=flow_id, source=self.source, props=props, embedded=":" in flow_id)
        flows.append(flow)
        node_list = fields.get("nodes")
        if node_list is None or not isinstance(node_list.value, list) or not node_list.value:
            self.problem(f"{where}nodes" if where else "nodes", None,
                         "a flow needs a non-empty list of nodes", node_list.line if node_list else line)
            return props
        for index, item in enumerate(node_list.value):
            node = self.read_node(item, f"{where}nodes[{index}]", flow_id, flows)
            if node is None:
                continue
            if node.name in flow.nodes:
                self.problem(f"{where}nodes[{index}].name", node.name, "is used twice in this flow; "
                             "node names must be unique within a flow", item.line)
                continue
            flow.nodes[node.name] = node
        self.check_dependencies(flow, where)
        return props

    def read_node(self, item: _Located, where: str, flow_id: str, flows: list[Flow]) -> Node | None:
        if not isinstance(item.value, dict):
            self.problem(where, None, "a node must be a mapping with name and type", item.line)
            return None
        fields = item.value
        for key, value in fields.items():
            if key not in _NODE_FIELDS:
                self.problem(f"{where}.{key}", None, f"unknown node field; allowed: {', '.join(_NODE_FIELDS)}",
                             value.line)
        name = self.text(fields.get("name"), f"{where}.name", required=True, line=item.line)
        node_type = self.text(fields.get("type"), f"{where}.type", required=True, line=item.line)
        if name is None:
            return None
        label = f"{where}({name})"
        depends = self.names(fields.get("dependsOn"), f"{label}.dependsOn")
        if "dependsOn" in fields:
            self.depends_lines.setdefault((flow_id, name), fields["dependsOn"].line)
        condition = self.text(fields.get("condition"), f"{label}.condition")
        if node_type == FLOW_TYPE:
            inner_id = f"{flow_id}:{name}"
            props = self.read_flow(fields, inner_id, name, f"{label}.", flows, item.line)
            return Node(name=name, type=FLOW_TYPE, source=self.source, props=props, dependencies=depends,
                        condition=condition, embedded_flow=inner_id)
        config = self.config(fields.get("config"), f"{label}.")
        if node_type is not None:
            config["type"] = node_type
        props = Props(config, source=self.source, lines=self.config_lines(fields.get("config")))
        props.lines.setdefault("type", fields["type"].line if "type" in fields else item.line)
        return Node(name=name, type=node_type, source=self.source, props=props, dependencies=depends,
                    condition=condition)

    def text(self, value: _Located | None, where: str, *, required: bool = False,
             line: int | None = None) -> str | None:
        if value is None or value.value is None or value.value == "":
            if required:
                self.problem(where, None, "is required", value.line if value else line)
            return None
        if not isinstance(value.value, str):
            self.problem(where, None, "must be a single value, not a list or mapping", value.line)
            return None
        return value.value

    def names(self, value: _Located | None, where: str) -> list[str]:
        if value is None or value.value is None:
            return []
        if not isinstance(value.value, list) or not all(isinstance(v.value, str) for v in value.value):
            self.problem(where, None, "must be a list of node names", value.line)
            return []
        return [v.value for v in value.value]

    def config(self, value: _Located | None, where: str) -> dict[str, str]:
        if value is None or value.value is None:
            return {}
        if not isinstance(value.value, dict):
            self.problem(f"{where}config", None, "must be a mapping of property names to values", value.line)
            return {}
        result = {}
        for key, item in value.value.items():
            if isinstance(item.value, (list, dict)):
                self.problem(f"{where}config.{key}", None, "must be a single value (quote it to pass text "
                             "that looks like a list or mapping)", item.line)
                continue
            # An empty value reads as "" in Azkaban, as a key without a value does in a .job file.
            result[key] = item.value if item.value is not None else ""
        return result

    @staticmethod
    def config_lines(value: _Located | None) -> dict[str, int]:
        if value is None or not isinstance(value.value, dict):
            return {}
        return {key: item.line for key, item in value.value.items()}

    def check_dependencies(self, flow: Flow, where: str) -> None:
        def line(name: str) -> int | None:
            return self.depends_lines.get((flow.id, name))

        for node in flow.nodes.values():
            for dep in node.dependencies:
                if dep == node.name:
                    self.problem(f"{where}node {node.name}.dependsOn", dep, "a node cannot depend on itself",
                                 line(node.name))
                elif dep not in flow.nodes:
                    self.problem(f"{where}node {node.name}.dependsOn", dep,
                                 "no node of that name in this flow (dependsOn names nodes of the same flow)",
                                 line(node.name))
        graph = {name: node.dependencies for name, node in flow.nodes.items()}
        for name, dep, cycle in _cycles(graph):
            self.problem(f"{where}node {name}.dependsOn", dep, f"cyclic dependency {cycle}", line(name))
