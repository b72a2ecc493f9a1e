"""Azkaban Flow 2.0 projects: ``.flow`` YAML files, read the way Azkaban's own loader reads them.

Every problem carries the file and the line of the node or key it is about, since a flow file
holds many nodes; nested ``nodes`` define embedded flows.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from tony_workflow.spec import SpecIssue
from tony_workflow.spec.document import yaml_loader

from .project import FLOW_SUFFIX, FLOW_TYPE, Flow, Node, Project, dependency_cycles
from .props import Props, relative_name

__all__ = ["load_flow20"]

# The fields a Flow 2.0 node may have (those of Azkaban's NodeBean); the flow file's top level
# is a node too, whose name and type come from the file.
_NODE_FIELDS = ("name", "type", "config", "dependsOn", "condition", "nodes", "trigger")
_FLOW_FIELDS = ("config", "nodes", "trigger")


class _Located:
    """A YAML value with the line it starts on."""

    __slots__ = ("line", "value")

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


def load_flow20(project: Project) -> None:
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
            document = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml_loader())
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
        for name, dep, cycle in dependency_cycles(graph):
            self.problem(f"{where}node {name}.dependsOn", dep, f"cyclic dependency {cycle}", line(name))

