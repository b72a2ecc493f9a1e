"""``key=value`` pairs: TonY's ``--conf`` overrides, and the other flags of that shape.

:func:`parse_pairs` is the one reader of ``KEY=VALUE`` arguments (``--conf``, ``--set``,
``--shell-env``, ``tony-azkaban --env``): every bad pair is reported at once. :func:`apply_overrides`
lays ``--conf`` pairs over a configuration the way TonY's client does, appending to the keys TonY
treats as lists.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from .errors import SpecError, SpecIssue
from .keys import MULTI_VALUE_KEYS
from .values import conf_value

__all__ = ["apply_overrides", "apply_pairs", "parse_overrides", "parse_pairs"]


def parse_pairs(values: Iterable[str] | None, origin: str) -> dict[str, str]:
    """``["K=V", ...]`` as a dict. The key is stripped, the value kept as written (split at the first
    ``=``). Every entry without ``=`` or with an empty key is reported, with ``origin`` (the flag) as
    the key of the issue."""
    pairs, issues = {}, []
    for item in values or ():
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip():
            issues.append(SpecIssue(origin, item, "must be NAME=VALUE"))
        else:
            pairs[name.strip()] = value
    if issues:
        raise SpecError(issues)
    return pairs


def parse_overrides(pairs: Iterable[str] | Mapping[str, object], origin: str) -> list[tuple[str, str]]:
    """``--conf`` pairs (strings or a mapping) as ``(key, conf value)``, keys and string values stripped."""
    issues, parsed = [], []
    items: list[tuple[str, object]]
    if isinstance(pairs, Mapping):
        items = [(str(k).strip(), v) for k, v in pairs.items()]
    else:
        if isinstance(pairs, str):
            pairs = [pairs]
        items = []
        for pair in pairs:
            name, sep, text = str(pair).partition("=")
            if not sep or not name.strip():
                issues.append(SpecIssue(origin, pair, "must be key=value with a non-empty key"))
                continue
            items.append((name.strip(), text.strip()))
    for key, value in items:
        if not key:
            issues.append(SpecIssue(origin, value, "the key must not be empty"))
            continue
        try:
            parsed.append((key, conf_value(value)))
        except ValueError as exc:
            issues.append(SpecIssue(f"{origin} {key}", value, str(exc)))
    if issues:
        raise SpecError(issues)
    return parsed


def apply_pairs(conf: Mapping[str, str], parsed: list[tuple[str, str]]) -> dict[str, str]:
    """A copy of ``conf`` with parsed pairs applied (list keys appended to, others replaced)."""
    result = dict(conf)
    for key, value in parsed:
        if key in MULTI_VALUE_KEYS and result.get(key):
            result[key] = f"{result[key]},{value}"
        else:
            result[key] = value
    return result


def apply_overrides(conf: Mapping[str, str], pairs: Iterable[str] | Mapping[str, object],
                    origin: str = "--conf") -> dict[str, str]:
    """A copy of ``conf`` with overrides applied, as TonY's client applies ``--conf``.

    ``pairs`` are ``"key=value"`` strings (split at the first ``=``; key and value are stripped) or a
    mapping. A key in MULTI_VALUE_KEYS gets the value appended, comma-joined, to its existing value;
    any other key is replaced. A pair without ``=`` or with an empty key raises SpecError naming it,
    with ``origin`` (default ``--conf``) as the key of the issue.
    """
    return apply_pairs(conf, parse_overrides(pairs, origin))

