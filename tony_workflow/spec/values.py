"""Parsers of configuration values.

Each parser takes the raw string (or a Python value from YAML/JSON) and returns the typed value, or
raises ValueError saying what is allowed; the caller attaches the key and the value. Hadoop's
rules apply where TonY follows them (``getBoolean``'s true/false, comma-separated lists).
"""
from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from typing import Literal, TypeVar

from .keys import ENV_NAME, FRAMEWORKS, RESTART_POLICIES

__all__ = [
    "conf_value",
    "optional",
    "parse_bool",
    "parse_env",
    "parse_framework",
    "parse_int",
    "parse_int_or_none",
    "parse_list",
    "parse_local_gpus",
    "parse_memory",
    "parse_oversubscription",
    "parse_processes",
    "parse_restart_policy",
]

_T = TypeVar("_T")

_MEMORY = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*(?:([mg])b?)?$", re.IGNORECASE)
_MEMORY_ALLOWED = ("must be a positive size: megabytes as a bare number (4096), or a number with the unit "
                   "m or g (512m, 2g, 1.5g; case-insensitive, a trailing b is allowed: 2gb)")


def parse_memory(value: object) -> int:
    """Megabytes in a TonY memory size.

    A bare number is megabytes (``4096``, ``"4096"``); ``m`` and ``g`` give the unit, in either case and
    with an optional trailing ``b`` (``"512m"``, ``"2G"``, ``"2gb"``). Fractions are allowed and round up
    to whole megabytes (``"1.5g"`` is 1536). Zero, negative sizes, other units and other text raise
    ValueError.
    """
    if isinstance(value, bool):
        raise ValueError(_MEMORY_ALLOWED)  # noqa: TRY004 - callers report ValueError as a bad value
    if isinstance(value, (int, float)):
        amount, unit = float(value), "m"
    else:
        match = _MEMORY.match(str(value).strip())
        if not match:
            raise ValueError(_MEMORY_ALLOWED)
        amount, unit = float(match.group(1)), (match.group(2) or "m").lower()
    megabytes = amount * (1024 if unit == "g" else 1)
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ValueError(_MEMORY_ALLOWED)
    return math.ceil(megabytes)


def parse_int(value: object, minimum: int | None = None) -> int:
    allowed = "must be an integer" + (f" >= {minimum}" if minimum is not None else "")
    if isinstance(value, bool):
        raise ValueError(allowed)  # noqa: TRY004 - callers report ValueError as a bad value
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        number = int(value)
    else:
        raise ValueError(allowed)
    if minimum is not None and number < minimum:
        raise ValueError(allowed)
    return number


def parse_processes(value: object) -> int | Literal["gpus"]:
    """tony.<type>.processes: how many processes of the task's command one container runs, a
    number >= 1, or ``gpus`` (one per GPU the container asks for)."""
    if isinstance(value, str) and value.strip().lower() == "gpus":
        return "gpus"
    try:
        return parse_int(value, 1)
    except ValueError:
        raise ValueError("must be a number of processes >= 1, or 'gpus' (one per GPU of the container)") from None


def parse_bool(value: object) -> bool:
    # Hadoop's getBoolean: "true"/"false" in any case; anything else is not a boolean.
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("must be true or false")
    return text == "true"


def parse_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


_ACL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@$-]*$")


