"""Azkaban properties: Java ``.properties`` files, layered props, and ``${name}`` substitution.

Azkaban keeps a job's configuration as a chain of layers (its ``Props``): the job file on top,
then whatever it inherits. A key is looked up from the top layer down. This module reads the
files the way ``java.util.Properties.load`` does (ISO-8859-1, backslash escapes, ``\\uXXXX``,
continuation lines, ``=``, ``:`` or white space between key and value), chains them the way
Azkaban does (:func:`directory_chains`), and substitutes ``${name}`` references the way Azkaban
does before a job runs (:func:`resolve`).

Every layer remembers the file and line each key came from, so an error can say where to look.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import javaproperties

from tony_workflow.spec import SpecError, SpecIssue

__all__ = [
    "VARIABLE",
    "Origin",
    "Props",
    "PropsError",
    "directory_chains",
    "dump_properties",
    "load_properties",
    "read_properties",
    "resolve",
]

#: A reference Azkaban substitutes. Names are letters, digits, '_' and '.', as Azkaban's own pattern
#: allows; anything else between ``${`` and ``}`` (``${job:param}`` in flow conditions) is left as is.
VARIABLE = re.compile(r"\$\{([a-zA-Z_.0-9]+)\}")

# A "${" with no "}" after it on the rest of the value.
_UNTERMINATED = re.compile(r"\$\{[^}]*$")

PROPERTIES_SUFFIX = ".properties"


class PropsError(SpecError):
    """Properties that cannot be read or resolved; ``issues`` names the file, line and key of each."""


@dataclass(frozen=True)
class Origin:
    """Where a key was set: ``source`` (a file, or a description such as ``runtime``) and ``line``."""

    source: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


class Props(Mapping[str, str]):
    """One layer of properties over an optional ``parent`` layer.

    ``values`` are this layer's own keys. Reading a key (``props[key]``, ``get``) looks in this layer,
    then in the parent, and so on; iterating yields every visible key once. ``source`` names the
    layer (a file path relative to the project, or a word such as ``runtime``) and ``lines`` maps
    this layer's keys to the line that set them.
    """

    def __init__(self, values: Mapping[str, str] | None = None, *, parent: Props | None = None,
                 source: str = "", lines: Mapping[str, int] | None = None):
        self.values = dict(values or {})
        self.parent = parent
        self.source = source
        self.lines = dict(lines or {})

    def __getitem__(self, key: str) -> str:
        layer = self.layer_of(key)
        if layer is None:
            raise KeyError(key)
        return layer.values[key]

    def __iter__(self) -> Iterator[str]:
        seen = set()
        for layer in self.layers():
            for key in layer.values:
                if key not in seen:
                    seen.add(key)
                    yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return self.layer_of(key) is not None  # type: ignore[arg-type]

    def __repr__(self) -> str:
        names = " <- ".join(layer.source or "?" for layer in self.layers())
        return f"Props({names})"

    def layers(self) -> Iterator[Props]:
        """This layer, then each ancestor, top to bottom."""
        layer: Props | None = self
        while layer is not None:
            yield layer
            layer = layer.parent

    def layer_of(self, key: str) -> Props | None:
        """The topmost layer that sets ``key``, or None."""
        for layer in self.layers():
            if key in layer.values:
                return layer
        return None

    def origin(self, key: str) -> Origin | None:
        """Where the visible value of ``key`` was set."""
        layer = self.layer_of(key)
        return None if layer is None else Origin(layer.source, layer.lines.get(key))

    def origins(self) -> dict[str, Origin]:
        return {key: self.origin(key) for key in self}  # type: ignore[misc]

    def flatten(self) -> dict[str, str]:
        """Every visible key with its value, as one dict."""
        return {key: self[key] for key in self}

    def over(self, parent: Props | None) -> Props:
        """A copy of this chain with ``parent`` put under its bottom layer (the chain itself is unchanged)."""
        copies = [Props(layer.values, source=layer.source, lines=layer.lines) for layer in self.layers()]
        copies[-1].parent = parent
        for upper, lower in pairwise(copies):
            upper.parent = lower
        return copies[0]

    def with_values(self, values: Mapping[str, str], source: str) -> Props:
        """A new top layer holding ``values`` over this chain."""
        return Props(values, parent=self, source=source)


# --------------------------------------------------------------------------------------------------
# Files


def read_properties(text: str, source: str = "") -> Props:
    """The properties in ``text``, parsed as ``java.util.Properties.load`` does, as one layer.

    A key set twice keeps its last value, as in Java. A malformed ``\\uXXXX`` escape raises
    :class:`PropsError` naming the line.
    """
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                values[element.key] = element.value
                lines[element.key] = line
            line += _line_breaks(element.source)
    except javaproperties.InvalidUEscapeError as exc:
        raise PropsError([SpecIssue(f"line {line}", exc.escape, "malformed \\uXXXX escape: "
                                    "\\u must be followed by four hexadecimal digits", source or None)]) from None
    return Props(values, source=source, lines=lines)


def _line_breaks(raw: str) -> int:
    # \r\n counts once; a lone \r or \n ends a line too, as Java's LineReader has it.
    return len(re.findall(r"\r\n|\r|\n", raw))


def load_properties(path: str | os.PathLike, *, parent: Props | None = None, source: str | None = None) -> Props:
    """The properties file at ``path`` (read as ISO-8859-1, like ``Properties.load(InputStream)``)
    as a layer over ``parent``. ``source`` names it in messages (default: the path)."""
    name = source or str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PropsError([SpecIssue("file", str(path), f"cannot be read: {exc.strerror or exc}", name)]) from None
    props = read_properties(data.decode("iso-8859-1"), name)
    props.parent = parent
    return props


def dump_properties(values: Mapping[str, str], path: str | os.PathLike, comment: str | None = None) -> None:
    """Writes ``values`` as ``Properties.store`` does: ISO-8859-1, every other character as ``\\uXXXX``,
    with ``comment`` and a timestamp as header comments."""
    text = javaproperties.dumps(values, comments=comment, timestamp=True, ensure_ascii=True, sort_keys=False)
    Path(path).write_bytes(text.encode("iso-8859-1"))


def directory_chains(root: str | os.PathLike, parent: Props | None = None) -> dict[Path, Props | None]:
    """The inherited properties of every directory under ``root``, as Azkaban's Flow 1.0 loader builds them.

    In each directory the ``.properties`` files are chained in name order, each a layer over the one
    before (a later file overrides an earlier one); the first hangs under the parent directory's chain
    (``parent`` for ``root``). The result maps each directory (as a path relative to ``root``, ``.``
    for the root) to the top of its chain, or to None where nothing is inherited. Sources are paths
    relative to ``root``. Hidden directories are skipped.
    """
    root = Path(root)
    chains: dict[Path, Props | None] = {}

    def walk(directory: Path, inherited: Props | None) -> None:
        relative = directory.relative_to(root)
        chain = inherited
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
        for path in entries:
            if path.is_file() and path.name.endswith(PROPERTIES_SUFFIX):
                chain = load_properties(path, parent=chain, source=relative_name(root, path))
        chains[relative] = chain
        for path in entries:
            if path.is_dir() and not path.name.startswith("."):
                walk(path, chain)

    walk(root, parent)
    return chains


def relative_name(root: Path, path: Path) -> str:
    """``path`` as Azkaban names project files: relative to the project root, with '/'."""
    return path.relative_to(root).as_posix()


# --------------------------------------------------------------------------------------------------
# Substitution


def resolve(props: Mapping[str, str], *, keys: Iterable[str] | None = None) -> dict[str, str]:
    """Every key of ``props`` (or only ``keys``) with ``${name}`` references replaced, as Azkaban does
    before it builds a job.

    A reference is replaced by the referenced key's value, itself resolved first, so references
    nest to any depth. A reference to a key that is not set, and a reference that leads back to a
    key on its own path (a cycle), are errors. Every problem is collected; :class:`PropsError`
    lists them, each naming the key, where it was set (when ``props`` is a :class:`Props`) and the
    chain of references that led there.

    Azkaban also evaluates ``$(...)`` expressions afterwards; those are left as they are here.
    """
    origins = props.origins() if isinstance(props, Props) else {}
    resolved: dict[str, str] = {}
    issues: list[SpecIssue] = []
    cache: dict[str, str] = {}
    for key in (keys if keys is not None else props):
        value = props[key]
        try:
            resolved[key] = _substitute(value, props, [key], cache)
        except _Unresolvable as exc:
            where = origins.get(key)
            issues.append(SpecIssue(key, value, exc.message, str(where) if where else None))
    if issues:
        raise PropsError(issues)
    return resolved


class _Unresolvable(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _substitute(value: str, props: Mapping[str, str], path: list[str], cache: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name in path:
            chain = " -> ".join([*path, name])
            raise _Unresolvable(f"circular substitution: {chain}")
        if name in cache:
            return cache[name]
        if name not in props:
            via = f" (via {' -> '.join([*path, name])})" if len(path) > 1 else ""
            raise _Unresolvable(f"${{{name}}} is not defined{via}: set {name} in the job, a .properties "
                                "file it inherits, or the flow's parameters")
        result = _substitute(props[name], props, [*path, name], cache)
        cache[name] = result
        return result

    if _UNTERMINATED.search(value):
        raise _Unresolvable("has a '${' that no '}' closes; a reference is written ${name} (Azkaban would "
                            "pass the text on as it is, and the job would get a value nobody meant)")
    return VARIABLE.sub(replace, value)
