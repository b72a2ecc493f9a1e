"""The import graph of the project's packages has no cycle, and no module outgrows one concern.

The graph is read from the source with ``ast``, so it sees every import, including those inside
functions (a lazy import that runs back up is still an arrow back up) and those under
``if TYPE_CHECKING:``: they never run, but a module that names another's types depends on it as
much, and two modules that name each other's are one concern cut in two. Importing ``a.b.c`` runs ``a/__init__`` and
``a/b/__init__`` too, so an import also points at each package above its target, except the
packages above the importing module itself (those are already being imported when it runs).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tony_workflow", "airflow_provider", "azkaban_jobtype")
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = True):
    """Every Import/ImportFrom node (without ``type_only``, none of an ``if TYPE_CHECKING:`` block)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, is_package: bool, node: ast.AST, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix for alias in node.names]
    own_ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    targets = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            candidate = ".".join(parts[:i])
            if candidate in known and candidate not in own_ancestors and candidate != module:
                targets.add(candidate)
    return targets


def import_graph(type_only: bool = True) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in _imports(tree, type_only):
            edges |= _targets(name, path.name == "__init__.py", node, known)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports_and_package_parents():
    graph = import_graph()
    # A function-level import (the client's backends are chosen at run time) is an arrow too.
    assert "tony_workflow.backends.local" in graph["tony_workflow.backends"]
    # Importing tony_workflow.spec.model from outside runs the spec package's __init__ as well.
    assert "tony_workflow.spec" in graph["tony_workflow.client"]
    # Within a package, a module does not depend on its own package's __init__.
    assert "tony_workflow.spec" not in graph["tony_workflow.spec.model"]
    # A type named under TYPE_CHECKING is an arrow too (the elastic group names the spec's).
    assert "tony_workflow.spec" in graph["tony_workflow.am.elastic_group"]
    assert "tony_workflow.spec" not in import_graph(type_only=False)["tony_workflow.am.elastic_group"]


def test_a_planted_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# The programs from the bottom up: a module imports its own layer's modules and those below it,
# never one above. What every program shares (the spec, the status, the errors, the wire, the
# stores) is the base; the task side is below the backends, which start tasks (the embedded
# cluster forks executors); the ApplicationMaster drives a backend's cluster manager; the job pages
# (the history server) read jobs through a client they are given; the client submits through a
# backend and serves the pages; the workflow front ends sit on top of the client.
LAYERS = (
    ("the base", ()),
    ("the task side", ("tony_workflow.task", "tony_workflow.keras", "tony_workflow.torch_elastic")),
    ("the backends", ("tony_workflow.backends",)),
    ("the ApplicationMaster", ("tony_workflow.am",)),
    ("the job pages", ("tony_workflow.web",)),
    ("the client", ("tony_workflow.client",)),
    ("the front ends", ("airflow_provider", "azkaban_jobtype")),
)


def layer_of(module: str) -> int:
    for i, (_, prefixes) in reversed(list(enumerate(LAYERS))):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    # The package's own __init__ is its public face (tony_workflow.report): it sits with the task side.
    return 1 if module == "tony_workflow" else 0


def arrows_back_up(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
                  for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m))


def test_no_arrow_runs_back_up_the_layers():
    back = arrows_back_up(import_graph())
    assert not back, "imports that run back up:\n" + "\n".join(back)


def test_a_planted_arrow_back_up_is_found():
    graph = {"tony_workflow.status": {"tony_workflow.am.master"}, "tony_workflow.am.master": {"tony_workflow.status"},
             "tony_workflow.backends.local": {"tony_workflow.task.executor"}}
    assert arrows_back_up(graph) == ["tony_workflow.status (the base) -> tony_workflow.am.master (the ApplicationMaster)"]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name):
    lines = _modules()[name].read_text().count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it by concern (at most {MAX_LINES})"
