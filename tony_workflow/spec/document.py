"""Reading a spec document: YAML or JSON with this project's friendlier schema, or TonY's XML.

:class:`DocumentReader` turns a parsed YAML/JSON mapping (the schema in the package docstring)
into flat ``tony.*`` keys, remembering how the user spelled each one so that messages can use it,
and collects every structural problem at once. The parsers report syntax errors with the line
(and column) where the text went wrong. YAML is imported on first use: executors read their spec
as JSON and never pay for it.
"""
from __future__ import annotations

import builtins
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, cast

from .data import DATA_FIELDS, DATA_NAME
from .errors import SpecError, SpecIssue, error, unknown_message
from .model import JobSpec
from .table import TASK_KEYS, TONY_DEFAULTS
from .validation import problems as validation_problems
from .values import conf_value, parse_env

if TYPE_CHECKING:
    import yaml
    from _typeshed import SupportsRead

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "DocumentReader",
    "parse_json",
    "parse_yaml",
    "spec_from_mapping",
    "xml_conf",
    "yaml_loader",
]

_TOP_LEVEL_CONF = {
    "name": "tony.application.name",
    "framework": "tony.application.framework",
    "queue": "tony.yarn.queue",
    "node_label": "tony.application.node-label",
    "tags": "tony.application.tags",
    "command": "tony.containers.command",
    "env": "tony.containers.envs",
    "execution_env": "tony.execution.envs",
    "resources": "tony.containers.resources",
    "retries": "tony.am.retry-count",
    "timeout": "tony.application.timeout",
}
_TOP_LEVEL_ARGS = ("executes", "task_params", "python_binary_path", "python_venv", "src_dir")
_TOP_LEVEL = (*_TOP_LEVEL_CONF, *_TOP_LEVEL_ARGS, "shell_env", "am", "tasks", "data", "conf")
_AM_FIELDS = ("memory", "vcores", "gpus")
#: A task's fields in YAML: the per-type table's YAML names, and its docker image (tony.docker.<type>.image).
_TASK_FIELDS: dict[str, str | None] = {**{k.yaml: k.name for k in TASK_KEYS if k.yaml}, "docker_image": None}
_ENV_KEYS = ("tony.containers.envs", "tony.execution.envs")


