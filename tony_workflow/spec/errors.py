"""What a spec's problems look like: one :class:`SpecIssue` per problem, all of them in one
:class:`SpecError`.

Every part of the spec package (and the template renderer, and the Azkaban translator) reports
through these two types, so that a user sees every problem at once, each naming the key as they
spelled it, the bad value and what is allowed. :class:`SpecError` itself is the project's error tree's (:mod:`tony_workflow.errors`).
"""
from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import SpecError

__all__ = ["SpecError", "SpecIssue", "error", "mask_secrets", "unknown_message"]


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec.

    ``key`` is the key as the user wrote it (``tasks.worker.memory (tony.worker.memory)``), a line
    (``line 3``) for syntax errors, or a field name. ``value`` is the offending value, or None when
    there is none to show. ``message`` says what is allowed. ``source`` is the file, when known.
    """

    key: str
    value: object
    message: str
    source: str | None = None

    def __str__(self) -> str:
        text = f"{self.key}: {self.message}"
        if self.value is not None:
            text += f" (got {_shown(self.value, self.key)})" + _closest_allowed(self.value, self.message)
        return f"{self.source}: {text}" if self.source else text


_QUOTED = re.compile(r"'([A-Za-z0-9_.*-]+)'")


def _closest_allowed(value: object, message: str) -> str:
    """"; did you mean 'x'?" when ``value`` is a near miss of a value ``message`` allows (those it
    quotes, or lists after "allowed:"), else nothing."""
    if not isinstance(value, str) or not value.strip() or len(value) > 40 or "did you mean" in message:
        return ""
    allowed = set(_QUOTED.findall(message))
    if "allowed:" in message:
        allowed.update(w.strip(" .'") for w in message.split("allowed:", 1)[1].split(";")[0].split(","))
    allowed.discard("")
    close = difflib.get_close_matches(value.strip().lower(), sorted(allowed), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close and close[0] != value else ""


#: How much of a bad value a message repeats: enough to recognise it, never a whole file.
SHOWN_CHARS = 120


# Names whose values are not repeated in messages: a bad password is still a password.
_SECRET_NAME = re.compile(r"pass(word|wd|phrase)?|secret|token|credential|private[-_.]?key|api[-_.]?key|auth",
                          re.IGNORECASE)
HIDDEN = "<hidden>"


def _masked(text: str) -> str:
    """``text`` with the value of each secret-looking ``NAME=value`` entry (comma-separated) hidden."""
    entries = text.split(",")
    for i, entry in enumerate(entries):
        name, sep, _ = entry.partition("=")
        if sep and _SECRET_NAME.search(name):
            entries[i] = f"{name}={HIDDEN}"
    return ",".join(entries)


def mask_secrets(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` as it may be shown or kept (a job's history): secret-looking keys' values hidden,
    and secret-looking ``NAME=value`` entries of lists (environment settings) too."""
    return {k: HIDDEN if _SECRET_NAME.search(k) else _masked(v) if isinstance(v, str) else v
            for k, v in conf.items()}


def _shown(value: object, key: str = "") -> str:
    if _SECRET_NAME.search(key):
        return f"a value, {HIDDEN}: the key looks secret"
    if isinstance(value, str):
        # KEY=value lists (env settings) may carry a secret among plain values.
        text = repr(_masked(value)[:SHOWN_CHARS])
        return text if len(value) <= SHOWN_CHARS else f"{text[:-1]}...{text[-1]} ({len(value)} characters)"
    # reprlib stops at a few levels and items: a value built from YAML aliases may stand for billions.
    shorter = reprlib.Repr()
    shorter.maxlevel, shorter.maxlist, shorter.maxdict, shorter.maxother = 3, 8, 8, SHOWN_CHARS
    return shorter.repr(value)


def error(key: str, value: object, message: str, source: str | None = None) -> SpecError:
    """A SpecError with a single issue."""
    return SpecError([SpecIssue(key, value, message, source)])


def unknown_message(key: str, allowed: Iterable[str], what: str, also: str = "") -> str:
    """"unknown <what> (did you mean '<closest>'?); allowed: ..." for a key that is not one of ``allowed``."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {what}{hint}; allowed: {', '.join(allowed)}{also}"

