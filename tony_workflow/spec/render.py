"""Jinja2 rendering of job spec templates.

A spec file may be a template: ``{{ epochs }}`` is filled from the variables the caller passes, and
``{{ env.HOME }}`` from the environment of the process that renders it. Rendering is strict and
sandboxed: an undefined variable is an error rather than an empty string (a silently empty memory
size or command is worse than a refusal), and templates cannot reach Python internals through
attributes such as ``__class__``.
"""
from __future__ import annotations

import os
import re
import traceback
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .errors import SpecError, SpecIssue

if TYPE_CHECKING:
    from jinja2.runtime import Context, Undefined
    from jinja2.sandbox import SandboxedEnvironment

__all__ = ["render_template"]

# The name Jinja gives to frames of a template compiled from a string; they carry template lines.
_TEMPLATE_FRAME = "<template>"
_UNDEFINED_NAME = re.compile(r"'([^']+)' is undefined|has no attribute '([^']+)'")


class _EnvVars(Mapping[str, str]):
    """A read-only snapshot of ``os.environ``: templates may read it, never change the process env."""

    def __init__(self, values: Mapping[str, str]):
        self._values = dict(values)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


_ENVIRONMENT: SandboxedEnvironment | None = None

#: The longest text a template may render to, as long as a spec file may be.
MAX_OUTPUT_CHARS = 1024 * 1024


def _environment() -> SandboxedEnvironment:
    """The sandboxed Jinja2 environment, built on first use: Jinja2 costs an executor ~50 ms to import,
    and executors load specs that were rendered long before."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        from jinja2 import StrictUndefined
        from jinja2.exceptions import SecurityError
        from jinja2.sandbox import SandboxedEnvironment

        class Environment(SandboxedEnvironment):
            # The sandbox bounds range(); a product or a power can still make gigabytes from one line.
            intercepted_binops = frozenset({"*", "**"})

            def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
                if operator == "*":
                    for seq, times in ((left, right), (right, left)):
                        if (isinstance(seq, (str, list, tuple)) and isinstance(times, int)
                                and len(seq) * times > MAX_OUTPUT_CHARS):
                            raise SecurityError(f"a repetition of {len(seq) * times} items is more than a spec "
                                                f"may hold ({MAX_OUTPUT_CHARS})")
                if (operator == "**" and isinstance(left, int) and isinstance(right, int)
                        and abs(left) > 1 and right * max(1, abs(left).bit_length()) > 4096):
                    raise SecurityError(f"{left} ** {right} is a number of more than 4096 bits")
                return super().call_binop(context, operator, left, right)

            def getattr(self, obj: Any, attribute: str) -> Any | Undefined:
                # ``env.NAME`` for an unset variable would otherwise read "'..._EnvVars object' has no
                # attribute 'NAME'"; say what is actually missing.
                if (isinstance(obj, _EnvVars) and isinstance(attribute, str) and attribute not in obj
                        and not hasattr(obj, attribute)):
                    return self.undefined(f"'env.{attribute}' is undefined: no such environment variable",
                                          obj=obj, name=attribute)
                return super().getattr(obj, attribute)

        _ENVIRONMENT = Environment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return _ENVIRONMENT


def render_template(text: str, variables: Mapping[str, object] | None = None, *,
                    source: str | None = None) -> str:
    """Render ``text`` as a Jinja2 template and return the result.

    Parameters
    ----------
    text : str
        The template. A text with neither ``{{`` nor ``{%`` is returned unchanged, so plain specs
        never go through Jinja (whose comment syntax ``{#`` could otherwise eat part of them).
    variables : mapping, optional
        Values the template may use. Besides these the template sees ``env``, a read-only copy of
        ``os.environ`` (``{{ env.HOME }}``, ``{{ env.get('X', 'default') }}``); a variable named
        ``env`` in ``variables`` takes its place.
    source : str, optional
        Where the text came from (a file path), used in error messages.

    Raises
    ------
    SpecError
        With one issue naming the undefined variable, or the line of a syntax error, and the source.
    """
    if "{{" not in text and "{%" not in text:
        return text
    from jinja2 import TemplateError, TemplateSyntaxError, UndefinedError
    from jinja2.exceptions import SecurityError

    context: dict[str, object] = {"env": _EnvVars(os.environ)}
    context.update(variables or {})
    try:
        chunks, size = [], 0
        # Streamed, so that a loop that writes gigabytes is stopped at the first megabyte.
        for chunk in _environment().from_string(text).generate(context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise SecurityError(f"the rendered spec is longer than {MAX_OUTPUT_CHARS} characters")
            chunks.append(chunk)
        return "".join(chunks)
    except TemplateSyntaxError as exc:
        issue = SpecIssue(f"line {exc.lineno}", None, f"template syntax error: {exc.message}", source)
    except UndefinedError as exc:
        match = _UNDEFINED_NAME.search(exc.message or "")
        name = (match.group(1) or match.group(2)) if match else "template"
        issue = SpecIssue(name, None, f"undefined template variable{_line_of(exc)}: {exc.message}; pass it "
                          "as a variable or give a default with |default(...)", source)
    except SecurityError as exc:
        issue = SpecIssue("template", None, f"not allowed in a template{_line_of(exc)}: {exc}", source)
    except (TemplateError, ArithmeticError, LookupError, TypeError, ValueError) as exc:
        issue = SpecIssue("template", None,
                          f"template failed{_line_of(exc)}: {type(exc).__name__}: {exc}", source)
    raise SpecError([issue]) from None


def _line_of(exc: BaseException) -> str:
    """' at line N' for the innermost template frame of ``exc``'s traceback, or ''."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == _TEMPLATE_FRAME]
    return f" at line {lines[-1]}" if lines else ""