class DocumentReader:
    """Turns one YAML/JSON document into conf keys, remembering the user's spelling of each."""

    def __init__(self, source: str | None):
        self.source = source
        self.conf: dict[str, str] = {}
        self.origin: dict[str, str] = {}
        # JobSpec's own fields by name, passed to it as keywords: str or None, shell_env a dict[str, str].
        self.args: dict[str, Any] = {}
        self.issues: list[SpecIssue] = []

    def problem(self, where: str, value: object, message: str) -> None:
        self.issues.append(SpecIssue(where, value, message, self.source))

    def set(self, key: str, value: object, where: str) -> None:
        if key in self.conf:
            first = self.origin.get(key, key)
            self.problem(where, value, f"sets {key} again (already set by {first}); keep one")
            return
        try:
            self.conf[key] = env_value(value) if key in _ENV_KEYS else conf_value(value)
        except ValueError as exc:
            self.problem(where, value, str(exc))
            return
        if where != key:
            self.origin[key] = where

    def mapping(self, value: object, where: str) -> Mapping[Any, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problem(where, value, "must be a mapping")
            return None
        return value

    def read(self, data: Mapping[Any, Any]) -> None:
        for key, value in data.items():
            if not isinstance(key, str):
                self.problem(str(key), None, "field names must be strings")
            elif key.startswith("x-"):
                continue  # a place for YAML anchors, as in compose files
            elif key.startswith("tony."):
                self.set(key, value, key)
            elif key in _TOP_LEVEL_CONF:
                self.set(_TOP_LEVEL_CONF[key], value, key)
            elif key in _TOP_LEVEL_ARGS:
                if value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool)):
                    self.args[key] = None if value is None else str(value)
                else:
                    self.problem(key, value, "must be a string")
            elif key == "shell_env":
                try:
                    self.args[key] = shell_env_value(value)
                except ValueError as exc:
                    self.problem(key, value, str(exc))
            elif key == "conf":
                self.read_conf(value)
            elif key == "am":
                self.read_am(value)
            elif key == "data":
                self.read_data(value)
            elif key == "tasks":
                self.read_tasks(value, explicit=self.flat_keys(data))
            else:
                self.problem(key, None, unknown_message(key, _TOP_LEVEL, "field", ", flat tony.* keys and x-* keys"))

    @staticmethod
    def flat_keys(data: Mapping[Any, Any]) -> builtins.set[str]:
        keys = {k for k in data if isinstance(k, str) and k.startswith("tony.")}
        if isinstance(data.get("conf"), Mapping):
            keys |= {str(k) for k in data["conf"]}
        return keys

    def read_conf(self, value: object) -> None:
        conf = self.mapping(value, "conf")
        for key, item in (conf or {}).items():
            if not isinstance(key, str) or not key.strip():
                self.problem(f"conf.{key}", None, "keys must be non-empty strings")
            else:
                self.set(key.strip(), item, key.strip())

    def read_am(self, value: object) -> None:
        am = self.mapping(value, "am")
        for name, item in (am or {}).items():
            if name in _AM_FIELDS:
                self.set(f"tony.am.{name}", item, f"am.{name}")
            else:
                self.problem(f"am.{name}", None, unknown_message(str(name), _AM_FIELDS, "am field"))

    def read_data(self, value: object) -> None:
        """``data: {train: {path: ..., format: ..., columns: [...], filter: ..., remainder: ...}}``: the
        job's inputs, as ``tony.data.<input>.<field>`` keys (lists joined with commas)."""
        inputs = self.mapping(value, "data")
        for name, fields in (inputs or {}).items():
            where = f"data.{name}"
            if not isinstance(name, str) or not DATA_NAME.match(name):
                self.problem(where, name, "an input's name is letters, digits, - and _, starting with a letter")
                continue
            if isinstance(fields, (str, list)):  # data: {train: hdfs:///path}
                fields = {"path": fields}
            fields = self.mapping(fields, where)
            for field, item in (fields or {}).items():
                if field not in DATA_FIELDS:
                    self.problem(f"{where}.{field}", None, unknown_message(str(field), tuple(DATA_FIELDS),
                                                                          "field of an input"))
                    continue
                if isinstance(item, (list, tuple)):
                    if not all(isinstance(v, str) for v in item):
                        self.problem(f"{where}.{field}", item, "a list of strings")
                        continue
                    item = ",".join(item)
                self.set(f"tony.data.{name}.{field}", item, f"{where}.{field}")

    def read_tasks(self, value: object, explicit: builtins.set[str]) -> None:
        tasks = self.mapping(value, "tasks")
        images = []
        for task_type, fields in (tasks or {}).items():
            where = f"tasks.{task_type}"
            if not isinstance(task_type, str) or not task_type:
                self.problem(where, task_type, "task type names must be non-empty strings")
                continue
            fields = self.mapping(fields, where)
            if fields is None:
                continue
            instances_key = f"tony.{task_type}.instances"
            if "instances" not in fields and instances_key not in explicit:
                self.set(instances_key, 1, where)
            for name, item in fields.items():
                if name not in _TASK_FIELDS:
                    self.problem(f"{where}.{name}", None, unknown_message(str(name), _TASK_FIELDS, "task field"))
                elif name == "docker_image":
                    self.set(f"tony.docker.{task_type}.image", item, f"{where}.{name}")
                    images.append(f"{where}.{name}")
                else:
                    self.set(f"tony.{task_type}.{_TASK_FIELDS[name]}", item, f"{where}.{name}")
        # An image only takes effect with docker enabled; asking for one in a task is asking for docker.
        if images and "tony.docker.enabled" not in self.conf:
            self.conf["tony.docker.enabled"] = "true"
            self.origin["tony.docker.enabled"] = images[0]


def env_value(value: object) -> str:
    """env / execution_env / shell_env as TonY's comma-separated ``K=V`` list."""
    if isinstance(value, Mapping):
        entries = []
        for name, item in value.items():
            text = conf_value(item)
            if "," in text:
                raise ValueError(f"the value of {name} contains ',', which separates entries in TonY's "
                                 "env lists; it cannot be passed this way")
            entries.append(f"{name}={text}")
        return ",".join(entries)
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")
        return ",".join(value)
    if isinstance(value, str) or value is None:
        return value or ""
    raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")


