"""What every format reader does, and what it tells of a file.

A format reader knows one file format and nothing of shares or orders: it reads a file's
schema and cuts the file into *units* (:class:`Unit`: rows and the byte range they live in),
the smallest pieces it can read alone; and it reads units as Arrow tables, with the columns
asked for and, where the format's own statistics allow it, rows that cannot match a filter
skipped unread. Where a file is wrong it raises :class:`BadFile`, naming what and where (the
byte offset when it is known), which the caller turns into one line naming the input too.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = ["BadFile", "FileInfo", "Format", "Unit"]


class BadFile(Exception):
    """A file that cannot be read as its format: ``offset`` is where it went wrong, when known."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset

    def __str__(self) -> str:
        where = f" (at byte {self.offset})" if self.offset is not None else ""
        return f"{self.args[0]}{where}"


@dataclass(frozen=True)
class Unit:
    """The smallest piece of a file read alone: ``rows`` rows in bytes ``[offset, offset + length)``."""

    rows: int
    offset: int
    length: int


@dataclass(frozen=True)
class FileInfo:
    """One file as its format reader found it. ``extra`` holds what the reader needs again to read
    a unit (JSON-able: an Avro file's header length, a TFRecord file's compression)."""

    schema: pa.Schema
    rows: int
    units: tuple[Unit, ...]
    extra: dict[str, Any] = field(default_factory=dict)


class Format:
    """One file format: its name, the extensions it is known by, and the two things it does."""

    name: str = ""
    extensions: tuple[str, ...] = ()
    #: Whether a filter's columns can be read alone, cheaply (columnar formats).
    columnar: bool = False

    def inspect(self, file: Any, size: int) -> FileInfo:  # pragma: no cover - interface
        """The schema and the units of the open file ``file`` of ``size`` bytes."""
        raise NotImplementedError

    def open(self, file: Any) -> Any:
        """What :meth:`read` reads units from, made once for an open file: the file itself, or a
        reader of its own that holds the file's footer (read once, not at every unit)."""
        return file

    def read(self, file: Any, info: FileInfo, unit: int, columns: Sequence[str] | None) -> pa.Table:
        """Unit ``unit`` of the file (what :meth:`open` made of it) as a table of ``columns``
        (None: all of them)."""
        raise NotImplementedError  # pragma: no cover - interface

    def pruned(self, info: FileInfo, file: Any, expression: Any) -> list[bool]:
        """For each unit, whether the format's statistics prove no row of it can match ``expression``
        (read without opening the unit; False where the format keeps none)."""
        return [False] * len(info.units)
