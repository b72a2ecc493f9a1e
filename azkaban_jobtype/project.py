"""The model of an Azkaban project: its flows, their nodes, and each job as it runs in a flow.

Both project formats load into these types (:mod:`.flow` for Flow 1.0 and the entry point,
:mod:`.flow20` for Flow 2.0 YAML), so the translator and the command line never ask which format
a project was written in.
"""
from __future__ import annotations

import datetime
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from tony_workflow.process import login_name
from tony_workflow.spec import SpecError, SpecIssue

from .props import Props

__all__ = [
    "FLOW_SUFFIX",
    "FLOW_TYPE",
    "FLOW_VERSION_KEY",
    "JOB_SUFFIX",
    "PROJECT_SUFFIX",
    "Flow",
    "JobInstance",
    "Node",
    "Project",
    "ProjectError",
    "dependency_cycles",
    "runtime_props",
]

#: The node type of an embedded flow (Flow 1.0: a job with ``type=flow`` and ``flow.name``).
FLOW_TYPE = "flow"
JOB_SUFFIX = ".job"
FLOW_SUFFIX = ".flow"
PROJECT_SUFFIX = ".project"
FLOW_VERSION_KEY = "azkaban-flow-version"


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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def runtime_props(project_name: str, flow_id: str) -> dict[str, str]:
    """Stand-ins for the properties Azkaban's executor sets on a flow execution (flow id,
    execution id 0, project name, submit user = the current user, start time = now)."""
    now = datetime.datetime.now().astimezone()
    user = login_name()
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


def dependency_cycles(graph: Mapping[str, list[str]]) -> list[tuple[str, str, str]]:
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