def shell_env_value(value: object) -> dict[str, str]:
    """shell_env as a dict. It never goes through a comma-separated conf value, so commas are fine."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(name): conf_value(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return {name: val for name, val in (parse_env(entry).popitem() for entry in value if entry.strip())}
    if isinstance(value, str):
        return parse_env(value)
    raise ValueError("must be a mapping, a list of KEY=value strings, or a comma-separated string")


def spec_from_mapping(data: object, *, source: str | None = None) -> JobSpec:
    """The JobSpec a parsed YAML/JSON document describes (schema in this module's docstring).

    The document's keys are laid over TONY_DEFAULTS. Structural problems (unknown fields, a field
    set twice, a mapping where a value belongs) raise SpecError listing all of them; the values
    themselves are checked by :meth:`JobSpec.validate`.
    """
    if not isinstance(data, Mapping):
        raise error("document", type(data).__name__, "the top level must be a mapping of fields", source)
    reader = DocumentReader(source)
    reader.read(data)
    if not reader.issues:
        return JobSpec(conf={**TONY_DEFAULTS, **reader.conf}, source=source, key_origin=reader.origin,
                       **reader.args)
    # The rest of the document is still checked, so that every problem is said at once.
    try:
        partial = JobSpec(conf={**TONY_DEFAULTS, **reader.conf}, source=source, key_origin=reader.origin,
                          **reader.args)
    except SpecError as exc:
        raise SpecError([*reader.issues, *exc.issues]) from None
    raise SpecError([*reader.issues, *validation_problems(partial)], spec=partial)


#: Aliases one YAML document may use: enough for anchors shared between task types, far too few
#: for an "alias bomb" (nested lists of aliases that multiply into billions of entries once read).
#: The same bound SnakeYAML, the YAML reader of Azkaban and Hadoop tools, puts on collections.
MAX_ALIASES = 50
#: How many values a document may hold once its aliases are expanded: fifty aliases nested two by
#: two would still make 2^25 of them.
MAX_VALUES = 100_000
#: How deep a document may nest. A spec is a few levels deep (a Flow 2.0 file a few more per
#: embedded flow); thousands of levels are an attack on the reader (Python's recursion), never a job.
MAX_DEPTH = 64

_LOADER: type[yaml.SafeLoader] | None = None


def yaml_loader() -> type[yaml.SafeLoader]:
    """A SafeLoader that refuses a key repeated in one mapping instead of keeping the last silently,
    more than :data:`MAX_ALIASES` aliases, and nesting deeper than :data:`MAX_DEPTH`, each as a YAML
    error at the line where it happens. Built on first use: executors read specs as JSON and never
    pay for importing YAML."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class BoundedLoader(yaml.SafeLoader):
            def __init__(self, stream: str | bytes | SupportsRead[str] | SupportsRead[bytes]) -> None:
                super().__init__(stream)
                self._aliases = 0
                self._depth = 0
                self._weights: dict[int, tuple[object, int]] = {}

            def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node:
                # types-PyYAML leaves Parser.peek_event unannotated: it returns the next event, whose
                # marks are yaml.error.Mark here (the C parser's marks are another class; this is not it).
                peek_event = cast("Callable[[], yaml.Event]", self.peek_event)
                mark = cast("yaml.error.Mark | None", peek_event().start_mark)
                if self.check_event(yaml.AliasEvent):
                    self._aliases += 1
                    if self._aliases > MAX_ALIASES:
                        raise yaml.composer.ComposerError(
                            None, None, f"more than {MAX_ALIASES} aliases in one document: refused, as an alias "
                            "bomb would be; write the values out", mark)
                if self._depth >= MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
                self._depth += 1
                try:
                    # types-PyYAML allows None; PyYAML's Composer.compose_node always returns a node.
                    node = cast("yaml.Node", super().compose_node(parent, index))
                finally:
                    self._depth -= 1
                self._weigh(node)
                return node

            def _weigh(self, node: yaml.Node) -> None:
                """Counts the values ``node`` stands for with every alias in it expanded (its children,
                aliased ones included, were weighed before it)."""
                if id(node) in self._weights:
                    return
                if isinstance(node, yaml.SequenceNode):
                    children = node.value
                elif isinstance(node, yaml.MappingNode):
                    children = [n for pair in node.value for n in pair]
                else:
                    children = []
                weight = 1 + sum(self._weights.get(id(c), (None, 1))[1] for c in children)
                self._weights[id(node)] = (node, weight)  # the node is kept, so its id stays its own
                if weight > MAX_VALUES:
                    raise yaml.composer.ComposerError(
                        None, None, f"the document stands for more than {MAX_VALUES} values once its aliases "
                        "are expanded: refused, as an alias bomb would be", node.start_mark)

            def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
                seen = set()
                for key_node, _ in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                                key_node.start_mark)
                    seen.add(key)
                return super().construct_mapping(node, deep)

        _LOADER = BoundedLoader
    return _LOADER


