"""Which of TonY's group dependency timeouts (:mod:`tony_workflow.spec.groups`) have run out in a
session: plain data in, the overdue dependencies out, so that the rule is checked by a table of
cases and the ApplicationMaster only acts on the answer (fails the job, or stops counting a type)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..spec.groups import GroupDependency
from .state import Task

__all__ = ["overdue"]


def overdue(dependencies: Iterable[GroupDependency], groups: Mapping[str, list[str]], tasks: Iterable[Task],
            now: float) -> list[tuple[GroupDependency, list[str]]]:
    """Each dependency whose waiting type still runs more than ``timeout_s`` after the last task of
    its group ended, with the group's types this session has. Nothing until every task of the
    session has started (a group that has not begun has not ended), and nothing for a group none
    of whose types the session has."""
    dependencies = list(dependencies)
    if not dependencies:  # the monitor asks on every pass; most jobs set none
        return []
    tasks = list(tasks)
    if any(not t.final and t.registered_at is None for t in tasks):
        return []
    found = []
    for dep in dependencies:
        if not any(t.status.type == dep.waiting and not t.final for t in tasks):
            continue
        members = [t for t in tasks if t.status.type in groups.get(dep.group, [])]
        if not members or not all(t.final for t in members):
            continue
        last = max(t.ended_at or now for t in members)
        if now - last > dep.timeout_s:
            found.append((dep, sorted({t.status.type for t in members})))
    return found
