"""TonY's task groups and the timeouts of the types that depend on them.

``tony.application.group.<G> = worker,chief`` names a group of task types, and
``tony.application.dependency.<T>.timeout.after.<G> = 3600`` says that tasks of type ``T`` may run
at most that many seconds after every task of group ``G`` ended: an evaluator, say, that would
otherwise keep a job alive long after its training ended. Past it the job fails, or with
``tony.application.dependency.<T>.timeout.after.<G>.ignored = true`` type ``T`` stops counting
for the job's end (as an untracked type) and the job ends as its other tasks say. TonY's answer to
tasks that hang once the chief is gone; the ApplicationMaster checks it once every task of the
session has started (:mod:`tony_workflow.am.group_timeouts`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .values import parse_bool, parse_int

__all__ = ["DEPENDENCY_KEY", "GROUP_KEY", "GroupDependency", "dependencies", "groups", "problems"]

_NAME = r"[A-Za-z0-9_-]+"
GROUP_KEY = re.compile(rf"^tony\.application\.group\.({_NAME})$")
DEPENDENCY_KEY = re.compile(rf"^tony\.application\.dependency\.({_NAME})\.timeout\.after\.({_NAME})(\.ignored)?$")


@dataclass(frozen=True)
class GroupDependency:
    """Tasks of ``waiting`` may run ``timeout_s`` after every task of group ``group`` ended; past
    that the job fails, or, when ``ignored``, ``waiting`` no longer counts for the job's end."""

    waiting: str
    group: str
    timeout_s: int
    ignored: bool = False

    @property
    def key(self) -> str:
        return f"tony.application.dependency.{self.waiting}.timeout.after.{self.group}"


def groups(conf: Mapping[str, str]) -> dict[str, list[str]]:
    """Each group's task types, by group name."""
    out = {}
    for key, value in conf.items():
        match = GROUP_KEY.match(key)
        if match:
            out[match.group(1)] = [t.strip() for t in (value or "").split(",") if t.strip()]
    return out


def dependencies(conf: Mapping[str, str]) -> list[GroupDependency]:
    """Every dependency timeout ``conf`` sets (unreadable values are :func:`problems`'; skipped here)."""
    out = []
    for key, value in conf.items():
        match = DEPENDENCY_KEY.match(key)
        if not match or match.group(3):
            continue
        try:
            timeout = parse_int(value, 0)
            ignored = parse_bool(conf.get(key + ".ignored") or "false")
        except ValueError:
            continue
        out.append(GroupDependency(match.group(1), match.group(2), timeout, ignored))
    return out


def problems(conf: Mapping[str, str], declared: list[str]) -> list[tuple[str, str, str]]:
    """(key, value, what is wrong) for group and dependency keys that cannot work as written."""
    issues = []
    defined = groups(conf)
    for key, value in conf.items():
        match = DEPENDENCY_KEY.match(key)
        if not match:
            continue
        waiting, group, ignored = match.groups()
        try:
            parse_bool(value) if ignored else parse_int(value, 0)
        except ValueError as exc:
            issues.append((key, value, str(exc)))
            continue
        if group not in defined:
            issues.append((key, value, f"names group '{group}', which no tony.application.group.{group} defines"))
        elif waiting not in declared:
            issues.append((key, value, (f"names task type '{waiting}', which the job does not declare "
                                       f"(its types: {', '.join(declared)})")))
        if ignored and f"tony.application.dependency.{waiting}.timeout.after.{group}" not in conf:
            issues.append((key, value, ("marks a timeout that is not set: set "
                                       f"tony.application.dependency.{waiting}.timeout.after.{group} too")))
    return issues