def parse_yaml(text: str, source: str | None) -> object:
    import yaml

    try:
        return yaml.load(text, Loader=yaml_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark else "document"
        column = f" (column {mark.column + 1})" if mark else ""
        raise error(where, None, f"invalid YAML{column}: {exc.problem or exc.context}", source) from None
    except yaml.YAMLError as exc:
        raise error("document", None, f"invalid YAML: {exc}", source) from None


def _depth(value: object) -> int:
    """How deep ``value`` nests, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def parse_json(text: str, source: str | None) -> object:
    """The JSON document in ``text``. A key given twice in one object is an error (as in YAML),
    and so is nesting deeper than :data:`MAX_DEPTH`."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen[key] = value
        return seen

    try:
        data = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise error(f"line {exc.lineno}", None, f"invalid JSON (column {exc.colno}): {exc.msg}", source) from None
    except RecursionError:
        raise error("document", None, f"invalid JSON: nested more than {MAX_DEPTH} levels deep", source) from None
    except ValueError as exc:
        raise error("document", None, f"invalid JSON: {exc}", source) from None
    if _depth(data) > MAX_DEPTH:
        raise error("document", None, f"invalid JSON: nested more than {MAX_DEPTH} levels deep", source)
    return data


def xml_conf(text: str, source: str | None, *, strict: bool = False) -> dict[str, str]:
    """The properties of a Hadoop ``<configuration>`` text, in order.

    Read as Hadoop reads site files: a property without a name is skipped, one without a value
    reads as "", the last of a key given twice wins. ``strict`` (a job's own file) refuses a
    nameless property and a key given twice, each at its line: in a job, each is a mistake that
    would otherwise pass unseen. A property without a value stays "" (TonY's own tony-default.xml
    writes empty settings that way).
    """
    text = text.lstrip("\ufeff")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line: int | None = exc.position[0] if exc.position else None
        raise error(f"line {line}" if line else "document", None, f"malformed XML: {exc}", source) from None
    if root.tag != "configuration":
        raise error("document", root.tag, "the root element must be <configuration>", source)
    conf: dict[str, str] = {}
    issues: list[SpecIssue] = []
    first_line: dict[str, int | None] = {}
    lines = _property_lines(text) if strict else []
    for number, prop in enumerate(root.iter("property")):
        line = lines[number] if number < len(lines) else None
        where = f"line {line}" if line else f"property {number + 1}"
        name = (prop.findtext("name") or prop.get("name") or "").strip()
        value = prop.findtext("value")
        if value is None:
            value = prop.get("value")
        if not name:
            if strict:
                issues.append(SpecIssue(where, None, "a <property> without a <name>: give it one or remove it",
                                        source))
            continue
        if strict and name in conf:
            issues.append(SpecIssue(name, None, f"is set twice (lines {first_line.get(name)} and {line}); keep one",
                                    source))
        first_line.setdefault(name, line)
        conf[name] = (value or "").strip()
    if issues:
        raise SpecError(issues)
    return conf


def _property_lines(text: str) -> list[int]:
    """The line of each ``<property>`` start tag, in document order (ElementTree keeps no lines)."""
    from xml.parsers import expat

    lines: list[int] = []
    parser = expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        if tag == "property":
            lines.append(parser.CurrentLineNumber)

    parser.StartElementHandler = start
    try:
        parser.Parse(text, True)
    except expat.ExpatError:
        pass  # ElementTree read it; the lines are only for messages
    return lines