def parse_acl(value: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A YARN access control list, ``users groups``: comma-separated users, then (after a space)
    comma-separated groups, or ``*`` for everyone; as in YARN, a list that starts with a space
    names groups only. Empty: nobody beyond the job's owner and the cluster's administrators.
    (users, groups); ValueError names what is wrong."""
    text = (value or "").rstrip()
    if not text.strip():
        return (), ()
    if text.strip() == "*":
        return ("*",), ()
    parts = text.split()
    if len(parts) > 2:
        raise ValueError("at most two parts: users, then groups, each comma-separated, with one space between "
                         "(e.g. 'alice,bob ml-team'; ' ml-team' for groups only), or * for everyone")
    if text[0].isspace():
        users, groups = [], parse_list(parts[0])
    else:
        users, groups = parse_list(parts[0]), parse_list(parts[1]) if len(parts) > 1 else []
    for name in (*users, *groups):
        if name == "*":
            raise ValueError("* stands alone: it means everyone")
        if not _ACL_NAME.match(name):
            raise ValueError(f"{name!r} is not a user or group name (letters, digits and . _ @ $ -)")
    return tuple(users), tuple(groups)


def parse_user(value: str) -> str | None:
    """A user's name (None when empty); ValueError when it cannot be one."""
    text = (value or "").strip()
    if text and not _ACL_NAME.match(text):
        raise ValueError(f"{text!r} is not a user name (letters, digits and . _ @ $ -)")
    return text or None


def parse_env(value: str) -> dict[str, str]:
    """``"K=V,K2=V2"`` as TonY writes tony.containers.envs; ValueError names the first bad entry."""
    env = {}
    for entry in parse_list(value):
        name, sep, val = entry.partition("=")
        if not sep or not ENV_NAME.match(name.strip()):
            raise ValueError(f"entry {entry!r} is not KEY=value with KEY a valid environment variable name "
                             "(letters, digits and '_', not starting with a digit)")
        env[name.strip()] = val
    return env


def parse_framework(value: str) -> str:
    framework = value.strip().lower()
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework; allowed: {', '.join(FRAMEWORKS)}")
    return framework


def parse_restart_policy(value: str) -> str:
    policy = value.strip().lower()
    if policy not in RESTART_POLICIES:
        raise ValueError("must be 'session' (a failed task restarts the whole session) or 'task' "
                         "(only the failed task is relaunched)")
    return policy


def parse_store_failure(value: str) -> str:
    text = str(value).strip().lower()
    if text not in ("warn", "fail"):
        raise ValueError("must be 'warn' (training goes on, the failure is shown) or 'fail' (the job fails)")
    return text


def parse_regroup(value: str) -> str:
    text = str(value).strip().lower()
    if text not in ("restart", "in-place"):
        raise ValueError("must be 'restart' (torch's elastic agent restarts every trainer when the group changes) "
                         "or 'in-place' (the trainers keep their processes and re-form their group: the script "
                         "trains through tony_workflow.torch_elastic.run)")
    return text


def parse_environment(value: str) -> str:
    text = str(value).strip().lower()
    if text not in ("", "client", "nodes"):
        raise ValueError("must be 'client' (what the job's source imports goes with it, from the distributions "
                         "installed where it is submitted), 'nodes' (the nodes' Python has what the job needs) or "
                         "empty (client, but nodes where tony.yarn.python names the nodes' interpreter)")
    return text


def parse_oversubscription(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not number >= 1 or math.isinf(number):
        raise ValueError("must be a number >= 1 (how many task vcores share one real core)")
    return number


def parse_local_gpus(value: str) -> str:
    text = value.strip()
    if text and not re.fullmatch(r"\d+(\s*,\s*\d+)*", text):
        raise ValueError("must be empty (detect with nvidia-smi), a GPU count such as '4', "
                         "or a list of GPU indices such as '0,1,3'")
    return text


def optional(parse: Callable[[str], _T]) -> Callable[[str], _T | None]:
    """A parser that also accepts the empty string (meaning: detect or unset)."""
    def parse_optional(value: str) -> _T | None:
        return None if not str(value).strip() else parse(value)
    return parse_optional


def conf_value(value: object) -> str:
    """A YAML/JSON value as a conf string: booleans as true/false, lists comma-joined, null as ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float, datetime.date)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (list, tuple, dict)) for v in value):
        return ",".join(conf_value(v) for v in value)
    raise ValueError("must be a string, a number, a boolean or a list of them")


def parse_int_or_none(value: str | None) -> int | None:
    try:
        return parse_int(value)
    except ValueError:
        return None

